// The run-time description of a query that the header templates build and the library plans,
// generates and runs (src/query/). Internal: users see kiln::query and its operators.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/query/expr.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln::detail {
struct memory_impl;
}

namespace kiln::detail::q {

// sort: the elements reordered by a key (stable); a barrier: what follows reads the sorted copy.
// group: runs of equal keys (after a sort, or as they come) reduced to one element each; a
// barrier (group_by, distinct, reduce_by_key, unique_by_key). top_k: a descending sort and the
// first `count` elements, which must exist.
// join: the element paired with every element of another query whose key is equal; a barrier.
enum class stage_kind : std::uint8_t {
  map,
  filter,
  take,
  skip,
  enumerate,
  scan,
  sort,
  group,
  top_k,
  join
};
struct query_desc;

// One aggregate of a group stage; the kinds match the device primitive's (src/sort/).
enum class aggregate_kind : std::uint8_t { sum, min, max, count, mean, first };
struct aggregate {
  aggregate_kind kind = aggregate_kind::sum;
  ir::node_id expr = -1;  // the aggregated value (-1: count, or `first` of in_var)
  int in_var = -1;        // the value aggregated (defined by expr, or an element component)
  scalar_type in_type = scalar_type::f32;
  int out_var = -1;  // the component it becomes after the group stage
  scalar_type out_type = scalar_type::f32;
};

// Stages refer to the query's IR graph (query_desc::graph) by node id; values of the element
// are numbered (the inputs first, then one per map, enumerate and scan).
struct stage {
  stage_kind kind = stage_kind::map;
  int var = -1;           // map, enumerate, scan: the value it defines
  ir::node_id expr = -1;  // map: value; filter: predicate; enumerate: index; scan: combine;
                          // sort: the key (-1: the element itself, single-valued)
  scalar_type type = scalar_type::f32;  // type of var
  std::uint64_t count = 0;              // take, skip
  bool uses_index = false;
  bool exclusive = false;   // scan
  std::int32_t init = -1;   // exclusive scan: the capture slot holding the initial value
  int arg = -1;             // scan: the value it scans
  bool descending = false;  // sort
  // group: var/expr/type are the key's (expr -1: the single-valued element itself);
  // `sorted` sorts by the key first (group_by, distinct), else runs are taken as they come;
  // `drop_key`: the key is not a component after the stage (unique_by_key, distinct_by).
  bool sorted = false;
  bool drop_key = false;
  std::vector<aggregate> aggregates;
  // join: var/expr/type are this side's key; `other` is the other query, its element prefixed
  // by its key (an enumerate-like stage ends it); left: unmatched elements are kept.
  // out_vars/out_types: the element after it (this side's, the other's, then `matched`).
  std::shared_ptr<query_desc> other;
  bool left = false;
  std::vector<int> out_vars;
  std::vector<scalar_type> out_types;
};

inline stage make_stage(stage_kind k, int var, ir::node_id expr, scalar_type t,
                        std::uint64_t count = 0) {
  stage s;
  s.kind = k;
  s.var = var;
  s.expr = expr;
  s.type = t;
  s.count = count;
  return s;
}

struct input {
  std::shared_ptr<memory_impl> mem;  // device inputs
  std::uint64_t offset = 0;          // in elements
  const void* host = nullptr;        // host inputs (kiln::on); null for an empty range
  bool on_host = false;
  scalar_type type = scalar_type::f32;
};

enum class placement : std::uint8_t { fixed, automatic };

struct query_desc {
  device dev{nullptr};
  placement where = placement::fixed;
  std::uint64_t n = 0;
  std::vector<input> inputs;
  ir::graph graph;  // every expression of the query, its captures, roots in stage order
  std::vector<stage> stages;
  std::vector<int> vars;  // the current element's components (value numbers)
  std::vector<scalar_type> types;
  int next_var = 0;

  bool host_input() const { return !inputs.empty() && inputs[0].on_host; }
  int new_var() { return next_var++; }
};

enum class reduce_kind : std::uint8_t {
  count,
  sum,
  product,
  min,
  max,
  any,
  all,
  average,
  argmin,
  argmax,
  custom
};

struct reduce_spec {
  reduce_kind kind = reduce_kind::sum;
  scalar_type acc = scalar_type::f64;  // type of the accumulated value
  ir::node_id op = -1;                 // custom: combine of combine_a and combine_b
  std::int32_t init = -1;              // custom: the capture slot holding init
};

// The accumulator every reduction produces; the generated kernels use the same layout.
struct reduce_result {
  std::uint64_t value_bits = 0;  // the value, in the accumulator's type
  std::uint64_t count = 0;       // elements seen
  std::int64_t index = -1;       // argmin/argmax
};

struct collect_result {
  std::vector<std::shared_ptr<memory_impl>> outputs;  // one per element component
  std::uint64_t count = 0;
  device dev{nullptr};
};

// src/query/run.cpp
collect_result collect(query_desc& d);
reduce_result reduce(query_desc& d, const reduce_spec& r);

}  // namespace kiln::detail::q
