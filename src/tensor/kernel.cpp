#include "tensor/kernel.hpp"

#include <string_view>
#include <unordered_map>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "ir/layout.hpp"

namespace kiln::detail {
namespace {

// The input layout of a stored tensor read at every position of `out` (NumPy broadcasting:
// right-aligned; missing and size-1 dimensions have stride 0).
ir::layout layout_over(const tensor_impl& t, const shape_t& out) {
  ir::layout l;
  l.rank = static_cast<std::uint8_t>(out.size());
  const std::size_t lead = out.size() - t.shape.size();
  for (std::size_t k = 0; k < out.size(); ++k) {
    l.dims[k] = out[k];
    l.strides[k] = k < lead || t.shape[k - lead] == 1 ? 0 : t.strides[k - lead];
  }
  return l;
}

struct lowering {
  lowered& out;
  std::unordered_map<const tensor_impl*, ir::node_id> seen;

  ir::node_id visit(const tensor_impl& t) {
    if (auto it = seen.find(&t); it != seen.end()) return it->second;
    ir::node_id id = -1;
    switch (t.kind) {
      case tensor_kind::stored: {
        const auto slot = static_cast<std::int32_t>(out.g.inputs.size());
        out.g.inputs.push_back({t.dtype, layout_over(t, out.shape)});
        out.leaves.push_back(&t);
        id = out.g.add(ir::op::load, t.dtype, {}, slot);
        break;
      }
      case tensor_kind::scalar: {
        out.g.captures.push_back(t.value);
        id = out.g.add(ir::op::capture, t.dtype, {},
                       static_cast<std::int32_t>(out.g.captures.size() - 1));
        break;
      }
      case tensor_kind::op: {
        ir::node n{t.o, t.dtype, {-1, -1, -1}, 0};
        for (std::size_t k = 0; k < t.args.size(); ++k) n.operands[k] = visit(*t.args[k]);
        id = out.g.add(n);
        break;
      }
    }
    seen.emplace(&t, id);
    return id;
  }
};

using codegen::cat;
using codegen::num;

}  // namespace

lowered lower(const tensor_impl& root) {
  lowered l;
  l.shape = root.shape;
  lowering w{l, {}};
  l.g.roots.push_back(w.visit(root));
  return l;
}

std::uint64_t kernel_key(const lowered& l, std::uint32_t items) {
  ir::hasher h;
  h.add("tensor elementwise v1").add(l.shape.size()).add(std::uint64_t{items}).add_nodes(l.g);
  return h.value();
}

std::string render_kernel(const lowered& l, std::uint32_t items) {
  const ir::graph& g = l.g;
  const ir::node_id root = g.roots.at(0);
  const std::size_t rank = l.shape.size();
  bool decompose = false;
  for (const ir::input& in : g.inputs) decompose |= !ir::is_flat(in.l);

  std::string s;
  for (const codegen::helper& h : codegen::helpers_in(g)) s += codegen::helper_def(h);
  s += cat("KILN_KERNEL void kt_eval(KILN_GLOBAL ", type_name(g[root].dtype),
           "* KILN_RESTRICT kt_out");
  for (std::size_t k = 0; k < g.inputs.size(); ++k)
    s += cat(", KILN_GLOBAL const ", type_name(g.inputs[k].type), "* KILN_RESTRICT kt_in", num(k));
  for (std::size_t c = 0; c < g.captures.size(); ++c)
    s += cat(", ", type_name(g.captures[c].type), " ", codegen::capture_name(static_cast<int>(c)));
  if (decompose)
    for (std::size_t d = 1; d < rank; ++d) s += cat(", int64_t kt_d", num(d));
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    const ir::layout& L = g.inputs[k].l;
    if (ir::is_flat(L)) continue;
    for (std::size_t d = 0; d < rank; ++d)
      if (ir::classify(L.dims[d], L.strides[d]) == ir::stride_class::general)
        s += cat(", int64_t kt_s", num(k), "_", num(d));
  }
  if (items > 1) s += ", uint64_t kt_total";
  s += ") {\n";
  if (items > 1)  // element kq_i + k * (items launched) for k < items: coalesced, loads overlap
    s += cat("#pragma unroll\n  for (uint32_t kt_k = 0; kt_k < ", num(items), "u; ++kt_k) {\n",
             "  const uint64_t kq_i = kiln_global_id(0) + kt_k * kiln_global_size(0);\n",
             "  if (kq_i >= kt_total) break;\n");
  else
    s += "  const uint64_t kq_i = kiln_global_id(0);\n";
  if (decompose && rank) {
    // The output position's coordinates, last dimension fastest.
    s += "  int64_t kt_r = (int64_t)kq_i;\n";
    for (std::size_t d = rank; d-- > 1;)
      s += cat("  const int64_t kt_x", num(d), " = kt_r % kt_d", num(d), ";\n  kt_r /= kt_d",
               num(d), ";\n");
    s += "  const int64_t kt_x0 = kt_r;\n";
  }
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    const ir::layout& L = g.inputs[k].l;
    std::string at;
    if (ir::is_flat(L)) {
      at.append("kq_i");
    } else {
      for (std::size_t d = 0; d < rank; ++d) {
        const ir::stride_class c = ir::classify(L.dims[d], L.strides[d]);
        if (c == ir::stride_class::zero) continue;
        at += cat(at.empty() ? "" : " + ", "kt_x", num(d));
        if (c == ir::stride_class::general) at += cat(" * kt_s", num(k), "_", num(d));
      }
      if (at.empty()) at.append("0");
    }
    s += cat("  const ", codegen::value_type(g.inputs[k].type), " ",
             codegen::load_name(static_cast<int>(k)), " = ",
             codegen::load_value(g.inputs[k].type, cat("kt_in", num(k), "[", at, "]")), ";\n");
  }
  // One statement per operation node: a shared subexpression is computed once.
  const auto name = [&](ir::node_id x) {
    return ir::info(g[x].o).cls == ir::op_class::leaf ? codegen::render_expr(g, x)
                                                      : cat("kt_n", num(std::size_t(x)));
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const auto id = static_cast<ir::node_id>(i);
    if (ir::info(g[id].o).cls == ir::op_class::leaf) continue;
    s += cat("  const ", codegen::value_type(g[id].dtype), " ", name(id), " = ",
             codegen::render_node(g, id, name), ";\n");
  }
  s += cat("  kt_out[kq_i] = ", codegen::store_value(g[root].dtype, name(root)), ";\n");
  return s += items > 1 ? "  }\n}\n" : "}\n";
}

}  // namespace kiln::detail
