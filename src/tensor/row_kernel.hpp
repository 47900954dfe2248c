// Row fusion: an elementwise expression over shape S that reads reductions of S along its
// trailing axes back, broadcast (softmax, log_softmax, (x - mean) / sqrt(var + eps)), runs as
// one kernel. Each output row (the kept coordinates) is folded by one pass per reduction, in
// dependency order (a reduction's prologue may read earlier ones: sum(exp(x - max))), then a
// last pass writes the row. The passes re-read the row, from cache on a GPU (a group owns a
// few rows), so the expression costs about one read and one write of S.
//
// Strategies as reduce_kernel.hpp's: `lanes` work-items of a group per row through local
// memory (devices with barriers, rows >= reduce_policy::group_min_rows), or one work-item
// per row.
#pragma once

#include <vector>

#include "tensor/reduce_kernel.hpp"

namespace kiln::detail {

// The unevaluated sum/max/min reductions of t's expression (nested ones too) when it can run
// as one row kernel, else empty.
std::vector<const tensor_impl*> row_fusable(const tensor_impl& t);

// Renders (or finds), launches and returns the stored result of t (row_fusable(t) non-empty).
std::shared_ptr<tensor_impl> run_rows(const tensor_impl& t);

struct row_lowered {
  reduce_lowered l;               // g, leaves, kept, reduced (in_epilogue unused)
  std::vector<ir::node_id> reds;  // the reductions, in node (dependency) order
};
row_lowered lower_rows(const tensor_impl& t);
// lanes: items per row (1: the one-item-per-row form, no barriers).
std::string render_rows(const row_lowered& r, std::uint32_t lanes);

}  // namespace kiln::detail
