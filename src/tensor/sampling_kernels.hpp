// The generated kernels behind kiln/tensor/sampling.hpp (cache "tensor_sampling"), barrier-free
// so one text runs on every backend, the CPU's included:
//   topk pass: each item takes one chunk of a row (of x, or of the previous pass's candidates;
//              contiguous, or interleaved on GPUs) and keeps its k best by insertion into
//              its own slot of the output; passes repeat until one chunk per row is left (a
//              chunk holds >= 8k entries, so each pass shrinks a row at least 8-fold);
//   multinomial (with replacement): sums of chunks of 256 weights (double where the device
//              has fp64, else float), their running sums per row, then one item per sample:
//              a binary search over the chunks and a walk inside one for the first category
//              whose running sum exceeds u * total.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/tensor.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

enum class sampling_kernel_kind : std::uint8_t { topk, chunk_sum, chunk_scan, draw, topk_group };
// A kernel's source: topk of dtype t (first: reading x, else candidates; largest or smallest
// first); the multinomial kernels of weight dtype t and sum dtype t2 (f32 or f64).
std::string sampling_source(sampling_kernel_kind k, scalar_type t, scalar_type t2, bool first,
                            bool largest);

// The type a topk pass keeps candidate values in: float for f16/bf16, u8 for bool, else t.
scalar_type topk_value_type(scalar_type t);

// One topk pass over `rows` rows of m entries. first: the entries are x's (contiguous
// [rows, m], dtype x.dtype, index = position); otherwise in_v / in_i (candidate values of
// topk_value_type and int64 indices, -1 = none). Chunk c holds entries [c chunk, (c + 1)
// chunk), or, interleaved, c, c + chunks, ... out_v / out_i: [rows, chunks, k]; a chunk
// with fewer than k entries pads with index -1. Each slot is
// in order, best first: larger (or smaller) value, NaN largest, then lower index.
void launch_topk_pass(const tensor_impl* x, const tensor_impl* in_v, const tensor_impl* in_i,
                      tensor_impl& out_v, tensor_impl& out_i, scalar_type t, std::int64_t rows,
                      std::int64_t m, std::int64_t chunks, std::int64_t chunk, bool interleaved,
                      std::int64_t k, bool largest);

// topk by radix select, one work-group of topk_group_items per row, for devices with barriers
// and local atomics: k <= topk_group_max_k, rows shorter than 2^31, 18 KiB of local memory.
// out (int64 [rows, k]) = the positions of the k best of each row of x (contiguous [rows, n],
// any dtype), best first, in topk's order.
inline constexpr std::int64_t topk_group_items = 256, topk_group_max_k = 1024;
void launch_topk_group(const tensor_impl& x, tensor_impl& out, std::int64_t rows, std::int64_t n,
                       std::int64_t k, bool largest);

// The int64 positions, along the last dim, of the k best (0 < k <= n) of each row of xt
// ([.., n]; a lazy or strided one is copied first), shaped [.., k]: passes of chunks of
// max(least_chunk, 8k, what gives about `items` items) entries, contiguous or interleaved
// (topk picks by device; tests force either).
tensor topk_rows(const tensor& xt, std::int64_t k, bool largest, bool interleaved,
                 std::int64_t least_chunk, std::int64_t items);

// Whether launch_topk_group runs on dev for rows of n and this k; topk_rows_group: the same
// contract as topk_rows through it (kiln::unsupported where it does not fit).
bool topk_group_fits(const device& dev, std::int64_t n, std::int64_t k);
tensor topk_rows_group(const tensor& xt, std::int64_t k, bool largest);

// Weights per chunk of multinomial's running sums.
inline constexpr std::int64_t multinomial_chunk = 256;
// out (int64 [rows, s]) = for each uniform u ([rows, s], f64 or f32: the sum type) the first
// category j of w (contiguous [rows, n], a float dtype) whose running sum exceeds u * total
// (the last positive weight when rounding leaves none). The running sums are those of chunks
// of multinomial_chunk weights, each summed in order, added in order.
void launch_draws(tensor_impl& out, const tensor_impl& w, const tensor_impl& u, std::int64_t rows,
                  std::int64_t n, std::int64_t s);

}  // namespace kiln::detail
