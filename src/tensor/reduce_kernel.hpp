// One reduction kernel with its fused elementwise work: a prologue (the elementwise expression
// being reduced, read at every (output, reduced) position), the fold, and an epilogue (the
// elementwise expression over the reduction's result, read at every output position). So
// relu(a * b + c).sum(1) and sqrt((x * x).sum(1)) are one launch each.
//
// The iteration space is the reduced tensor's dims, coalesced (size-1 dims dropped, adjacent
// dims of one kind merged when every input allows) and ordered kept dims first, then reduced
// dims. The output is contiguous over the kept dims, so output position o is their flat index.
//
// Strategies (reduce_plan, shared by the renderer and the launcher as CUB's policies are):
//   thread: one work-item folds one output (coalesced when the reduced dims are outer ones);
//   group:  `lanes` work-items of a group fold one output through local memory (reduced dims
//           innermost, devices with barriers); a group holds group / lanes outputs;
//   split:  either of the above over `chunks` slices of the reduced range into partials, then
//           a second kernel folds the partials and runs the epilogue (few outputs, long rows).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/node.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

struct reduce_policy {
  static constexpr std::uint32_t group = 256;              // work-items of a group-strategy group
  static constexpr std::int64_t group_min_rows = 64;       // shorter reduced ranges: thread
  static constexpr std::int64_t split_group_elems = 8192;  // at least per split group
  static constexpr std::int64_t split_item_elems = 256;    // at least per split work-item
  // ... on devices with barriers (GPUs): a work-item per output walks its rows one dependent
  // load group at a time, so few outputs over a few hundred rows are latency-bound (layer norm's
  // weight gradient, 384 outputs over 503 partial rows, took 40 us unsplit on an H200).
  static constexpr std::int64_t gpu_split_item_elems = 32;
  static constexpr std::uint32_t min_lanes = 32;      // items folding one work, at least
  static constexpr std::int64_t elems_per_lane = 16;  // ... and at most rows / this
  static constexpr std::int64_t gpu_groups_per_unit = 8;
  static constexpr std::int64_t gpu_items_per_unit = 2048;
  static constexpr std::int64_t cpu_items_per_unit = 4;
  static constexpr std::int64_t fold_parts_per_lane = 8;  // thread strategy's fold: at least
  static constexpr std::uint32_t max_fold_lanes = 32;
};

enum class reduce_strategy : std::uint8_t { thread, group };

struct reduce_plan {
  reduce_strategy strategy = reduce_strategy::thread;
  std::int64_t chunks = 1;  // > 1: split into partials and a second, folding kernel
  std::int64_t chunk_len = 0;
  std::uint32_t lanes = reduce_policy::group;  // group: items per work (a power of two)
  // Split: items per output of the folding kernel (1: one; `lanes` in the group strategy).
  // Folding 512 partials per output in one item (a bias gradient: 384 outputs over 16384 rows)
  // was a chain of dependent loads, 60 us on an H200; lanes of a group fold them in a few.
  std::uint32_t fold_lanes = 1;
};

struct reduce_lowered {
  ir::graph g;  // one root: the epilogue's (the reduce node itself when there is none)
  ir::node_id red = -1;
  std::vector<std::uint8_t> in_epilogue;   // per node: computed after the fold
  std::vector<const tensor_impl*> leaves;  // the stored tensor behind each input slot
  shape_t kept, reduced;       // coalesced sizes; inputs' layouts are over kept then reduced dims
  bool inner_reduced = false;  // the reduced dims include the innermost (fastest) one
  shape_t out_shape;
  std::int64_t outputs() const;
  std::int64_t rows() const;  // elements folded per output
};

// red is the reduce node (a tensor_kind::op of class reduce); root is red or an elementwise
// expression over red's shape that reads red once per element. Other reductions inside
// either must already be stored.
reduce_lowered lower_reduce(const tensor_impl& root, const tensor_impl& red);

// Fills l's kept and reduced sizes and its inputs' layouts: the dims of xs (mask: the reduced
// ones) coalesced over every input's strides (strides[k]: input k's, over xs's dims).
void lay_out(reduce_lowered& l, const shape_t& xs, std::uint32_t mask,
             const std::vector<shape_t>& strides);
// Strides of t read at every position of `over` (NumPy broadcasting: right-aligned; missing
// and size-1 dims read position 0).
shape_t strides_over(const tensor_impl& t, const shape_t& over);

reduce_plan plan_reduce(const reduce_lowered& l, const device& dev);
std::uint64_t reduce_key(const reduce_lowered& l, const reduce_plan& p);
// Kernels: "kt_reduce" (no split) or "kt_part" then "kt_fold_parts" (split). Every kernel takes
// the same parameters: out, (split: partial values, partial indices), inputs, captures,
// kept sizes but the first, reduced sizes but the first, rows, (split: chunk length, chunks,
// outputs), (group: works, i.e. outputs times chunks), then each general stride of each input.
std::string render_reduce(const reduce_lowered& l, const reduce_plan& p);

// The identity a reduction starts from, as a capture of type t: 0, the lowest value (-inf),
// or the highest value (+inf).
ir::capture reduce_init(ir::op o, scalar_type t);

// Renders (or finds), launches and returns the stored result of root, whose one unevaluated
// reduction is red (tensor/reduce_eval.cpp).
std::shared_ptr<tensor_impl> run_reduce(const tensor_impl& root, const tensor_impl& red);

}  // namespace kiln::detail
