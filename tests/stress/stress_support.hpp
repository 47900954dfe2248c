// Helpers of the stress tests: sizes from the environment, the process's resident memory, and
// a watchdog that turns a hang into a failure with a message instead of a CI job that never ends.
#pragma once

#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace stress {

// Built with a sanitizer: its allocator quarantines freed memory and its shadow grows, so the
// resident-memory bound means nothing there (device memory is still checked exactly).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool sanitized = true;
#else
inline constexpr bool sanitized = false;
#endif
#if defined(__SANITIZE_THREAD__)
inline constexpr bool thread_sanitized = true;
#else
inline constexpr bool thread_sanitized = false;
#endif

// The unsigned value of environment variable `name`, or `fallback` when unset or empty.
// A value that is not a number aborts the test run with a message (a typo must not pass).
inline std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0') {
    std::fprintf(stderr, "%s=%s is not a whole number\n", name, v);
    std::abort();
  }
  return x;
}

inline double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (*end != '\0' || !(x >= 0)) {
    std::fprintf(stderr, "%s=%s is not a number of seconds\n", name, v);
    std::abort();
  }
  return x;
}

// Bytes the process's heap hands out now (glibc's mallinfo2: arenas plus mmapped blocks). Unlike
// the resident set it does not count freed memory an arena keeps, nor pinned memory the driver
// maps itself: a leak of host objects shows here whatever the allocator's layout.
inline std::uint64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return std::uint64_t(m.uordblks) + std::uint64_t(m.hblkhd);
}

// Resident set size of this process in bytes (/proc/self/statm), 0 where unavailable. Free
// heap memory is first given back (malloc_trim): glibc keeps what 128 threads freed in their
// arenas (a new arena per thread on a 32-core host), which is the allocator's cache, not a leak
// of Kiln's; the heap in use (heap_in_use) still shows a leak of live objects.
inline std::uint64_t resident_bytes() {
  malloc_trim(0);
  std::FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<std::uint64_t>(sysconf(_SC_PAGESIZE)) : 0;
}

// The resident set by kind (/proc/self/status, after malloc_trim as above): anonymous memory
// (heap, stacks, anonymous mappings), pages of mapped files, and shared memory (the driver's
// pinned host memory maps its device file). A leak shows in the anonymous and shared kinds;
// file pages grow when a library the driver loads lazily (cuBLAS, NVRTC's builtins, the code
// of a kernel module loaded on first launch) is first touched, which is not a leak.
struct resident_kinds {
  std::uint64_t anon = 0, file = 0, shmem = 0;
  std::uint64_t bounded() const { return anon + shmem; }
};
inline resident_kinds resident_by_kind() {
  malloc_trim(0);
  resident_kinds r;
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return r;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kb = 0;
    if (std::sscanf(line, "RssAnon: %llu kB", &kb) == 1) r.anon = kb << 10;
    if (std::sscanf(line, "RssFile: %llu kB", &kb) == 1) r.file = kb << 10;
    if (std::sscanf(line, "RssShmem: %llu kB", &kb) == 1) r.shmem = kb << 10;
  }
  std::fclose(f);
  return r;
}

// Resident bytes per mapping (/proc/self/smaps, "start name" as the key, so a mapping that grew
// keeps its key; anonymous mappings have no name), to say where the resident set grew when it grew.
inline std::map<std::string, std::uint64_t> resident_mappings() {
  std::map<std::string, std::uint64_t> out;
  std::FILE* f = std::fopen("/proc/self/smaps", "r");
  if (!f) return out;
  char line[512];
  std::string key;
  while (std::fgets(line, sizeof line, f)) {
    unsigned long long kb = 0;
    char range[64] = {}, name[400] = {};
    if (std::sscanf(line, "Rss: %llu kB", &kb) == 1) {
      out[key] += kb << 10;
    } else if (std::sscanf(line, "%63[0-9a-f-] %*s %*s %*s %*s %399[^\n]", range, name) >= 1 &&
               std::strchr(range, '-')) {
      key = std::string(range, std::strchr(range, '-')) + " " + name;
    }
  }
  std::fclose(f);
  return out;
}

// The mappings whose resident bytes grew most from `before` to `after` (new ones included),
// largest first, and their total: "+290 MiB: +120 MiB 7f..-7f.. [anon], ...".
inline std::string resident_growth(const std::map<std::string, std::uint64_t>& before,
                                   const std::map<std::string, std::uint64_t>& after,
                                   std::size_t top = 8) {
  std::vector<std::pair<std::int64_t, std::string>> grew;
  std::int64_t total = 0;
  for (const auto& [key, bytes] : after) {
    const auto it = before.find(key);
    const std::int64_t d =
        static_cast<std::int64_t>(bytes) - (it == before.end() ? 0 : std::int64_t(it->second));
    total += d;
    if (d > 0) grew.emplace_back(d, key);
  }
  for (const auto& [key, bytes] : before)
    if (!after.count(key)) total -= static_cast<std::int64_t>(bytes);
  std::sort(grew.begin(), grew.end(), std::greater<>());
  std::string s = "resident change by mapping " + std::to_string(total >> 20) + " MiB in all:";
  for (std::size_t i = 0; i < grew.size() && i < top; ++i)
    s += " +" + std::to_string(grew[i].first >> 10) + " KiB " + grew[i].second + ";";
  return s;
}

// Aborts the process, after printing `what` and report(), unless disarmed (destroyed) within
// `limit`. A deadlocked test cannot be failed any other way: its threads never return to
// GoogleTest, and exit() would run destructors under their feet. abort() fails the binary (and
// ctest's test) at once, with the message as the last words in the log.
class watchdog {
 public:
  watchdog(std::string what, std::chrono::duration<double> limit,
           std::function<std::string()> report)
      : thread_([this, what = std::move(what), limit, report = std::move(report)] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
          std::fprintf(stderr,
                       "\n[ WATCHDOG ] %s did not finish within %.0f s: a deadlock or "
                       "a stall. %s\nAborting.\n",
                       what.c_str(), limit.count(), report().c_str());
          std::fflush(stderr);
          std::abort();
        }) {}
  ~watchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts after the members it reads
};

}  // namespace stress
