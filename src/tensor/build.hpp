// Building lazy tensor nodes (shared by the elementwise operations and the generated creation
// functions): an IR node over argument tensors, a captured scalar, a promotion cast.
#pragma once

#include <memory>
#include <vector>

#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

using impl_ptr = std::shared_ptr<tensor_impl>;

// A lazy node o of dtype t and shape over args (on args[0]'s device).
impl_ptr node(ir::op o, scalar_type t, const shape_t& shape, std::vector<impl_ptr> args);
// A host scalar of dtype t holding bits (captured as a kernel parameter).
impl_ptr scalar_of(const device& dev, scalar_type t, std::uint64_t bits);
// x as dtype t: itself, a converted scalar (no node), or a cast node.
impl_ptr cast_to(const impl_ptr& x, scalar_type t);
// t's impl; kiln::invalid_argument naming what when t is undefined.
impl_ptr checked(const tensor& t, const char* what);
// kiln::device_mismatch naming both devices when a and b differ.
void same_device(const tensor_impl& a, const tensor_impl& b);

}  // namespace kiln::detail
