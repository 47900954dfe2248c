// One fused kernel's worth of a query: the stages it runs per element, where its inputs come
// from, and what it ends in. plan.cpp cuts a query into segments; codegen renders each into a
// kernel; run.cpp executes them in order.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/ir/node.hpp"
#include "kiln/query/desc.hpp"

namespace kiln::detail::q {

enum class segment_end : std::uint8_t {
  collect,  // write every component (map, or compaction after a filter)
  reduce,   // one value
  scan,     // collect with one scan stage inside
};

struct segment_input {
  int component = 0;  // which of the source's inputs or outputs (segment::after)
  int var = 0;        // the value it defines
  scalar_type type = scalar_type::f32;
  ir::layout shape;  // queries: rank 1, stride 1
};

// take/skip applied to the elements a segment receives, in order. A segment after a filter
// knows its length only once the filter ran, so slices are resolved at execution.
struct slice {
  stage_kind kind = stage_kind::take;
  std::uint64_t count = 0;
  int stage = -1;      // the query's stage it came from: a cached plan reads the count there
  bool exact = false;  // top_k: fewer than `count` elements is an error, not a shorter result
};

// A sort between two segments: the earlier one's outputs, reordered by its first output (the
// key) before this one reads them. drop_key: the key was computed for the sort (order_by) and
// is not a component of the element after it.
struct sort_step {
  bool on = false;
  bool descending = false;
  bool drop_key = false;
};

// A group stage between two segments (group_step.cpp): the earlier one's outputs are the key
// (first) and the aggregates' inputs; runs of equal keys (sorted first when sort.on) become one
// element each: the key (unless dropped), then one component per aggregate.
struct group_step {
  struct column {
    aggregate_kind kind = aggregate_kind::sum;
    int input = -1;  // which output of the earlier segment it aggregates (-1: count)
    scalar_type out_type = scalar_type::f32;
  };
  bool on = false;
  bool keep_key = true;
  std::vector<column> columns;
};

// A join between two segments (join_step.cpp): the earlier one's outputs are the key (first) and
// the element; `other` is collected (key first), the pairs of equal keys found, and the next
// segment reads the element's components, then the other's, then (left) a bool `matched`.
struct join_step {
  bool on = false;
  bool left = false;
  int stage = -1;  // the query's join stage: a cached plan reads the other query there
};

struct segment {
  int after = -1;    // the segment whose outputs are the inputs (-1: the query's inputs)
  sort_step sort;    // applied to segment `after`'s outputs first
  group_step group;  // then this
  join_step join;    // or this
  std::vector<segment_input> inputs;
  std::vector<slice> slices;
  std::vector<stage> stages;  // map, filter, enumerate, at most one scan
  std::vector<int> out_vars;  // components at the end
  std::vector<scalar_type> out_types;
  segment_end end = segment_end::collect;
  bool materialise = false;  // runs before the next segment, which reads its outputs

  bool has_filter() const {
    for (const stage& s : stages)
      if (s.kind == stage_kind::filter) return true;
    return false;
  }
  int scan_index() const {
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (stages[i].kind == stage_kind::scan) return static_cast<int>(i);
    return -1;
  }
};

}  // namespace kiln::detail::q
