#include "runtime/resilience_log.hpp"

#include "runtime/log.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {

namespace {
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
}  // namespace

void log_device_lost(const device_impl& d, const std::string& why) {
  logf(log_level::error, "{} lost: {}", d.id, first_line(why));
}

void log_device_reset(const device_impl& d) {
  logf(log_level::warn, "{} reset (generation {}): objects made before it throw device_lost", d.id,
       d.generation.load());
}

void log_fallback(const std::string& what, const std::string& from, const std::string& to,
                  const std::string& why) {
  logf(log_level::warn, "fallback: {} moved from {} to {}: {}", what, from, to, first_line(why));
}

}  // namespace kiln::detail
