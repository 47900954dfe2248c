// `kiln cache [--json]`, `kiln cache clear [--json]`: the disk cache's location, entries and
// size; clearing it.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.hpp"
#include "runtime/disk_cache.hpp"

namespace kiln::tool {

int cache(const cache_options& o) {
  std::optional<detail::disk_cache> c;
  if (auto dir = detail::disk_cache::configured_dir()) c.emplace(std::move(*dir));
  std::size_t removed = 0;
  detail::disk_cache::stats s;
  if (c && o.clear)
    removed = c->clear();
  else if (c)
    s = c->scan();

  if (o.json) {
    using json = nlohmann::ordered_json;
    json out = {{"dir", c ? json(c->dir().string()) : json(nullptr)}, {"enabled", c.has_value()}};
    if (o.clear) {
      out["removed"] = removed;
    } else {
      out["entries"] = s.entries;
      out["bytes"] = s.bytes;
    }
    print_json(out);
  } else if (!c) {
    std::puts("kernel cache: disabled (KILN_CACHE=0, or no HOME / KILN_CACHE_DIR)");
  } else if (o.clear) {
    std::printf("removed %zu entries from %s\n", removed, c->dir().c_str());
  } else {
    std::printf("kernel cache: %s\n  entries: %zu\n  size: %s\n", c->dir().c_str(), s.entries,
                human_bytes(s.bytes).c_str());
  }
  return 0;
}

}  // namespace kiln::tool
