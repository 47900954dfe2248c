// Per-device working memory of the query kernels: look-back status and value arrays (GPU),
// per-block or per-chunk partials, and a small block for tickets and results. Queries on one
// device run on its default queue, in order, so they can share it; the mutex covers a query
// from its first launch to the read of its result.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "kiln/device.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {

struct scratch {
  std::recursive_mutex mu;
  std::shared_ptr<memory_impl> status, agg, incl;  // look-back, `tiles` entries
  std::shared_ptr<memory_impl> part;               // partials, `parts` entries of 24 bytes
  std::shared_ptr<memory_impl> small;              // ticket @0, result @64, count @128
  std::uint64_t tiles = 0, parts = 0;
  std::uint32_t epoch = 0;

  static constexpr std::uint64_t result_offset = 64, count_offset = 128, lb_value_bytes = 16;
  static constexpr std::uint32_t max_epoch = (1u << 14) - 1;  // packed words hold 14 bits

  // Makes room for `tiles` look-back tiles and returns the epoch for the next launch.
  std::uint32_t prepare_lookback(const device& dev, queue& q, std::uint64_t tiles);
  void prepare_parts(const device& dev, std::uint64_t parts);
  void prepare_small(const device& dev, queue& q);
};

scratch& scratch_for(const device& dev);

}  // namespace kiln::detail::q
