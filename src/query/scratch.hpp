// Per-device working memory of the query kernels: look-back status and value arrays (GPU),
// per-block or per-chunk partials, and a small block for tickets, results and counts; and
// pinned host slots the results are copied into for the host to read.
//
// Queries run on any queue, asynchronously: a scratch set is leased for the time it takes to
// enqueue one query, then given back while the device may still be using it. Sets remember
// the queue of their last query: a lease on that queue is ordered after it by the queue
// itself; a lease on another queue makes that queue wait (on the device) for the last one.
// So queries on one queue share one set, and queries on several queues get one each.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

#include "kiln/device.hpp"
#include "kiln/queue.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {

struct scratch {
  std::shared_ptr<memory_impl> status, agg, incl;  // look-back, `tiles` entries
  std::shared_ptr<memory_impl> part;               // partials, `parts` entries of 24 bytes
  std::shared_ptr<memory_impl> small;              // ticket @0, result @64, count @128
  std::uint64_t tiles = 0, parts = 0;
  std::uint32_t epoch = 0;
  std::weak_ptr<queue_impl> last;  // the queue of the last query that used this set
  // Expires once that queue is gone *and* its work done (queue_impl::drained). Between the two,
  // `last` has expired while the queue's destructor still waits for its kernels: not idle.
  std::weak_ptr<const void> last_drained;
  bool leased = false;

  static constexpr std::uint64_t result_offset = 64, count_offset = 128, lb_value_bytes = 16;
  static constexpr std::uint32_t max_epoch = (1u << 14) - 1;  // packed words hold 14 bits

  // Makes room for `tiles` look-back tiles and returns the epoch for the next launch.
  std::uint32_t prepare_lookback(queue& q, std::uint64_t tiles);
  void prepare_parts(queue& q, std::uint64_t parts);
  void prepare_small(queue& q);
};

struct device_scratch;

// Exclusive use of one scratch set of q's device while a query is enqueued on q.
class scratch_lease {
 public:
  explicit scratch_lease(queue& q);
  ~scratch_lease();
  scratch_lease(const scratch_lease&) = delete;
  scratch_lease& operator=(const scratch_lease&) = delete;
  scratch* operator->() const { return s_; }
  scratch& operator*() const { return *s_; }

 private:
  queue& q_;
  scratch* s_;
  device_scratch* ds_ = nullptr;  // the device's pool
};

// 64 bytes of pinned host memory a query's result (reduce_result or a count) is copied into.
// Given back when the query is known to be done, or with the event to wait for.
struct result_slot {
  unsigned char* host = nullptr;
  static constexpr std::uint64_t bytes = 64;
};
result_slot acquire_slot(const device& dev);
// `pending`: the slot may still be written until this event completes (empty: it is not).
void release_slot(const device& dev, result_slot s, std::optional<event> pending) noexcept;

}  // namespace kiln::detail::q
