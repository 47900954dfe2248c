// The fused attention kernels behind scaled_dot_product_attention (cache "tensor_attention"),
// in the kernel language: softmax(q k^T * scale) v without the [L, S] scores in memory, as
// flash attention does, and its backward from the saved row log-sum-exp.
//
//   forward:  one work-item per query row; keys in tiles of policy.tile, an online softmax
//             (running max and sum, the accumulator rescaled once per tile); writes o and
//             lse = max + log(sum) per row;
//   delta:    D_i = sum_c dO_ic O_ic per query row (the softmax backward's row term);
//   dq:       one work-item per query row: dq_i = scale sum_j P_ij (dO_i.v_j - D_i) k_j;
//   dkdv:     one work-item per key row: dv_j = sum_i P_ij dO_i, dk_j = scale sum_i dS_ij q_i;
//             no atomics, so every run gives the same bits.
// P_ij = exp(scale q_i.k_j - lse_i) is recomputed, never stored. Work is f32 (f64 for f64)
// whatever the storage type; 16-bit values are rounded once at the store.
//
// On devices with barriers (GPUs, PoCL) a work-group of policy.rows items shares each tile
// through local memory (read once per group, not once per row); elsewhere (the CPU backend)
// each item reads the rows it needs from memory (the cache serves them).
//
// Every operand is addressed as [outer, inner, rows, width] through strides (width contiguous):
// head-split views of a packed [B, T, 3E] projection and broadcast (stride 0) batches are read
// in place.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernel.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

enum class attn_kernel_kind : std::uint8_t { forward, delta, dq, dkdv };

struct attn_kernel_key {
  attn_kernel_kind kind;
  scalar_type x;     // q, k, v, o and the gradients' storage
  std::uint32_t e;   // q and k width
  std::uint32_t ev;  // v and o width
  bool causal;       // query i sees keys j <= i
  bool tiled;        // tiles in local memory (devices with barriers)
  bool unroll;       // unrolled loops, register arrays (GPUs: warp32 devices; PoCL compiles
                     // unrolled forms many times slower for no gain)
};

// Tile shape shared by the kernels and their launcher (as CUB's policies are).
struct attn_policy {
  std::uint32_t rows;  // work-items (query or key rows) per work-group (tiled form)
  std::uint32_t tile;  // keys (forward, dq) or queries (dkdv) per step
};
attn_policy attn_policy_of(const attn_kernel_key& k);

// The accumulation type of storage x (f64 for f64, else f32): lse and D have it.
scalar_type attn_acc_type(scalar_type x);

// Widths the fused kernels take (register arrays of e and ev values per work-item).
constexpr std::uint32_t attn_max_width = 256;

std::string attn_source(const attn_kernel_key& k);

// Launches kernel k over `rows` rows of `rows_per_batch` each (queries for forward, delta and
// dq; keys for dkdv), with the arguments in the order of its parameters.
void launch_attn(const device& dev, const attn_kernel_key& k, std::vector<arg_binding> args,
                 std::int64_t batches, std::int64_t rows_per_batch);

}  // namespace kiln::detail
