// What a kiln::tensor handle points at: either materialised (storage, shape, strides, offset)
// or lazy (an elementwise operation over other tensors, or a captured scalar). Evaluating a
// lazy tensor stores its result in the same object, so every handle sharing it sees the
// storage and later expressions read it as a leaf.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/ir/node.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail {

struct grad_meta;  // autograd/graph.hpp

enum class tensor_kind : std::uint8_t {
  stored,  // mem, strides, offset hold the elements
  scalar,  // a host scalar (rank 0), captured as a kernel parameter
  op,      // o applied to args (broadcast to shape), computed on evaluation
};

struct tensor_impl {
  device dev{nullptr};  // where it is stored; for a lazy node, where it will be evaluated
  scalar_type dtype = scalar_type::f32;
  // kiln::automatic (docs/placement.md): its storage may move to another device, and the
  // device an expression over it is evaluated on is chosen at evaluation (tensor/placement).
  bool automatic = false;
  shape_t shape;
  tensor_kind kind = tensor_kind::stored;
  // stored
  std::shared_ptr<memory_impl> mem;
  shape_t strides;  // in elements
  std::int64_t offset = 0;
  // scalar
  ir::capture value;
  // op: a node of the IR whose operands are args (slot: a leaf's slot, e.g. index)
  ir::op o = ir::op::cast;
  std::vector<std::shared_ptr<tensor_impl>> args;
  std::uint32_t axes = 0;  // a reduction's reduced dims of args[0], a bit mask
  // autograd: set on leaves that require a gradient and on results of recorded operations
  std::shared_ptr<grad_meta> ag;
};

// Thread-local counters of the current evaluating call (last_tensor_stats reads them).
tensor_stats& stats_now();
void reset_stats();

std::int64_t numel_of(const shape_t& s);
shape_t contiguous_strides(const shape_t& s);
// The tensor's impl, or kiln::invalid_argument for an undefined tensor (what: the operation).
tensor_impl& impl_of(const tensor& t, const char* what);
// Checks the operands of a float-only operation (linalg, conv2d) named fn: each defined
// (kiln::invalid_argument), all on one device (kiln::device_mismatch), each f32 or f64 and all
// the same (kiln::dtype_error); errors name the operands. reduced: f16 and bf16 are accepted too.
void check_float_operands(const char* fn,
                          std::initializer_list<std::pair<const char*, const tensor*>> xs,
                          bool reduced = false);
// A new stored tensor of the shape, contiguous, uninitialised.
std::shared_ptr<tensor_impl> allocate_tensor(const device& dev, const shape_t& shape,
                                             scalar_type dtype);
// Evaluates t in place when lazy (one generated kernel).
void materialise(tensor_impl& t);
// contiguous() without resetting the stats (for callers that count their own launches).
tensor contiguous_of(const tensor& t);
// A new stored handle on x's storage, shape, strides and offset (x must be stored); not
// automatic and outside the autograd graph (detach, to(automatic) build on it).
std::shared_ptr<tensor_impl> share_storage(const tensor_impl& x);
// A lazy copy of a (a cast to its own dtype): contiguous() evaluates it.
tensor copy_node(const tensor& a);

}  // namespace kiln::detail
