// Evaluation of a lazy tensor: lower its expression (tensor/kernel.cpp), find or render and
// compile its one kernel by structural key, launch it over the contiguous output on the
// device's default queue, and keep the result in the tensor itself.
#include <algorithm>
#include <unordered_set>

#include "ir/layout.hpp"
#include "ir/print.hpp"
#include "kiln/kernel.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/log.hpp"
#include "runtime/nvtx.hpp"
#include "tensor/fallback.hpp"
#include "tensor/kernel.hpp"
#include "tensor/kernel_args.hpp"
#include "tensor/placement.hpp"
#include "tensor/reduce_kernel.hpp"
#include "tensor/row_kernel.hpp"

namespace kiln::detail {
namespace {

constexpr std::uint32_t elementwise_bytes = 16;  // bytes in flight per item, widest type
constexpr std::uint64_t elementwise_multi_min = std::uint64_t(1) << 20;

// Elements per item of the vector-lane forms (tensor/kernel.hpp vector_lanes): 8 lanes twice
// per item ran at 99% of a copy on an H200 (4 lanes x 4: 96-98%, 2 x 8: 86-88%, 8 x 1: 95-99%,
// 8 x 4: 97-98%).
constexpr std::uint32_t elementwise_lane_elements = 16;

// Iterations per item of a multi-element kernel with `lanes`: word forms keep
// elementwise_lane_elements per item; otherwise 16 bytes of the widest type in flight (4 f32,
// 8 bf16, 16 int8): with 4 per item, element-by-element 16-bit chains ran at 80% of a copy on an
// H100, f32 ones at 100%.
std::uint32_t items_per_item(const lowered& l, std::uint32_t lanes) {
  if (lanes > 1) return std::max<std::uint32_t>(1, elementwise_lane_elements / lanes);
  std::size_t widest = size_of(l.g[l.g.roots[0]].dtype);
  for (const ir::input& in : l.g.inputs) widest = std::max(widest, size_of(in.type));
  return std::clamp<std::uint32_t>(elementwise_bytes / std::uint32_t(widest), 4, 16);
}

// The arguments in render_kernel's order.
std::vector<arg_binding> arguments(const lowered& l, memory_impl& out) {
  std::vector<arg_binding> a;
  add_mem(a, out, 0, l.g[l.g.roots[0]].dtype);
  for (const tensor_impl* t : l.leaves)
    add_mem(a, *t->mem, static_cast<std::uint64_t>(t->offset) * size_of(t->dtype), t->dtype);
  for (const ir::capture& c : l.g.captures) add_scalar(a, c);
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

bool is_reduce(const tensor_impl& t) {
  return t.kind == tensor_kind::op && ir::info(t.o).cls == ir::op_class::reduce;
}

// The unevaluated reductions t's elementwise expression reads, each once, not looking inside
// them.
void reductions_in(tensor_impl& t, std::vector<tensor_impl*>& out,
                   std::unordered_set<const tensor_impl*>& seen) {
  if (t.kind != tensor_kind::op || !seen.insert(&t).second) return;
  if (is_reduce(t)) {
    out.push_back(&t);
    return;
  }
  for (auto& a : t.args) reductions_in(*a, out, seen);
}

void store_result(tensor_impl& t, std::shared_ptr<tensor_impl> out) {
  // The expression is done with: drop it (its inputs may now be freed) and keep the storage.
  t.kind = tensor_kind::stored;
  t.mem = std::move(out->mem);
  t.strides = std::move(out->strides);
  t.offset = 0;
  t.args.clear();
}

}  // namespace

namespace {
thread_local bool t_evaluating = false;  // inside materialise: the expression is placed
}

void materialise(tensor_impl& t) {
  if (t.kind == tensor_kind::stored) return;
  if (!t_evaluating) {  // the outermost call places the whole expression (kiln::automatic)
    t_evaluating = true;
    struct done {
      ~done() { t_evaluating = false; }
    } guard;
    auto evaluate = [](tensor_impl& x) {
      place_expression(x);
      materialise(x);
    };
    if (const fallback* chain = fallback_scope::current())
      materialise_falling_back(t, *chain, evaluate);
    else
      evaluate(t);
    return;
  }
  const trace_range traced("tensor", ir::info(t.o).name);  // one per kernel-sized evaluation
  if (!row_fusable(t).empty()) {                           // softmax, row normalisation: one kernel
    store_result(t, run_rows(t));
    return;
  }
  // At most one reduction fuses with t's elementwise work: t itself, or one read once per
  // element of t (same shape). Every other reduction runs first, as its own kernel.
  std::vector<tensor_impl*> reds;
  std::unordered_set<const tensor_impl*> seen;
  reductions_in(t, reds, seen);
  tensor_impl* fused = nullptr;
  for (tensor_impl* r : reds) {
    if (!fused && r->shape == t.shape)
      fused = r;
    else
      materialise(*r);
  }
  if (fused && fused->kind != tensor_kind::op) fused = nullptr;  // another one evaluated it
  if (fused) {
    std::vector<tensor_impl*> inner;
    seen.clear();
    reductions_in(*fused->args.at(0), inner, seen);
    for (tensor_impl* r : inner) materialise(*r);
    store_result(t, run_reduce(t, *fused));
    return;
  }
  const lowered l = lower(t);
  auto out = allocate_tensor(t.dev, t.shape, t.dtype);
  const auto n = static_cast<std::uint64_t>(numel_of(t.shape));
  if (n) {
    // Large outputs on devices with work-groups of threads (GPUs): several elements per item.
    const bool multi = t.dev.supports(feature::barrier) && n >= elementwise_multi_min;
    const std::uint32_t lanes = multi ? vector_lanes(l) : 1;
    const std::uint32_t items = multi ? items_per_item(l, lanes) : 1;
    generated_kernels g = get_generated(t.dev, "tensor", kernel_key(l, items, lanes), [&] {
      return generated_program{render_kernel(l, items, lanes), {"kt_eval"}, ir::print(l.g)};
    });
    if (g.compiled) stats_now().programs_compiled++;
    if (log_enabled(log_level::trace))  // the arguments cost even when not logged
      logf(log_level::trace, "tensor {} {} {} on {}: elementwise kernel, {} nodes over {} inputs",
           ir::info(t.o).name, to_string(t.shape), type_name(t.dtype), t.dev.id(), l.g.nodes.size(),
           l.g.inputs.size());
    std::vector<arg_binding> a = arguments(l, *out->mem);
    if (items > 1 || lanes > 1) a.push_back(bind_arg(n));
    queue& q = t.dev.default_queue();
    const std::uint64_t per_item = std::uint64_t{items} * lanes;
    launch(*g.kernels.at(0).impl(), *q.impl(), range((n + per_item - 1) / per_item), nullptr,
           a.data(), a.size());
    stats_now().kernel_launches++;
  }
  store_result(t, std::move(out));
}

}  // namespace kiln::detail
