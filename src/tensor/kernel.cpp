#include "tensor/kernel.hpp"

#include <string_view>
#include <unordered_map>

#include "codegen/expr_render.hpp"
#include "codegen/half_words.hpp"
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

// The kernel's opening up to its captures: helpers, then "KILN_KERNEL void kt_eval(out, inputs,
// captures" (no closing parenthesis).
std::string signature(const ir::graph& g) {
  std::string s;
  for (const codegen::helper& h : codegen::helpers_in(g)) s += codegen::helper_def(h);
  s += cat("KILN_KERNEL void kt_eval(KILN_GLOBAL ", type_name(g[g.roots.at(0)].dtype),
           "* KILN_RESTRICT kt_out");
  for (std::size_t k = 0; k < g.inputs.size(); ++k)
    s += cat(", KILN_GLOBAL const ", type_name(g.inputs[k].type), "* KILN_RESTRICT kt_in", num(k));
  for (std::size_t c = 0; c < g.captures.size(); ++c)
    s += cat(", ", type_name(g.captures[c].type), " ", codegen::capture_name(static_cast<int>(c)));
  return s;
}

std::string node_name(const ir::graph& g, ir::node_id x) {
  return ir::info(g[x].o).cls == ir::op_class::leaf ? codegen::render_expr(g, x)
                                                    : cat("kt_n", num(std::size_t(x)));
}

// One statement per operation node: a shared subexpression is computed once.
std::string statements(const ir::graph& g, const char* indent) {
  std::string s;
  const auto name = [&](ir::node_id x) { return node_name(g, x); };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const auto id = static_cast<ir::node_id>(i);
    if (ir::info(g[id].o).cls == ir::op_class::leaf) continue;
    s += cat(indent, "const ", codegen::value_type(g[id].dtype), " ", name(id), " = ",
             codegen::render_node(g, id, name), ";\n");
  }
  return s;
}

