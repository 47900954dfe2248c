// Kiln's diagnostics log: levels and a sink. docs/diagnostics.md lists what is logged at
// which level.
//
//   kiln::set_log_level(kiln::log_level::info);  // or KILN_LOG=info in the environment
//   kiln::set_log_sink([](kiln::log_level l, std::string_view m) {
//     my_logger.write(kiln::to_string(l), m);  // called from any thread, one at a time
//   });
//   ...
//   kiln::set_log_sink({});  // back to stderr: "[kiln warn] message"
#pragma once

#include <functional>
#include <string_view>

namespace kiln {

enum class log_level { trace, debug, info, warn, error, off };

// Overrides KILN_LOG (trace|debug|info|warn|error|off; the default is warn).
void set_log_level(log_level level);
log_level get_log_level() noexcept;

// Receives every message at or above the level, from any thread (serialised by Kiln).
// An empty function restores the default sink (stderr, "[kiln warn] message").
// A sink must not call set_log_sink; an exception it throws is reported on stderr and dropped.
using log_sink = std::function<void(log_level, std::string_view message)>;
void set_log_sink(log_sink sink);

// "trace", "debug", "info", "warn", "error", "off".
const char* to_string(log_level) noexcept;

}  // namespace kiln
