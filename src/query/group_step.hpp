// kiln::query's group barrier (segment.hpp's group_step): a materialised segment's outputs,
// the key first, reduced run by run on the device (src/sort/reduce_by_key) into one element
// per run of equal keys. group_by and distinct sort first (sort_step.hpp).
#pragma once

#include <vector>

#include "kiln/query/desc.hpp"
#include "kiln/queue.hpp"
#include "query/segment.hpp"

namespace kiln::detail::q {

// r.outputs become the key (when g.keep_key) and one column per aggregate; r.count the number
// of runs, which is read on the host (one wait). sort_first: groups of equal keys wherever they
// are (group_by, distinct), by a hash table on GPUs where that is exact, else by sorting the
// rows first; otherwise runs of equal keys as they come. kiln::unsupported for 16-bit types.
void group_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                     const group_step& g, bool sort_first);

}  // namespace kiln::detail::q