// Vector lanes (every input flat): item v computes elements [v * lanes, v * lanes + lanes), each
// 16-bit float array moved as one word of 2 * lanes bytes (uint32_t, uint2 or uint4: the field
// names .x .y .z .w are CUDA's and OpenCL's alike); other inputs are read per lane. A ragged
// last vector reads and writes element by element (its missing lanes compute lane 0 again and
// are not stored). The caller checks that every 16-bit input starts on a word boundary.
std::string render_lanes(const lowered& l, std::uint32_t items, std::uint32_t lanes) {
  const ir::graph& g = l.g;
  const ir::node_id root = g.roots.at(0);
  const scalar_type out_t = g[root].dtype;
  const bool out_words = is_reduced_float(out_t);
  const std::uint32_t words = lanes / 2;
  const std::string word = codegen::word_type(words);
  const auto part = [&](std::uint32_t w) { return codegen::word_field(words, w); };
  const auto bits = [&](std::size_t k, std::uint32_t j) {
    return cat("kt_b", num(k), "_", num(j));
  };

  std::string s = signature(g) + ", uint64_t kt_total) {\n";
  s += cat("#pragma unroll\n  for (uint32_t kt_k = 0; kt_k < ", num(items), "u; ++kt_k) {\n",
           "  const uint64_t kt_v = kiln_global_id(0) + kt_k * kiln_global_size(0);\n",
           "  const uint64_t kt_i0 = kt_v * ", num(lanes), "u;\n",
           "  if (kt_i0 >= kt_total) break;\n  const bool kt_full = kt_i0 + ", num(lanes),
           "u <= kt_total;\n");
  std::string whole, ragged;
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    if (!is_reduced_float(g.inputs[k].type)) continue;
    s += "  uint16_t";
    for (std::uint32_t j = 0; j < lanes; ++j) s += cat(j ? ", " : " ", bits(k, j));
    s += ";\n";
    whole += cat("    const ", word, " kt_w", num(k), " = ((KILN_GLOBAL const ", word, "*)kt_in",
                 num(k), ")[kt_v];\n");
    for (std::uint32_t j = 0; j < lanes; ++j)
      whole += cat("    ", bits(k, j), " = ",
                   codegen::half_bits(cat("kt_w", num(k), part(j / 2)), j % 2), ";\n");
    for (std::uint32_t j = 0; j < lanes; ++j)
      ragged += cat("    ", bits(k, j), " = kt_in", num(k), "[kt_i0 + ", num(j),
                    "u < kt_total ? kt_i0 + ", num(j), "u : kt_i0].bits;\n");
  }
  if (!whole.empty()) s += cat("  if (kt_full) {\n", whole, "  } else {\n", ragged, "  }\n");
  const std::string result = out_words ? "uint16_t" : type_name(out_t);
  for (std::uint32_t j = 0; j < lanes; ++j) {
    s += cat("  ", result, " kt_r", num(j), ";\n  {\n    const uint64_t kq_i = kt_i0 + ", num(j),
             "u < kt_total ? kt_i0 + ", num(j), "u : kt_i0;\n");
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      const scalar_type t = g.inputs[k].type;
      s += cat(
          "    const ", codegen::value_type(t), " ", codegen::load_name(static_cast<int>(k)), " = ",
          is_reduced_float(t) ? codegen::widen_bits(t, bits(k, j)) : cat("kt_in", num(k), "[kq_i]"),
          ";\n");
    }
    s += statements(g, "    ");
    const std::string v = node_name(g, root);
    s += cat("    kt_r", num(j), " = ", out_words ? codegen::bits_of(out_t, v) : v, ";\n  }\n");
  }
  if (out_words) {
    s += cat("  if (kt_full) {\n    ", word, " kt_o;\n");
    for (std::uint32_t w = 0; w < words; ++w)
      s += cat("    kt_o", part(w), " = ",
               codegen::pack_bits(cat("kt_r", num(2 * w)), cat("kt_r", num(2 * w + 1))), ";\n");
    s += cat("    ((KILN_GLOBAL ", word, "*)kt_out)[kt_v] = kt_o;\n  } else {\n");
    for (std::uint32_t j = 0; j < lanes; ++j)
      s += cat("    if (kt_i0 + ", num(j), "u < kt_total) kt_out[kt_i0 + ", num(j),
               "u].bits = kt_r", num(j), ";\n");
    s += "  }\n";
  } else {
    for (std::uint32_t j = 0; j < lanes; ++j)
      s += cat("  if (kt_i0 + ", num(j), "u < kt_total) kt_out[kt_i0 + ", num(j), "u] = kt_r",
               num(j), ";\n");
  }
  return s += "  }\n}\n";
}

}  // namespace

lowered lower(const tensor_impl& root) {
  lowered l;
  l.shape = root.shape;
  lowering w{l, {}};
  l.g.roots.push_back(w.visit(root));
  return l;
}

std::uint64_t kernel_key(const lowered& l, std::uint32_t items, std::uint32_t lanes) {
  ir::hasher h;
  h.add("tensor elementwise v2").add(l.shape.size()).add(std::uint64_t{items});
  h.add(std::uint64_t{lanes}).add_nodes(l.g);
  return h.value();
}

std::string render_kernel(const lowered& l, std::uint32_t items, std::uint32_t lanes) {
  if (lanes > 1) return render_lanes(l, items, lanes);
  const ir::graph& g = l.g;
  const ir::node_id root = g.roots.at(0);
  const std::size_t rank = l.shape.size();
  bool decompose = false;
  for (const ir::input& in : g.inputs) decompose |= !ir::is_flat(in.l);

  std::string s = signature(g);
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
  s += statements(g, "  ");
  s += cat("  kt_out[kq_i] = ", codegen::store_value(g[root].dtype, node_name(g, root)), ";\n");
  return s += items > 1 ? "  }\n}\n" : "}\n";
}

}  // namespace kiln::detail
