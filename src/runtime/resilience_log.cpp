#include "runtime/resilience_log.hpp"

#include <cstdio>

#include "runtime/runtime.hpp"

namespace kiln::detail {

namespace {
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }
}  // namespace

void log_device_lost(const device_impl& d, const std::string& why) {
  std::fprintf(stderr, "[kiln warn] %s lost: %s\n", d.id.c_str(), first_line(why).c_str());
}

void log_device_reset(const device_impl& d) {
  std::fprintf(stderr, "[kiln info] %s reset (generation %u)\n", d.id.c_str(),
               d.generation.load());
}

void log_fallback(const std::string& what, const std::string& from, const std::string& to,
                  const std::string& why) {
  std::fprintf(stderr, "[kiln warn] fallback: %s moved from %s to %s: %s\n", what.c_str(),
               from.c_str(), to.c_str(), first_line(why).c_str());
}

}  // namespace kiln::detail
