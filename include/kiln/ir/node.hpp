// Kiln's run-time IR: the data model. Front ends (kiln::query today, tensors later) build a
// graph of typed nodes; the library hashes it (the hash names kernels and keys the kernel
// cache, src/ir/hash.hpp) and renders it to kernel-language C once (src/codegen/). Types are
// decided by the front end: every node records its dtype, and operands of arithmetic and
// comparisons already carry explicit casts to their common type.
//
//   kiln::ir::graph g;
//   const auto x = g.add(kiln::ir::op::component, kiln::scalar_type::f32, {}, 0);  // v0
//   const auto c = g.add_capture(2.f);                   // kq_c0
//   const auto y = g.add(kiln::ir::op::mul, kiln::scalar_type::f32, {x, c});      // v0 * kq_c0
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "kiln/scalar_type.hpp"

namespace kiln::ir {

enum class op_class : std::uint8_t {
  arithmetic,  // operands and result share one dtype
  compare,     // operands share one dtype; result bool
  logical,     // operands taken as bool
  shift,       // left operand's (promoted) dtype is the result's
  unary,
  math,  // <cmath>-like functions; operands share the result's dtype
  select,
  cast,
  leaf,
  reduce,  // folds its operand over the axes in node::slot (a bit mask); tensors only
};

// X(name, arity, class). Leaves use node::slot: component = the element's value number
// (v<slot>), capture = index into graph::captures; index is the element's position;
// combine_a/combine_b are the two operands of a scan's or custom reduction's combine;
// load = a strided read of graph::inputs[slot] at the element's position (tensors).
// philox_lo(counter, key) and philox_hi(counter, key), all uint64: Philox4x32-10 (Salmon et
// al. 2011, Random123's philox4x32_10) of counter words (counter lo, counter hi, 0, 0) and key
// words (key lo, key hi); _lo gives output words 0 | 1 << 32, _hi words 2 | 3 << 32.
// clang-format off
#define KILN_IR_OPS(X)                                                                     \
  X(component, 0, leaf) X(index, 0, leaf) X(capture, 0, leaf)                              \
  X(combine_a, 0, leaf) X(combine_b, 0, leaf)                                              \
  X(add, 2, arithmetic) X(sub, 2, arithmetic) X(mul, 2, arithmetic) X(div, 2, arithmetic)  \
  X(mod, 2, arithmetic) X(band, 2, arithmetic) X(bor, 2, arithmetic) X(bxor, 2, arithmetic)\
  X(lt, 2, compare) X(le, 2, compare) X(gt, 2, compare) X(ge, 2, compare)                  \
  X(eq, 2, compare) X(ne, 2, compare)                                                      \
  X(land, 2, logical) X(lor, 2, logical) X(shl, 2, shift) X(shr, 2, shift)                 \
  X(neg, 1, unary) X(lnot, 1, unary) X(bnot, 1, unary)                                     \
  X(sqrt, 1, math) X(rsqrt, 1, math) X(exp, 1, math) X(log, 1, math) X(sin, 1, math)       \
  X(cos, 1, math) X(tanh, 1, math) X(floor, 1, math) X(ceil, 1, math) X(pow, 2, math)      \
  X(fma, 3, math) X(abs, 1, math) X(min, 2, math) X(max, 2, math) X(clamp, 3, math)        \
  X(select, 3, select) X(cast, 1, cast) X(load, 0, leaf)                                  \
  X(reduce_sum, 1, reduce) X(reduce_max, 1, reduce) X(reduce_min, 1, reduce)              \
  X(argmax, 1, reduce) X(argmin, 1, reduce)                                               \
  X(tan, 1, math) X(erf, 1, math) X(philox_lo, 2, math) X(philox_hi, 2, math)
// clang-format on

#define KILN_IR_OP_ENUM(name, arity, cls) name,
enum class op : std::uint8_t { KILN_IR_OPS(KILN_IR_OP_ENUM) };
#undef KILN_IR_OP_ENUM

struct op_info {
  const char* name;
  std::uint8_t arity;
  op_class cls;
};
constexpr op_info info(op o) {
#define KILN_IR_OP_INFO(name, arity, cls) op_info{#name, arity, op_class::cls},
  constexpr op_info table[] = {KILN_IR_OPS(KILN_IR_OP_INFO)};
#undef KILN_IR_OP_INFO
  return table[static_cast<int>(o)];
}

using node_id = std::int32_t;
inline constexpr int max_arity = 3;

struct node {
  op o = op::component;
  scalar_type dtype = scalar_type::f32;
  std::array<node_id, max_arity> operands{-1, -1, -1};  // indices of earlier nodes
  std::int32_t slot = 0;  // leaves (see KILN_IR_OPS); reductions: the reduced axes' bit mask
  bool operator==(const node&) const = default;
};

// A captured host scalar. Its value is a kernel argument, never part of the structure, so a
// new value reuses the compiled kernel.
struct capture {
  scalar_type type = scalar_type::f32;
  std::uint64_t bits = 0;
};

// How an input is laid out: element (i0..i_{rank-1}) lives at sum(i_k * strides[k]). Strides
// pick the indexing code (a broadcast dimension has stride 0); dims are run-time sizes.
// Queries are rank 1, stride 1.
inline constexpr int max_rank = 8;
struct layout {
  std::uint8_t rank = 1;
  std::array<std::int64_t, max_rank> dims{};
  std::array<std::int64_t, max_rank> strides{1};
};

// An array a load leaf reads: its element type and its layout over the output's positions
// (dims are the output's; a broadcast or size-1 dimension has stride 0).
struct input {
  scalar_type type = scalar_type::f32;
  layout l;
};

// Nodes in creation order (operands always precede their users), the captures they read, the
// inputs load leaves read, and the roots: the expressions the program evaluates, in the order
// the front end built them. Queries read their inputs through component leaves (no inputs).
struct graph {
  std::vector<node> nodes;
  std::vector<capture> captures;
  std::vector<node_id> roots;
  std::vector<input> inputs;

  node_id add(op o, scalar_type t, std::initializer_list<node_id> operands = {},
              std::int32_t slot = 0) {
    node n{o, t, {-1, -1, -1}, slot};
    int k = 0;
    for (node_id x : operands) n.operands[k++] = x;
    return add(n);
  }
  node_id add(const node& n) {
    nodes.push_back(n);
    return static_cast<node_id>(nodes.size() - 1);
  }
  // A capture slot holding v's bits, and the leaf that reads it.
  template <scalar T>
  node_id add_capture(T v) {
    return add(op::capture, scalar_type_of<T>, {}, new_capture(v));
  }
  template <scalar T>
  std::int32_t new_capture(T v) {
    capture c{scalar_type_of<T>, 0};
    std::memcpy(&c.bits, &v, sizeof v);
    captures.push_back(c);
    return static_cast<std::int32_t>(captures.size() - 1);
  }
  const node& operator[](node_id i) const { return nodes[static_cast<std::size_t>(i)]; }
};

}  // namespace kiln::ir
