// Device-side checks reported later, as a GPU framework's device-side assert: a count of bad
// values (labels outside the classes, indices outside a tensor) is copied into pinned memory on
// the device's default queue, and a later checked call on that device throws it. Reading it
// back at once would stop the host every training step (data-parallel: tie every rank to the
// others' previous step, issue 23) and keep a step out of a CUDA graph. Used by
// nn::cross_entropy (src/nn/loss.cpp) and the indexing ops (src/tensor/indexing.cpp).
//
//   const tensor bad = ((y < 0) + (y >= c)).sum().to(scalar_type::i64);
//   if (!detail::defer_count_check(bad, [=](std::int64_t n) { return describe(n); }))
//     check_now(bad);   // `bad` did not evaluate to device memory
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "kiln/tensor.hpp"

namespace kiln::detail {

// First reports (kiln::invalid_argument) the first earlier check on bad's device that is done,
// or overdue (queued `max_lag` checks ago: it is waited for), and found a nonzero count; the
// message is what(count) + " in an earlier call on <device> (checked on the device, reported by
// a later call)". Then queues this check. False, and nothing queued, when bad (a 0-D int64
// tensor) does not evaluate to stored memory: the caller checks at once instead.
bool defer_count_check(const tensor& bad, std::function<std::string(std::int64_t)> what);

}  // namespace kiln::detail
