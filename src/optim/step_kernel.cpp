// The one kernel of a step: a rule's element update wrapped in a grid-stride loop over a
// group's flat buffers (cache "optim_step", keyed by the rendered source, which names the
// rule's variant and the element type). On GPUs the launch is capped near the resident thread
// count and each item walks the buffers at the grid's stride (coalesced, and no launch-size
// limit for 100M parameters); elsewhere one item per element.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "optim/optim_impl.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/runtime.hpp"

namespace kiln::optim::detail {

std::string step_source(const update_rule& rule, scalar_type t) {
  // 16-bit parameters: T_ (the math) is float, P_ the stored type, and the f32 master holds the
  // value the update works on. A 16-bit parameter that is not the rounding of its master was
  // written from outside (weights loaded after the optimizer was made): it is adopted as the
  // master, element by element, so the two never silently disagree.
  const bool master = is_reduced_float(t);
  const std::string p_type = master ? type_name(t) : "T_";
  const std::string load = master ? codegen::cat("kiln_", type_name(t), "_to_float(") : "(";
  const std::string round = master ? codegen::cat("kiln_float_to_", type_name(t), "(") : "(";
  std::string params = codegen::cat("KILN_GLOBAL ", p_type, "* KILN_RESTRICT p, KILN_GLOBAL const ",
                                    p_type, "* KILN_RESTRICT g");
  if (master) params += ",\n    KILN_GLOBAL T_* KILN_RESTRICT master";
  for (const std::string& b : rule.buffers)
    params = codegen::cat(params, ",\n    KILN_GLOBAL T_* KILN_RESTRICT st_", b);
  params += ",\n    KILN_GLOBAL int64_t* KILN_RESTRICT steps, KILN_GLOBAL const float* skip";
  params += ",\n    int64_t n";
  for (const std::string& s : rule.scalars) params = codegen::cat(params, ", T_ ", s);
  const std::string load_p =
      master ? codegen::cat("    const ", p_type, " pq = p[i];\n", "    T_ pv = master[i];\n",
                            "    if (", round, "pv).bits != pq.bits) pv = ", load, "pq);\n")
             : std::string("    T_ pv = p[i];\n");
  const std::string store_p =
      master ? codegen::cat("    master[i] = pv;\n    p[i] = ", round, "pv);\n")
             : std::string("    p[i] = pv;\n");
  const std::string text = codegen::cat(  //
      "// ", rule.name, " step over flat buffers", master ? " (f32 master weights)" : "", "\n",
      "KILN_KERNEL void ko_step(", params, ") {\n",
      // A skipped step (grad_scaler found inf/NaN) changes nothing, the step count included.
      "  const int skipped = skip[0] != 0.0f;\n",
      "  const int64_t t = steps[0] + 1;\n",  // ko_count stores it after this kernel
      "  if (skipped) return;\n",             //
      rule.prologue,                          //
      "  const int64_t stride = (int64_t)kiln_global_size(0);\n",
      "  for (int64_t i = (int64_t)kiln_global_id(0); i < n; i += stride) {\n",  //
      load_p,                                                                    //
      "    T_ gv = ", load, "g[i]);\n",                                          //
      rule.body,                                                                 //
      store_p, "  }\n", "}\n",
      // Advances the count once the step has read it (queued after ko_step).
      "KILN_KERNEL void ko_count(KILN_GLOBAL int64_t* steps, KILN_GLOBAL const float* skip) {\n",
      "  if (kiln_global_id(0) == 0 && skip[0] == 0.0f) steps[0] = steps[0] + 1;\n", "}\n");
  return codegen::with_element_type(text, master ? "float" : type_name(t));
}

std::pair<kernel, kernel> step_kernel(const device& dev, const update_rule& rule, scalar_type t) {
  const std::string source = step_source(rule, t);
  ir::hasher h;
  h.add("optim step v4").add(source);
  const kiln::detail::generated_kernels k =
      kiln::detail::get_generated(dev, "optim_step", h.value(), [&] {
        return kiln::detail::generated_program{
            source, {"ko_step", "ko_count"}, rule.name + " step of " + type_name(t)};
      });
  if (k.compiled) kiln::detail::stats_now().programs_compiled++;
  return {k.kernels.at(0), k.kernels.at(1)};
}

kiln::detail::arg_binding mem_arg(kiln::detail::memory_impl& m, scalar_type t, bool is_const) {
  kiln::detail::arg_binding b;
  b.is_mem = true;
  b.mem = &m;
  b.type = t;
  b.is_const = is_const;
  return b;
}

std::uint64_t items_for(const device& dev, std::int64_t n) {
  const device_info& info = dev.info();
  const auto total = static_cast<std::uint64_t>(n);
  if (total == 0) return 1;
  if (info.type != device_type::gpu) return total;
  const std::uint64_t units = std::max<std::uint32_t>(info.compute_units, 16);
  return std::min<std::uint64_t>(total, units * 2048);
}

namespace {

kiln::detail::arg_binding scalar_arg(double v, scalar_type t) {
  return t == scalar_type::f64 ? kiln::detail::bind_arg(v)
                               : kiln::detail::bind_arg(static_cast<float>(v));
}

}  // namespace

void launch_step(const update_rule& rule, const group& g, const std::vector<double>& values,
                 kiln::detail::memory_impl* skip) {
  if (values.size() != rule.scalars.size())  // a rule's values() out of step with its scalars
    throw std::logic_error("kiln::optim::" + rule.name + ": " + std::to_string(values.size()) +
                           " scalar values for " + std::to_string(rule.scalars.size()) +
                           " parameters");
  // Launched even with no elements: item 0 advances the group's step count.
  std::vector<kiln::detail::arg_binding> args{mem_arg(*g.params, g.dtype, false),
                                              mem_arg(*g.grads, g.dtype, true)};
  if (g.master) args.push_back(mem_arg(*g.master, g.math, false));
  for (const auto& s : g.state) args.push_back(mem_arg(*s, g.math, false));
  args.push_back(mem_arg(*g.steps, scalar_type::i64, false));
  args.push_back(mem_arg(skip ? *skip : *g.no_skip, scalar_type::f32, true));
  args.push_back(kiln::detail::bind_arg(g.n));
  for (double v : values) args.push_back(scalar_arg(v, g.math));
  queue& q = g.dev.default_queue();
  kiln::detail::launch(*g.step, *q.impl(), range(items_for(g.dev, g.n)), nullptr, args.data(),
                       args.size());
  kiln::detail::arg_binding count_args[] = {
      mem_arg(*g.steps, scalar_type::i64, false),
      mem_arg(skip ? *skip : *g.no_skip, scalar_type::f32, true)};
  kiln::detail::launch(*g.count, *q.impl(), range(1), nullptr, count_args, 2);
  kiln::detail::stats_now().kernel_launches += 2;
}

}  // namespace kiln::optim::detail
