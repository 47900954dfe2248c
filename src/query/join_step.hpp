// kiln::query's join barrier (segment.hpp's join_step): a materialised segment's outputs, its
// key first, joined on the device (src/sort/join) with another query's elements of equal key.
#pragma once

#include <vector>

#include "kiln/query/desc.hpp"
#include "kiln/queue.hpp"
#include "query/segment.hpp"

namespace kiln::detail::q {

// Runs `other`, finds the pairs of equal keys (this side streamed, the other sorted and
// searched) and replaces r's outputs with this side's components, the other's (zero where a
// left join found no match), then, for a left join, a bool `matched`; r.count the pairs, read
// on the host (one wait). kiln::dtype_error for keys of different types; kiln::invalid_argument
// for an other query on another device.
void join_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                    const query_desc& other, bool left);

}  // namespace kiln::detail::q
