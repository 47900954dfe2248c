// One lazy tensor's expression as IR, and the one elementwise kernel that evaluates it. Leaves:
// stored tensors become load leaves (inputs read with their own strides, broadcast to the
// output's shape by stride 0), scalars become captures (kernel parameters). Shared
// subexpressions lower to one node each.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir/node.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

struct lowered {
  ir::graph g;                             // one root; inputs laid out over `shape`
  std::vector<const tensor_impl*> leaves;  // the stored tensor behind each input slot
  shape_t shape;                           // the output's
};

lowered lower(const tensor_impl& root);

// The generated kernel's structural key: the IR (ops, dtypes, capture types, each input's
// type and stride classes) and the output's rank, never sizes or stride values.
// items: elements per work-item (kernel.cpp renders the loop; 1 on the CPU backend, where
// the work-group loop vectorises one element per item); lanes: consecutive elements per item
// and iteration, 16-bit float arrays moved as words (1: none).
std::uint64_t kernel_key(const lowered& l, std::uint32_t items = 1, std::uint32_t lanes = 1);

// The kernel "kt_eval" in the portable kernel language. Parameters: the output, each input,
// each capture, then (when an input is not flat) the output's sizes but the first, then each
// general stride of each input (in input order, then dimension order).
// With items > 1, a last parameter: the number of elements (the launch covers a 1/items share).
// lanes in {2, 4, 8} (from vector_lanes): each item computes `lanes` consecutive elements per
// iteration and the launch covers a 1/(items * lanes) share; the parameters are as above with
// the number of elements last.
std::string render_kernel(const lowered& l, std::uint32_t items = 1, std::uint32_t lanes = 1);

// The vector lanes for l's kernel on a GPU-like device: 1 (element by element) unless an f16/bf16
// array is read or written, or an input is strided and the result is f16/bf16/f32. Then the most
// (up to max_vector_lanes) such that the output's last dimension is a multiple of them (when an
// input is strided) and every 16-bit input read along its rows starts its words on a word
// boundary. 16-byte words of 16-bit chains ran at 99% of a copy on an H200 (2-byte loads: 68%);
// permuted views (attention's head split and merge) decompose their index once per vector.
constexpr std::uint32_t max_vector_lanes = 8;
std::uint32_t vector_lanes(const lowered& l);

}  // namespace kiln::detail
