// Log lines of the resilience paths (device loss and reset, fallbacks): one place, so that
// each event is worded the same wherever it is detected.
#pragma once

#include <string>

namespace kiln::detail {
struct device_impl;

void log_device_lost(const device_impl& d, const std::string& why);
void log_device_reset(const device_impl& d);
// A fallback moved work off `from` onto `to` because of `why` (the error's first line).
void log_fallback(const std::string& what, const std::string& from, const std::string& to,
                  const std::string& why);

}  // namespace kiln::detail
