#include "runtime/pinned.hpp"

#include <map>
#include <mutex>
#include <shared_mutex>

namespace kiln::detail {
namespace {

struct range {
  std::uintptr_t end;
  const device_impl* dev;
};

struct registry {
  std::shared_mutex mu;
  std::map<std::uintptr_t, range> by_start;
};

registry& pinned() {
  static auto* r = new registry;  // never destroyed: pinned buffers may be freed at exit
  return *r;
}

}  // namespace

void note_pinned(const device_impl* dev, const void* p, std::uint64_t bytes) {
  if (!p || !bytes) return;
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  registry& r = pinned();
  std::unique_lock lock(r.mu);
  r.by_start[a] = range{a + bytes, dev};
}

void forget_pinned(const void* p) noexcept {
  if (!p) return;
  registry& r = pinned();
  std::unique_lock lock(r.mu);
  r.by_start.erase(reinterpret_cast<std::uintptr_t>(p));
}

const device_impl* pinned_owner(const void* p, std::uint64_t bytes) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  registry& r = pinned();
  std::shared_lock lock(r.mu);
  auto it = r.by_start.upper_bound(a);
  if (it == r.by_start.begin()) return nullptr;
  --it;
  return a + bytes <= it->second.end ? it->second.dev : nullptr;
}

}  // namespace kiln::detail
