// Evaluation of a lazy tensor: lower its expression (tensor/kernel.cpp), find or render and
// compile its one kernel by structural key, launch it over the contiguous output on the
// device's default queue, and keep the result in the tensor itself.
#include "ir/layout.hpp"
#include "ir/print.hpp"
#include "kiln/kernel.hpp"
#include "runtime/generated_kernels.hpp"
#include "tensor/kernel.hpp"

namespace kiln::detail {
namespace {

void add_mem(std::vector<arg_binding>& a, memory_impl& m, std::uint64_t byte_off, scalar_type t) {
  arg_binding b;
  b.is_mem = true;
  b.mem = &m;
  b.byte_offset = byte_off;
  b.type = t;
  a.push_back(b);
}

// The arguments in render_kernel's order.
std::vector<arg_binding> arguments(const lowered& l, memory_impl& out) {
  std::vector<arg_binding> a;
  add_mem(a, out, 0, l.g[l.g.roots[0]].dtype);
  for (const tensor_impl* t : l.leaves)
    add_mem(a, *t->mem, static_cast<std::uint64_t>(t->offset) * size_of(t->dtype), t->dtype);
  for (const ir::capture& c : l.g.captures) {
    arg_binding b;
    b.type = c.type;
    b.size = static_cast<std::uint32_t>(size_of(c.type));
    b.scalar = c.bits;
    a.push_back(b);
  }
  bool decompose = false;
  for (const ir::input& in : l.g.inputs) decompose |= !ir::is_flat(in.l);
  if (decompose)
    for (std::size_t d = 1; d < l.shape.size(); ++d) a.push_back(bind_arg(l.shape[d]));
  for (const ir::input& in : l.g.inputs) {
    if (ir::is_flat(in.l)) continue;
    for (int d = 0; d < in.l.rank; ++d)
      if (ir::classify(in.l.dims[d], in.l.strides[d]) == ir::stride_class::general)
        a.push_back(bind_arg(in.l.strides[d]));
  }
  return a;
}

}  // namespace

void materialise(tensor_impl& t) {
  if (t.kind == tensor_kind::stored) return;
  const lowered l = lower(t);
  auto out = allocate_tensor(t.dev, t.shape, t.dtype);
  const auto n = static_cast<std::uint64_t>(numel_of(t.shape));
  if (n) {
    generated_kernels g = get_generated(t.dev, "tensor", kernel_key(l), [&] {
      return generated_program{render_kernel(l), {"kt_eval"}, ir::print(l.g)};
    });
    if (g.compiled) stats_now().programs_compiled++;
    std::vector<arg_binding> a = arguments(l, *out->mem);
    queue& q = t.dev.default_queue();
    launch(*g.kernels.at(0).impl(), *q.impl(), range(n), nullptr, a.data(), a.size());
    stats_now().kernel_launches++;
  }
  // The expression is done with: drop it (its inputs may now be freed) and keep the storage.
  t.kind = tensor_kind::stored;
  t.mem = std::move(out->mem);
  t.strides = std::move(out->strides);
  t.offset = 0;
  t.args.clear();
}

}  // namespace kiln::detail
