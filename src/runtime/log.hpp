// Kiln's internal logging calls. Formatting is fmt's (std::format's model; g++ 12 has no
// <format>), header-only and private to libkiln; the sink and level are kiln/log.hpp's.
//
//   detail::logf(log_level::info, "compiled {} for {} in {:.1f} ms", names, dev.id(), ms);
//   if (detail::log_enabled(log_level::debug)) detail::log(log_level::debug, costly_text());
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string_view>

#include "kiln/log.hpp"

namespace kiln::detail {

// The lowest level that is emitted. Before KILN_LOG is read it is below trace, so the first
// message takes the slow path in log(), which reads KILN_LOG and checks again: no static
// initialisation order to depend on.
extern std::atomic<int> log_threshold;

inline bool log_enabled(log_level level) noexcept {  // one relaxed atomic load
  return static_cast<int>(level) >= log_threshold.load(std::memory_order_relaxed);
}

// Sends `message` to the sink if `level` is enabled; formats nothing; thread-safe. Never throws.
void log(log_level level, std::string_view message);

// Formats and logs only if `level` is enabled: a disabled call costs the load above.
template <class... A>
void logf(log_level level, fmt::format_string<A...> f, A&&... a) {
  if (!log_enabled(level)) return;
  try {
    fmt::memory_buffer text;
    fmt::format_to(std::back_inserter(text), f, std::forward<A>(a)...);
    log(level, std::string_view(text.data(), text.size()));
  } catch (...) {  // out of memory while formatting: logging never fails its caller
  }
}

// KILN_LOG's parser: "trace", "debug", "info", "warn", "error", "off" (any case); else nullopt.
std::optional<log_level> parse_log_level(std::string_view text) noexcept;

// KILN_LOG_ALLOC_BYTES's parser: a decimal byte count, optionally with a K, M or G suffix
// (binary units); else nullopt.
std::optional<std::uint64_t> parse_byte_count(std::string_view text) noexcept;

// Device allocations of at least this many bytes are logged at debug: KILN_LOG_ALLOC_BYTES,
// default 64 MiB, read once.
std::uint64_t log_alloc_bytes() noexcept;

}  // namespace kiln::detail
