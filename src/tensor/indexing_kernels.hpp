// The generated kernels behind kiln/tensor/indexing.hpp (cache "tensor_index"): one work-item
// per output element over an exact range, no atomics, so every run gives the same bits.
//   gather:  out[c] = x[c with dim replaced by idx[c]] over strided x and idx (copies raw
//            element bits by width, so every dtype, f16/bf16 included, shares four kernels);
//   place:   a contiguous block copied into a slice of a contiguous tensor (cat), by width;
//   pad:     the same writing zeros around the block (split's backward), by width;
//   scatter: out[c] = x[c] + sum over j, in order, of src[c, j along dim] where
//            idx[c, j along dim] == c[dim] (scatter_add and gather's backward);
//   csr_add: dx[o, v, r] = sum over the positions k of v's occurrences (CSR, ascending) of
//            g[o, k, r] (index_select's and embedding's backward); a frequent row is summed
//            in chunks of about sqrt(its count) (csr_part), then the chunks in order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

enum class index_kernel_kind : std::uint8_t { gather, place, pad, scatter, csr_part, csr_add };
// A kernel's source (kernel "kt_index"): rank for gather / scatter, t the element type (the
// unsigned type of its width for gather / place), it the index type (gather / scatter).
std::string index_source(index_kernel_kind k, std::size_t rank, scalar_type t, scalar_type it);

// out (contiguous, shape `shape`) = x gathered along dim by idx (i32/i64). x_strides and
// idx_strides are per dimension of `shape` (0 broadcasts); x's stride along dim is x_dim_stride
// (x_strides[dim] is ignored). Indices must have been checked in range.
void launch_gather(tensor_impl& out, const tensor_impl& x, const tensor_impl& idx, int dim,
                   const shape_t& x_strides, const shape_t& idx_strides, std::int64_t x_dim_stride);

// out (contiguous [outer, total_dim * inner]) gets src (contiguous [outer, n * inner]) at
// columns [offset * inner, (offset + n) * inner).
void launch_place(tensor_impl& out, const tensor_impl& src, std::int64_t outer,
                  std::int64_t total_dim, std::int64_t n, std::int64_t offset, std::int64_t inner);

// The same, every other element of out written with zero bits (a split piece's gradient).
void launch_pad(tensor_impl& out, const tensor_impl& src, std::int64_t outer,
                std::int64_t total_dim, std::int64_t n, std::int64_t offset, std::int64_t inner);

// out (contiguous, x's shape) = x (or zeros when x is null) + the scatter of src by idx along
// dim. idx and src are read through strides over out's rank; idx_sizes bound the positions
// that receive contributions (for d != dim, c[d] < idx_sizes[d]).
void launch_scatter(tensor_impl& out, const tensor_impl* x, const tensor_impl& idx,
                    const tensor_impl& src, int dim);

// The CSR of n row indices on the device (int64): row v's positions are
// order[offsets[v] .. offsets[v + 1]), ascending. A row with more than one chunk's worth of
// positions is cut into chunks: its chunks are first[v] .. first[v + 1], chunk c covering
// order[span[2c] .. span[2c + 1]); rows of one chunk have first[v] == first[v + 1]. With no
// chunks at all, first and span are not read.
struct csr_arrays {
  const tensor_impl &offsets, &order, &first, &span;
  std::int64_t chunks;
};
// dx (contiguous [outer, rows, inner]) from g (contiguous [outer, n, inner]): pass 1 sums each
// chunk (one item per chunk element), pass 2 each row's chunk partials or positions, in order.
void launch_csr_add(tensor_impl& dx, const tensor_impl& g, const csr_arrays& c, std::int64_t outer,
                    std::int64_t rows, std::int64_t n, std::int64_t inner);

}  // namespace kiln::detail
