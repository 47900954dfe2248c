// The generated kernels behind kiln/tensor/indexing.hpp (cache "tensor_index"): one work-item
// per output element over an exact range, no floating-point atomics, so every run gives the
// same bits.
//   gather:   out[c] = x[c with dim replaced by idx[c]] over strided x and idx (copies raw
//             element bits by width, so every dtype, f16/bf16 included, shares four kernels);
//             an index outside [0, bound) reads nothing and writes zero bits (the range check
//             is reported by indexing.cpp, possibly a call later);
//   place:    a contiguous block copied into a slice of a contiguous tensor (cat), by width;
//   pad:      the same writing zeros around the block (split's backward), by width;
//   scatter:  out[c] = x[c] + sum over j, in order, of src[c, j along dim] where
//             idx[c, j along dim] == c[dim] (scatter_add and gather's backward);
//   sort_keys, run_offsets, run_part, run_add: index_select's and embedding's backward
//             (launch_sort_keys and launch_index_add below).
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

enum class index_kernel_kind : std::uint8_t {
  gather,
  place,
  scatter,
  sort_keys,
  run_offsets,
  run_part,
  run_add
};
// A kernel's source (kernel "kt_index"): rank for gather / scatter; t the element type (the
// unsigned type of its width for gather / place; the sort key type for sort_keys and
// run_offsets); it the index type (gather / scatter / sort_keys) or the sort key type
// (run_part); pt the sorted positions' type (sort_keys / run_part / run_add: u32 or u64).
std::string index_source(index_kernel_kind k, std::size_t rank, scalar_type t, scalar_type it,
                         scalar_type pt = scalar_type::u32);

// out (contiguous, shape `shape`) = x gathered along dim by idx (i32/i64). x_strides and
// idx_strides are per dimension of `shape` (0 broadcasts); x's stride along dim is x_dim_stride
// (x_strides[dim] is ignored), its size bound: an index outside [0, bound) gives zero bits
// (the default: indices known to be in range).
void launch_gather(tensor_impl& out, const tensor_impl& x, const tensor_impl& idx, int dim,
                   const shape_t& x_strides, const shape_t& idx_strides, std::int64_t x_dim_stride,
                   std::int64_t bound = std::numeric_limits<std::int64_t>::max());

// out (contiguous [outer, total_dim * inner]) gets src (contiguous [outer, n * inner]) at
// columns [offset * inner, (offset + n) * inner).
void launch_place(tensor_impl& out, const tensor_impl& src, std::int64_t outer,
                  std::int64_t total_dim, std::int64_t n, std::int64_t offset, std::int64_t inner);

// out (contiguous, x's shape) = x (or zeros when x is null) + the scatter of src by idx along
// dim. idx and src are read through strides over out's rank; idx_sizes bound the positions
// that receive contributions (for d != dim, c[d] < idx_sizes[d]). An index outside the dim
// matches no position: it adds nothing.
void launch_scatter(tensor_impl& out, const tensor_impl* x, const tensor_impl& idx,
                    const tensor_impl& src, int dim);

// The chunk length S of the sorted positions for n indices: max(16, ceil(sqrt(n))).
std::int64_t index_add_chunk(std::int64_t n);

// index_select's and embedding's backward, on the device with no host wait and no atomics.
// The forward (when a gradient is wanted) runs launch_sort_keys: each index becomes a key of
// index_key_type(rows) (an index outside [0, rows) becomes the key `rows`, sorted last and never
// summed) beside its position (index_position_type(n)); keys and pos are new [max(n, 1)]
// tensors, so a later write to the index tensor does not change the gradient. idx is read at
// k * idx_stride.
scalar_type index_key_type(std::int64_t rows);    // u8, u16, u32 or u64: the narrowest for rows
scalar_type index_position_type(std::int64_t n);  // u32, or u64 past 2^32 positions
void launch_sort_keys(tensor_impl& keys, tensor_impl& pos, const tensor_impl& idx,
                      std::int64_t idx_stride, std::int64_t n, std::int64_t rows);
// The backward: dx (contiguous [outer, rows, inner]) = for each row v, the sum of g's slices
// (g contiguous [outer, n, inner]) at the positions whose key is v, in ascending position, or
// 0. (1) The device radix sort orders the keys carrying their positions (stable: equal keys
// keep ascending positions; the narrow key makes a character vocabulary one pass, GPT-2's two),
// (2) run_offsets finds each row's run [offs[v], offs[v + 1]) by binary search, (3) run_part
// sums each chunk of S = index_add_chunk(n) sorted positions that lies inside one run, (4)
// run_add sums row v per column: the run's positions before its first whole chunk, the whole
// chunks' partials in order, then the positions after (all its positions when no whole chunk
// lies inside). No item loops more than about 2 S + n / S steps however skewed the indices,
// and every sum's order depends only on n and the indices: the same bits every run.
void launch_index_add(tensor_impl& dx, const tensor_impl& g, const tensor_impl& keys,
                      const tensor_impl& pos, std::int64_t outer, std::int64_t rows, std::int64_t n,
                      std::int64_t inner);

// How many index-range checks read their count back at once (a host wait): those on the host
// device, none in the steady state elsewhere (defined in indexing.cpp; tests read it).
std::uint64_t index_check_reads();

}  // namespace kiln::detail
