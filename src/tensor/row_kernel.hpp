// Row fusion: an elementwise expression over shape S that reads reductions of S along its
// trailing axes back, broadcast (softmax, log_softmax, (x - mean) / sqrt(var + eps)), runs as
// one kernel. Each output row (the kept coordinates) is folded by one pass per reduction, in
// dependency order (a reduction's prologue may read earlier ones: sum(exp(x - max))), then a
// last pass writes the row. The passes re-read the row, from cache on a GPU (a group owns a
// few rows), so the expression costs about one read and one write of S.
//
// Strategies: on devices with 32-lane warp shuffles (feature::warp32), rows of 32 to 1024
// contiguous elements (one reduced dim of unit stride; inputs constant along the row are read
// once) take the warp form: a warp per row, which reads the row's inputs into registers
// once (every load in flight before any use), folds each reduction there and across the warp
// by shuffles, and writes the row from registers: no barriers, no local memory, one read of
// the inputs. Elsewhere, as reduce_kernel.hpp's: `lanes` work-items of a group per row through
// local memory (devices with barriers, rows >= reduce_policy::group_min_rows), or one
// work-item per row.
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

// The warp form's limits (policy shared by the renderer and the launcher).
struct row_warp_policy {
  static constexpr std::int64_t min_len = 32;    // shorter rows: an item per row
  static constexpr std::int64_t max_len = 1024;  // 32 elements per lane at most
  // items per lane x the row's register arrays (inputs that vary along the row, values kept)
  static constexpr std::size_t max_registers = 96;
};
// Elements per lane of the warp form for rows of len on dev; 0 where it does not apply (no warp
// shuffles, a length outside the policy, an input strided along the row or several reduced
// dims, too many register arrays, an accumulator type a shuffle does not move).
std::uint32_t warp_row_items(const device& dev, const row_lowered& r, std::int64_t len);
// The warp form (groups of reduce_policy::group items, a row per warp); full: rows of exactly
// 32 * items elements (no bounds checks); warp_definitions: the target's (codegen::target::warp).
// r's inputs must be contiguous or constant along the row (kiln::invalid_argument otherwise).
// words (warp_row_words): a lane's elements are 8 consecutive ones per 256, and 16-bit arrays
// move as 16-byte words.
std::string render_warp_rows(const row_lowered& r, std::uint32_t items, bool full,
                             const char* warp_definitions, bool words = false);
// Whether the warp form of r with `items` per lane (full rows) can take the word form: items a
// multiple of 8, a 16-bit float input along the row or output, and every 16-bit input along the
// row starting each row on a 16-byte word.
bool warp_row_words(const row_lowered& r, std::uint32_t items, bool full);

}  // namespace kiln::detail
