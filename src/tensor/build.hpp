// Building lazy tensor expressions: the node constructors every operation file shares.
#pragma once

#include <memory>
#include <vector>

#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

using impl_ptr = std::shared_ptr<tensor_impl>;

// A lazy node o over args (on args[0]'s device) of dtype t and shape. kiln::automatic: a fixed
// (non-automatic) tensor operand pins it to that device (two fixed operands on different
// devices: kiln::device_mismatch), else it is automatic when an operand is; scalars don't count.
impl_ptr node(ir::op o, scalar_type t, const shape_t& shape, std::vector<impl_ptr> args);
// A captured host scalar (rank 0) holding bits of type t.
impl_ptr scalar_of(const device& dev, scalar_type t, std::uint64_t bits);
// x as dtype t: itself, a converted scalar (no node), or a cast node.
impl_ptr cast_to(const impl_ptr& x, scalar_type t);
// t's impl; kiln::invalid_argument naming `what` when t is undefined.
impl_ptr checked(const tensor& t, const char* what);
// kiln::device_mismatch naming both devices; nothing when either is automatic (it follows).
void same_device(const tensor_impl& a, const tensor_impl& b);

}  // namespace kiln::detail
