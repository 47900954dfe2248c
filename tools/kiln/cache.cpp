#include <cstdio>

#include "commands.hpp"
#include "runtime/disk_cache.hpp"

namespace kiln::tool {

int cache(const std::vector<std::string>& args) {
  auto dir = detail::disk_cache::configured_dir();
  if (!dir) {
    std::puts("kernel cache: disabled (KILN_CACHE=0, or no HOME / KILN_CACHE_DIR)");
    return 0;
  }
  detail::disk_cache c(*dir);
  if (!args.empty() && args[0] == "clear") {
    std::printf("removed %zu entries from %s\n", c.clear(), dir->c_str());
    return 0;
  }
  if (!args.empty()) {
    std::fprintf(stderr, "kiln cache: unknown argument '%s' (expected: clear)\n", args[0].c_str());
    return 2;
  }
  auto s = c.scan();
  std::printf("kernel cache: %s\n  entries: %zu\n  size: %s\n", dir->c_str(), s.entries,
              human_bytes(s.bytes).c_str());
  return 0;
}

}  // namespace kiln::tool
