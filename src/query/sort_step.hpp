// kiln::query's sort barrier (plan.cpp's sort_step): a materialised segment's outputs reordered
// by the first one, stably, on the device (src/sort/radix_sort), the others carried along.
#pragma once

#include <vector>

#include "kiln/query/desc.hpp"
#include "kiln/queue.hpp"

namespace kiln::detail::q {

// r.outputs[0] is the key; every output is replaced by its sorted copy (r.count elements).
// Enqueued on q without a host wait. kiln::unsupported for f16/bf16 keys.
void sort_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                    bool descending);

}  // namespace kiln::detail::q
