#include "runtime/program_cache.hpp"

#include <utility>

namespace kiln::detail {

std::uint64_t program_cache::prehash(std::string_view s, std::string_view o) noexcept {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a
  auto mix = [&h](std::string_view part) {
    for (unsigned char c : part) h = (h ^ c) * 1099511628211ull;
  };
  const std::uint64_t sizes[2] = {s.size(), o.size()};
  mix(std::string_view(reinterpret_cast<const char*>(sizes), sizeof sizes));
  constexpr std::size_t edge = 64;
  mix(s.substr(0, edge));
  if (s.size() > edge) mix(s.substr(s.size() - std::min(edge, s.size() - edge)));
  mix(o);
  return h;
}

std::shared_ptr<program_impl> program_cache::find(std::string_view source, std::string_view options,
                                                  std::uint32_t gen) {
  const std::uint64_t h = prehash(source, options);
  std::lock_guard lock(mu_);
  auto it = map_.find(h);
  if (it == map_.end()) return nullptr;
  for (const entry& e : it->second)
    if (e.gen == gen && e.source == source && e.options == options) return e.program;
  return nullptr;
}

std::shared_ptr<program_impl> program_cache::insert(std::string_view source,
                                                    std::string_view options, std::uint32_t gen,
                                                    std::shared_ptr<program_impl> p) {
  const std::uint64_t h = prehash(source, options);
  std::shared_ptr<program_impl> stale;  // released outside the lock
  std::lock_guard lock(mu_);
  auto& bucket = map_[h];
  for (entry& e : bucket) {
    if (e.source != source || e.options != options) continue;
    if (e.gen == gen) return e.program;   // another thread won the race
    if (e.gen > gen) return p;            // p is the stale one (compiled across a reset)
    stale = std::exchange(e.program, p);  // compiled before a reset: replaced
    e.gen = gen;
    return p;
  }
  bucket.push_back({std::string(source), std::string(options), gen, p});
  return p;
}

void program_cache::clear() {
  decltype(map_) old;
  {
    std::lock_guard lock(mu_);
    old.swap(map_);
  }  // programs released outside the lock
}

}  // namespace kiln::detail
