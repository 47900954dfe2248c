#include "runtime/generated_kernels.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <list>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "runtime/runtime.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::detail {
namespace {

struct cache {
  // (device, generator's name folded into the key): a hit costs one hash-table probe.
  using key_t = std::pair<const void*, std::uint64_t>;
  struct key_hash {
    std::size_t operator()(const key_t& k) const noexcept {
      return static_cast<std::size_t>(
          k.second ^ (reinterpret_cast<std::uintptr_t>(k.first) * 0x9E3779B97F4A7C15ull));
    }
  };
  std::mutex mu;
  std::unordered_map<key_t, std::vector<kernel>, key_hash> entries;
  std::list<key_t> order;  // oldest first
  generated_kernel_stats stats;
  static constexpr std::size_t max_entries = 512;
};
cache& the_cache() {
  static auto* c = [] {
    auto* made = new cache;  // never destroyed: holds device objects
    // A reset device's kernels belong to its old generation: forget them.
    on_device_reset([](const device_impl* d) {
      cache& c = the_cache();
      std::vector<std::vector<kernel>> dropped;  // released outside the lock
      std::lock_guard lock(c.mu);
      for (auto it = c.order.begin(); it != c.order.end();)
        if (it->first == d) {
          auto e = c.entries.find(*it);
          dropped.push_back(std::move(e->second));
          c.entries.erase(e);
          it = c.order.erase(it);
        } else {
          ++it;
        }
    });
    return made;
  }();
  return *c;
}

const char* dump_dir() {
  const char* dir = std::getenv("KILN_DUMP_KERNELS");
  return dir && *dir ? dir : nullptr;
}

void dump(const char* generator, std::uint64_t key, const generated_program& g) {
  const char* dir = dump_dir();
  if (!dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  std::ofstream out(std::filesystem::path(dir) / generated_name(generator, key));
  std::size_t at = 0;
  while (at < g.about.size()) {
    const std::size_t end = std::min(g.about.find('\n', at), g.about.size());
    out << "// " << std::string_view(g.about).substr(at, end - at) << "\n";
    at = end + 1;
  }
  out << g.source;
}

}  // namespace

std::string generated_name(const char* generator, std::uint64_t key) {
  char hex[20];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(key));
  return std::string(generator) + "_" + hex + ".kiln";
}

generated_kernels get_generated(const device& dev, const char* generator, std::uint64_t key,
                                const std::function<generated_program()>& render) {
  cache& c = the_cache();
  const cache::key_t k{dev.impl().get(),
                       XXH3_64bits_withSeed(generator, std::strlen(generator), key)};
  {
    std::lock_guard lock(c.mu);
    if (auto it = c.entries.find(k); it != c.entries.end()) {
      c.stats.hits++;
      std::vector<kernel> ks = it->second;
      if (dump_dir()) dump(generator, key, render());
      return {std::move(ks), false};
    }
    c.stats.misses++;
  }
  // Compiled outside the lock: other shapes stay served meanwhile.
  const generated_program g = render();
  dump(generator, key, g);
  const auto before = cache_stats().compiles;
  const program p = g.native ? compile_native(dev, g.source, g.options)
                             : program::compile(dev, g.source, {}, check_mode::off);  // unchecked
  generated_kernels r;
  r.compiled = cache_stats().compiles > before;
  for (const auto& name : g.kernels) r.kernels.push_back(p.get_kernel(name));
  std::lock_guard lock(c.mu);
  if (r.compiled) c.stats.compiles++;
  auto [it, fresh] = c.entries.emplace(k, r.kernels);
  if (!fresh) {
    // Another thread compiled the same kernels first: every caller of one key gets the kernels
    // the cache keeps. (Programs are no longer unloaded under queued launches either way:
    // program::compile shares one program per source, and the CPU plugin keeps a library
    // loaded while launches from it wait.)
    r.kernels = it->second;
    return r;
  }
  c.order.push_back(k);
  if (c.entries.size() > cache::max_entries) {
    c.entries.erase(c.order.front());
    c.order.pop_front();
  }
  return r;
}

generated_kernel_stats generated_stats() {
  cache& c = the_cache();
  std::lock_guard lock(c.mu);
  return c.stats;
}

}  // namespace kiln::detail
