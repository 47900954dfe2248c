// Running one reduction kernel (or a split's two): arguments in render_reduce's order, the
// launch shape of its plan, and the partials' scratch memory.
#include "ir/layout.hpp"
#include "ir/print.hpp"
#include "kiln/kernel.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/log.hpp"
#include "tensor/kernel_args.hpp"
#include "tensor/promote.hpp"
#include "tensor/reduce_kernel.hpp"

namespace kiln::detail {
std::shared_ptr<tensor_impl> run_reduce(const tensor_impl& root, const tensor_impl& red) {
  const reduce_lowered l = lower_reduce(root, red);
  auto out = allocate_tensor(root.dev, root.shape, root.dtype);
  const std::int64_t outs = l.outputs();
  if (outs == 0) return out;
  const reduce_plan p = plan_reduce(l, root.dev);
  const bool split = p.chunks > 1;
  generated_kernels k = get_generated(root.dev, "tensor_reduce", reduce_key(l, p), [&] {
    std::vector<std::string> names{split ? "kt_part" : "kt_reduce"};
    if (split) names.push_back("kt_fold_parts");
    return generated_program{render_reduce(l, p), names, ir::print(l.g)};
  });
  if (k.compiled) stats_now().programs_compiled++;
  if (log_enabled(log_level::trace))  // the arguments cost even when not logged
    logf(log_level::trace,
         "tensor {} of {} {} -> {} on {}: {} outputs x {} elements, {} strategy, {} chunks, {} "
         "lanes",
         ir::info(red.o).name, to_string(red.args.at(0)->shape), type_name(red.args.at(0)->dtype),
         to_string(root.shape), root.dev.id(), outs, l.rows(),
         p.strategy == reduce_strategy::group ? "group" : "thread", p.chunks, p.lanes);

  const ir::node& R = l.g[l.red];
  const scalar_type acc = compute_type(l.g[R.operands[0]].dtype);  // f16, bf16: f32
  const bool arg = R.o == ir::op::argmax || R.o == ir::op::argmin;
  const auto parts = static_cast<std::uint64_t>(outs * p.chunks);
  std::shared_ptr<memory_impl> pv, pi;
  std::vector<arg_binding> a;
  add_mem(a, *out->mem, 0, root.dtype);
  if (split) {
    pv = allocate(root.dev, parts * size_of(acc));
    add_mem(a, *pv, 0, acc);
    if (arg) {
      pi = allocate(root.dev, parts * sizeof(std::int64_t));
      add_mem(a, *pi, 0, scalar_type::i64);
    }
  }
  for (const tensor_impl* t : l.leaves)
    add_mem(a, *t->mem, static_cast<std::uint64_t>(t->offset) * size_of(t->dtype), t->dtype);
  for (const ir::capture& c : l.g.captures) add_scalar(a, c);
  add_scalar(a, reduce_init(R.o, acc));
  for (std::size_t d = 1; d < l.kept.size(); ++d) a.push_back(bind_arg(l.kept[d]));
  for (std::size_t j = 1; j < l.reduced.size(); ++j) a.push_back(bind_arg(l.reduced[j]));
  a.push_back(bind_arg(l.rows()));
  if (split) {
    a.push_back(bind_arg(p.chunk_len));
    a.push_back(bind_arg(p.chunks));
    a.push_back(bind_arg(outs));
  }
  const bool group = p.strategy == reduce_strategy::group;
  const std::uint64_t per_group = reduce_policy::group / p.lanes;
  if (group) a.push_back(bind_arg(std::int64_t(parts)));
  for (const ir::input& in : l.g.inputs)
    for (int d = 0; d < in.l.rank; ++d)
      if (ir::classify(in.l.dims[d], in.l.strides[d]) == ir::stride_class::general)
        a.push_back(bind_arg(in.l.strides[d]));

  queue& q = root.dev.default_queue();
  const auto items = static_cast<std::uint64_t>(parts);
  const local_size whole(reduce_policy::group);
  if (group) {
    const std::uint64_t groups = (items + per_group - 1) / per_group;
    launch(*k.kernels.at(0).impl(), *q.impl(), range(groups * reduce_policy::group), &whole,
           a.data(), a.size());
  } else if (!root.dev.supports(feature::barrier) &&
             items < std::uint64_t(std::max(root.dev.info().compute_units, 1u)) * 64) {
    // Few long work-items on the CPU: one per work-group, so they spread over the cores.
    const local_size ls(1);
    launch(*k.kernels.at(0).impl(), *q.impl(), range(items), &ls, a.data(), a.size());
  } else if (p.fold_lanes > 1) {  // the program has a barrier: whole groups
    const std::uint64_t g = reduce_policy::group;
    launch(*k.kernels.at(0).impl(), *q.impl(), range((items + g - 1) / g * g), &whole, a.data(),
           a.size());
  } else {
    launch(*k.kernels.at(0).impl(), *q.impl(), range(items), nullptr, a.data(), a.size());
  }
  stats_now().kernel_launches++;
  if (split && p.fold_lanes > 1) {
    const std::uint64_t fold_per_group = reduce_policy::group / p.fold_lanes;
    const std::uint64_t groups = (std::uint64_t(outs) + fold_per_group - 1) / fold_per_group;
    launch(*k.kernels.at(1).impl(), *q.impl(), range(groups * reduce_policy::group), &whole,
           a.data(), a.size());
    stats_now().kernel_launches++;
  } else if (split) {
    launch(*k.kernels.at(1).impl(), *q.impl(), range(static_cast<std::uint64_t>(outs)), nullptr,
           a.data(), a.size());
    stats_now().kernel_launches++;
  }
  return out;
}

}  // namespace kiln::detail
