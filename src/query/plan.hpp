// Planning a query: segments (one fused kernel each) and their structural keys. Planning
// launches nothing; run.cpp executes the plan.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kiln/kernel.hpp"
#include "query/segment.hpp"

namespace kiln::detail::q {

// Cuts the query into segments, materialising where a step needs positions after a filter
// (take, skip, enumerate, _i, a scan) or anything but a map follows a scan. The last segment
// ends in the terminal: `no_filter_at_end` (argmin/argmax) and `no_scan_at_end` (reductions)
// move a trailing filter or scan into a segment of its own.
std::vector<segment> plan(const query_desc& d, segment_end terminal, bool no_filter_at_end,
                          bool no_scan_at_end);

// Everything a segment's generated program depends on: its structure, the query's roots and
// capture types (the kernels' parameters and helpers), the reduction, the template (GPU or CPU)
// and the codegen target's name.
std::uint64_t segment_key(const segment& s, const query_desc& d, const reduce_spec* r, bool gpu,
                          const char* target);

// A plan with each segment's program key, cached per query shape: a query of a shape seen
// before on the same device neither plans, nor hashes segments, nor looks its kernels up.
struct query_plan {
  std::vector<segment> segments;
  std::vector<std::uint64_t> keys;  // segment_key of each segment
  struct program {
    std::once_flag once;
    std::vector<kernel> kernels;  // set by the first run of the segment (run.cpp)
  };
  std::unique_ptr<program[]> programs;  // one per segment
};

// The plan of d's shape: the IR's structure, the stages (take/skip without their counts,
// which slices read from d at run time), the terminal and the reduction. Planned on a miss.
std::shared_ptr<query_plan> cached_plan(const query_desc& d, segment_end terminal,
                                        bool no_filter_at_end, bool no_scan_at_end,
                                        const reduce_spec* r, bool gpu, const char* target);

// For KILN_DUMP_KERNELS: the segment's stages by IR node, then the query's IR graph.
std::string describe(const segment& s, const ir::graph& g);

}  // namespace kiln::detail::q
