#include "query/scratch.hpp"

#include <algorithm>
#include <map>

#include "kiln/buffer.hpp"

namespace kiln::detail::q {
namespace {
void zero(queue& q, memory_impl& m, std::uint64_t bytes) {
  const std::uint32_t z = 0;
  detail::fill(*q.impl(), m, 0, &z, sizeof z, bytes / sizeof z);
}
}  // namespace

std::uint32_t scratch::prepare_lookback(const device& dev, queue& q, std::uint64_t n) {
  if (n > tiles) {
    const std::uint64_t cap = std::max<std::uint64_t>(n, tiles * 2);
    status = detail::allocate(dev, cap * 4);
    agg = detail::allocate(dev, cap * lb_value_bytes);
    incl = detail::allocate(dev, cap * lb_value_bytes);
    zero(q, *status, cap * 4);
    zero(q, *incl, cap * lb_value_bytes);  // packed status words live here
    tiles = cap;
    epoch = 0;
  }
  if (epoch >= max_epoch) {  // epochs wrapped: clear, so no stale word matches a new epoch
    zero(q, *status, tiles * 4);
    zero(q, *incl, tiles * lb_value_bytes);
    epoch = 0;
  }
  return ++epoch;
}

void scratch::prepare_parts(const device& dev, std::uint64_t n) {
  if (n <= parts) return;
  parts = std::max<std::uint64_t>(n, 1024);
  part = detail::allocate(dev, parts * 24);
}

void scratch::prepare_small(const device& dev, queue& q) {
  if (small) return;
  small = detail::allocate(dev, 256);
  zero(q, *small, 256);  // the reduce ticket starts at 0; the last block resets it
}

scratch& scratch_for(const device& dev) {
  static std::mutex mu;
  // Never destroyed, like the devices: no device memory is freed after a driver shut down.
  static auto* all = new std::map<const device_impl*, std::unique_ptr<scratch>>;
  std::lock_guard lock(mu);
  auto& s = (*all)[dev.impl().get()];
  if (!s) s = std::make_unique<scratch>();
  return *s;
}

}  // namespace kiln::detail::q
