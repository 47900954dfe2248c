// Enqueuing a query (run.cpp): plan (cached per shape), then each segment's kernels on a
// queue. Nothing is waited for, except where a later segment needs a filter's survivor count
// on the host (positions after a filter: take, skip, ...). async.cpp builds the synchronous
// terminals and the asynchronous handles on it.
#pragma once

#include "kiln/query.hpp"
#include "query/scratch.hpp"

namespace kiln::detail::q {

// The device a query runs on, once its host inputs (if any) are staged; checks the inputs.
// `q`: the queue it will run on (null: the device's default queue).
device prepare(query_desc& d, const queue* q);

// What an enqueued query leaves behind. The result lands in `slot` when the queue reaches
// it: a reduce_result, or (count_in_slot) a collect's survivor count.
struct enqueued {
  device dev{nullptr};
  result_slot slot;
  bool count_in_slot = false;
  collect_result collected;     // outputs; count unless count_in_slot
  std::uint64_t out_bytes = 0;  // bytes per collected element (stats)
  enqueued() = default;
  enqueued(enqueued&& o) noexcept;
  enqueued& operator=(enqueued&& o) noexcept;
  ~enqueued();  // gives an unreleased slot back (the caller releases it with its event)
  // Hands the slot over: the caller gives it back (release_slot).
  result_slot take_slot() noexcept { return std::exchange(slot, result_slot{}); }
};

enqueued enqueue_collect(query_desc& d, queue& q);
enqueued enqueue_reduce(query_desc& d, const reduce_spec& r, queue& q);

// This thread's statistics of its last query (reset by prepare).
query_stats& thread_stats();

}  // namespace kiln::detail::q
