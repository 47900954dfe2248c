// The log's level (KILN_LOG or set_log_level) and its one sink, serialised by one mutex.
#include "runtime/log.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>

#include "kiln/error.hpp"

namespace kiln::detail {

// Below trace until KILN_LOG is read (see log.hpp); constant-initialised, so valid before any
// constructor runs.
constinit std::atomic<int> log_threshold{-1};

namespace {

constexpr log_level default_level = log_level::warn;
constexpr const char* level_names[] = {"trace", "debug", "info", "warn", "error", "off"};

struct log_state {
  std::mutex mu;  // serialises the sink's calls and its replacement
  log_sink sink;  // empty: stderr
  std::once_flag env_once;
};
// Never destroyed: static destructors (a device lost at exit) may still log.
log_state& state() {
  static log_state* s = new log_state();
  return *s;
}

// Set while this thread runs the sink: a message logged from inside the sink goes to stderr
// rather than deadlocking on the mutex this thread holds.
thread_local bool t_in_sink = false;

void write_stderr(log_level level, std::string_view message) noexcept {
  std::string line;
  try {
    line.reserve(message.size() + 16);
    line.append("[kiln ").append(to_string(level)).append("] ").append(message).append("\n");
  } catch (...) {
    return;
  }
  std::fwrite(line.data(), 1, line.size(),
              stderr);  // one write: lines from processes interleave whole
}

void read_env() {
  log_level level = default_level;
  if (const char* v = std::getenv("KILN_LOG"); v && *v) {
    if (auto parsed = parse_log_level(v))
      level = *parsed;
    else  // straight to stderr: no sink can be set yet when this runs at load time
      write_stderr(log_level::warn, std::string("KILN_LOG=") + v +
                                        " is not a log level; accepted: trace, debug, info, "
                                        "warn, error, off; using warn");
  }
  log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

void ensure_env() noexcept {
  try {
    std::call_once(state().env_once, read_env);
  } catch (...) {  // call_once's system error, or no memory for the warning: keep the default
    int unset = -1;
    log_threshold.compare_exchange_strong(unset, static_cast<int>(default_level));
  }
}

// Read at load time, so log_enabled() is exact from then on (the slow path covers earlier).
const bool env_read_at_load = (ensure_env(), true);

}  // namespace

void log(log_level level, std::string_view message) {
  if (level >= log_level::off) return;
  if (log_threshold.load(std::memory_order_relaxed) < 0) ensure_env();
  if (!log_enabled(level)) return;
  if (t_in_sink) {  // logged from inside the sink: this thread already holds the mutex
    write_stderr(level, message);
    return;
  }
  try {
    log_state& s = state();
    std::lock_guard lock(s.mu);
    if (!s.sink) {
      write_stderr(level, message);
      return;
    }
    t_in_sink = true;
    try {
      s.sink(level, message);
    } catch (const std::exception& e) {
      write_stderr(log_level::error, std::string("the log sink threw: ") + e.what());
    } catch (...) {
      write_stderr(log_level::error, "the log sink threw a non-standard exception");
    }
    t_in_sink = false;
  } catch (...) {  // the mutex failed: the message is dropped, the caller goes on
    t_in_sink = false;
  }
}

std::optional<log_level> parse_log_level(std::string_view text) noexcept {
  for (std::size_t i = 0; i < std::size(level_names); ++i) {
    const std::string_view name = level_names[i];
    if (text.size() != name.size()) continue;
    bool same = true;
    for (std::size_t c = 0; c < name.size() && same; ++c)
      same = std::tolower(static_cast<unsigned char>(text[c])) == name[c];
    if (same) return static_cast<log_level>(i);
  }
  return std::nullopt;
}

std::optional<std::uint64_t> parse_byte_count(std::string_view text) noexcept {
  std::uint64_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  if (i == 0) return std::nullopt;
  std::string_view suffix = text.substr(i);
  unsigned shift = 0;
  if (!suffix.empty()) {
    switch (std::toupper(static_cast<unsigned char>(suffix[0]))) {
      case 'K': shift = 10; break;
      case 'M': shift = 20; break;
      case 'G': shift = 30; break;
      default: return std::nullopt;
    }
    suffix.remove_prefix(1);
    if (suffix != "" && suffix != "iB" && suffix != "B") return std::nullopt;
  }
  if (shift && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::uint64_t log_alloc_bytes() noexcept {
  static const std::uint64_t bytes = [] {
    constexpr std::uint64_t default_bytes = std::uint64_t(64) << 20;
    const char* v = std::getenv("KILN_LOG_ALLOC_BYTES");
    if (!v || !*v) return default_bytes;
    if (auto parsed = parse_byte_count(v)) return *parsed;
    logf(log_level::warn,
         "KILN_LOG_ALLOC_BYTES={} is not a byte count (e.g. 1048576, 512K, 64M, 1G); using 64M", v);
    return default_bytes;
  }();
  return bytes;
}

}  // namespace kiln::detail

namespace kiln {

void set_log_level(log_level level) {
  if (static_cast<int>(level) < 0 || level > log_level::off)
    throw invalid_argument("kiln::set_log_level: " + std::to_string(static_cast<int>(level)) +
                           " is not a log_level");
  detail::ensure_env();  // read (and, if bad, warned about) once, then overridden
  detail::log_threshold.store(static_cast<int>(level), std::memory_order_relaxed);
}

log_level get_log_level() noexcept {
  detail::ensure_env();
  return static_cast<log_level>(detail::log_threshold.load(std::memory_order_relaxed));
}

void set_log_sink(log_sink sink) {
  if (detail::t_in_sink)
    throw invalid_argument("kiln::set_log_sink called from inside the log sink");
  detail::log_state& s = detail::state();
  {
    std::lock_guard lock(s.mu);  // waits for a message being delivered
    s.sink.swap(sink);
  }
  // The old sink is destroyed here, outside the lock: its destructor may log.
}

const char* to_string(log_level level) noexcept {
  const auto i = static_cast<std::size_t>(level);
  return i < std::size(detail::level_names) ? detail::level_names[i] : "unknown";
}

}  // namespace kiln
