#include "tensor/kernel.hpp"

#include <algorithm>
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

bool decomposes(const ir::graph& g) {
  for (const ir::input& in : g.inputs)
    if (!ir::is_flat(in.l)) return true;
  return false;
}

// The parameters after the captures when an input is strided: the output's sizes but the first,
// then each general stride of each input (in input order, then dimension order).
std::string shape_params(const lowered& l) {
  const ir::graph& g = l.g;
  const std::size_t rank = l.shape.size();
  std::string s;
  if (!decomposes(g)) return s;
  for (std::size_t d = 1; d < rank; ++d) s += cat(", int64_t kt_d", num(d));
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    const ir::layout& L = g.inputs[k].l;
    if (ir::is_flat(L)) continue;
    for (std::size_t d = 0; d < rank; ++d)
      if (ir::classify(L.dims[d], L.strides[d]) == ir::stride_class::general)
        s += cat(", int64_t kt_s", num(k), "_", num(d));
  }
  return s;
}

// Coordinates kt_x0.. of output position `index`, last dimension fastest.
std::string coordinates(std::size_t rank, const char* index) {
  std::string s = cat("  int64_t kt_r = (int64_t)", index, ";\n");
  for (std::size_t d = rank; d-- > 1;)
    s += cat("  const int64_t kt_x", num(d), " = kt_r % kt_d", num(d), ";\n  kt_r /= kt_d", num(d),
             ";\n");
  return s + "  const int64_t kt_x0 = kt_r;\n";
}

// Input k's element offset at the coordinates ("0" when it is broadcast along every dimension).
std::string strided_offset(const ir::layout& L, std::size_t k, std::size_t rank) {
  std::string at;
  for (std::size_t d = 0; d < rank; ++d) {
    const ir::stride_class c = ir::classify(L.dims[d], L.strides[d]);
    if (c == ir::stride_class::zero) continue;
    at += cat(at.empty() ? "" : " + ", "kt_x", num(d));
    if (c == ir::stride_class::general) at += cat(" * kt_s", num(k), "_", num(d));
  }
  return at.empty() ? std::string("0") : at;
}

// Arrays that move as words in a lanes form: f16/bf16 and f32.
bool word_type(scalar_type t) { return is_reduced_float(t) || t == scalar_type::f32; }

// Elements of type t in one word (at most 16 bytes) of a vector of `lanes`.
std::uint32_t word_elements(scalar_type t, std::uint32_t lanes) {
  return std::min<std::uint32_t>(lanes, 16 / std::uint32_t(size_of(t)));
}

// The word type holding `c` elements of t (uint32_t / uint2 / uint4 for 16-bit arrays,
// float2 / float4 for f32) and the expression of element p of word w as its value type.
std::string word_name(scalar_type t, std::uint32_t c) {
  return is_reduced_float(t) ? codegen::word_type(c / 2) : c == 2 ? "float2" : "float4";
}
std::string word_element(scalar_type t, std::uint32_t c, const std::string& w, std::uint32_t p) {
  if (!is_reduced_float(t)) return cat(w, ".", std::string(1, "xyzw"[p]));
  return codegen::half_of_word(t, cat(w, codegen::word_field(c / 2, p / 2)), p % 2);
}

// Reads its elements along the output's last dimension one after another (flat, or stride 1
// there).
bool unit_inner(const ir::layout& L) {
  return ir::is_flat(L) || (L.rank && ir::classify(L.dims[L.rank - 1], L.strides[L.rank - 1]) ==
                                          ir::stride_class::one);
}

// Every word of input k starts on a word boundary: its offset and the strides of its outer
// dimensions are multiples of c elements (the inner position of a vector is a multiple of lanes).
bool words_aligned(const lowered& l, std::size_t k, std::uint32_t c) {
  if (l.leaves[k]->offset % c) return false;
  const ir::layout& L = l.g.inputs[k].l;
  if (ir::is_flat(L)) return true;
  for (int d = 0; d + 1 < L.rank; ++d)
    if (ir::classify(L.dims[d], L.strides[d]) != ir::stride_class::zero && L.strides[d] % c)
      return false;
  return true;
}

std::vector<bool> word_inputs(const lowered& l, std::uint32_t lanes) {
  std::vector<bool> w(l.g.inputs.size(), false);
  if (lanes < 2) return w;
  for (std::size_t k = 0; k < w.size(); ++k) {
    const ir::input& in = l.g.inputs[k];
    w[k] = word_type(in.type) && unit_inner(in.l) &&
           words_aligned(l, k, word_elements(in.type, lanes));
  }
  return w;
}

// Vector lanes: item v computes elements [v * lanes, v * lanes + lanes) per iteration. f16/bf16
// and f32 arrays read along their rows move as words of up to 16 bytes (the field names
// .x .y .z .w are CUDA's and OpenCL's alike); other inputs are read lane by lane. With strided
// inputs the vector's first element is decomposed into coordinates once (the output's last
// dimension is a multiple of lanes, so a vector never crosses a row); with flat inputs only, a
// ragged last vector reads and writes element by element (its missing lanes compute lane 0
// again and are not stored).
std::string render_lanes(const lowered& l, std::uint32_t items, std::uint32_t lanes) {
  const ir::graph& g = l.g;
  const ir::node_id root = g.roots.at(0);
  const scalar_type out_t = g[root].dtype;
  const std::size_t rank = l.shape.size();
  const bool strided = decomposes(g);
  const std::vector<bool> words = word_inputs(l, lanes);
  const auto lane = [&](std::size_t k, std::uint32_t j) {
    return cat("kt_b", num(k), "_", num(j));
  };

  std::string s = signature(g) + shape_params(l) + ", uint64_t kt_total) {\n";
  s += cat("#pragma unroll\n  for (uint32_t kt_k = 0; kt_k < ", num(items), "u; ++kt_k) {\n",
           "  const uint64_t kt_v = kiln_global_id(0) + kt_k * kiln_global_size(0);\n",
           "  const uint64_t kt_i0 = kt_v * ", num(lanes), "u;\n",
           "  if (kt_i0 >= kt_total) break;\n");
  if (strided) {  // the vector's coordinates, then each strided input's start
    s += coordinates(rank, "kt_i0");
  } else {
    s += cat("  const bool kt_full = kt_i0 + ", num(lanes), "u <= kt_total;\n");
  }
  // Element index of input k at lane j.
  std::vector<std::string> start(g.inputs.size(), "kt_i0"), step(g.inputs.size(), "1");
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    const ir::layout& L = g.inputs[k].l;
    if (ir::is_flat(L)) continue;
    s += cat("  const int64_t kt_a", num(k), " = ", strided_offset(L, k, rank), ";\n");
    start[k] = cat("kt_a", num(k));
    const ir::stride_class c = ir::classify(L.dims[rank - 1], L.strides[rank - 1]);
    step[k] = c == ir::stride_class::zero  ? "0"
              : c == ir::stride_class::one ? "1"
                                           : cat("kt_s", num(k), "_", num(rank - 1));
  }
  const auto at = [&](std::size_t k, std::uint32_t j) {
    if (!strided) return cat("kt_i0 + ", num(j), "u < kt_total ? kt_i0 + ", num(j), "u : kt_i0");
    if (step[k] == "0" || j == 0) return start[k];
    return cat(start[k], " + ", step[k] == "1" ? num(j) : cat(num(j), " * ", step[k]));
  };
  // Word inputs: each lane's value, from its words (or element by element in a ragged vector).
  std::string whole, ragged;
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    if (!words[k]) continue;
    const scalar_type t = g.inputs[k].type;
    const std::uint32_t c = word_elements(t, lanes);
    const std::string w = word_name(t, c);
    s += "  float";
    for (std::uint32_t j = 0; j < lanes; ++j) s += cat(j ? ", " : " ", lane(k, j));
    s += ";\n";
    for (std::uint32_t m = 0; m < lanes / c; ++m)
      whole += cat("    const ", w, " kt_w", num(k), "_", num(m), " = ((KILN_GLOBAL const ", w,
                   "*)kt_in", num(k), ")[", start[k], " / ", num(c), " + ", num(m), "];\n");
    for (std::uint32_t j = 0; j < lanes; ++j)
      whole += cat("    ", lane(k, j), " = ",
                   word_element(t, c, cat("kt_w", num(k), "_", num(j / c)), j % c), ";\n");
    for (std::uint32_t j = 0; j < lanes; ++j)
      ragged += cat("    ", lane(k, j), " = ",
                    codegen::load_value(t, cat("kt_in", num(k), "[", at(k, j), "]")), ";\n");
  }
  if (!whole.empty())
    s += strided ? cat("  {\n", whole, "  }\n")
                 : cat("  if (kt_full) {\n", whole, "  } else {\n", ragged, "  }\n");
  const bool out_words = word_type(out_t);
  const std::string result = is_reduced_float(out_t) ? "uint16_t" : type_name(out_t);
  for (std::uint32_t j = 0; j < lanes; ++j) {
    s += cat("  ", result, " kt_r", num(j), ";\n  {\n");
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      const scalar_type t = g.inputs[k].type;
      s += cat(
          "    const ", codegen::value_type(t), " ", codegen::load_name(static_cast<int>(k)), " = ",
          words[k] ? lane(k, j) : codegen::load_value(t, cat("kt_in", num(k), "[", at(k, j), "]")),
          ";\n");
    }
    s += statements(g, "    ");
    const std::string v = node_name(g, root);
    s += cat("    kt_r", num(j), " = ", is_reduced_float(out_t) ? codegen::bits_of(out_t, v) : v,
             ";\n  }\n");
  }
  std::string each;  // element-by-element stores
  for (std::uint32_t j = 0; j < lanes; ++j)
    each += cat("    if (kt_i0 + ", num(j), "u < kt_total) kt_out[kt_i0 + ", num(j), "u]",
                is_reduced_float(out_t) ? ".bits" : "", " = kt_r", num(j), ";\n");
  if (!out_words) return s += each + "  }\n}\n";
  const std::uint32_t c = word_elements(out_t, lanes);
  const std::string w = word_name(out_t, c);
  std::string store;
  for (std::uint32_t m = 0; m < lanes / c; ++m) {
    store += cat("    ", w, " kt_o", num(m), ";\n");
    if (is_reduced_float(out_t)) {
      for (std::uint32_t p = 0; p < c; p += 2)
        store +=
            cat("    kt_o", num(m), codegen::word_field(c / 2, p / 2), " = ",
                codegen::pack_bits(cat("kt_r", num(m * c + p)), cat("kt_r", num(m * c + p + 1))),
                ";\n");
    } else {
      for (std::uint32_t p = 0; p < c; ++p)
        store += cat("    kt_o", num(m), ".", std::string(1, "xyzw"[p]), " = kt_r", num(m * c + p),
                     ";\n");
    }
    store += cat("    ((KILN_GLOBAL ", w, "*)kt_out)[kt_i0 / ", num(c), " + ", num(m), "] = kt_o",
                 num(m), ";\n");
  }
  s += strided ? cat("  {\n", store, "  }\n")
               : cat("  if (kt_full) {\n", store, "  } else {\n", each, "  }\n");
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

std::uint32_t vector_lanes(const lowered& l) {
  const scalar_type out_t = l.g[l.g.roots.at(0)].dtype;
  bool half = is_reduced_float(out_t);
  for (const ir::input& in : l.g.inputs) half |= is_reduced_float(in.type);
  const bool strided = decomposes(l.g);
  if (!half && !(strided && word_type(out_t))) return 1;
  std::uint32_t lanes = max_vector_lanes;
  if (strided)
    while (lanes > 1 && l.shape.back() % lanes) lanes /= 2;
  for (std::size_t k = 0; k < l.g.inputs.size(); ++k)
    if (is_reduced_float(l.g.inputs[k].type) && unit_inner(l.g.inputs[k].l))
      while (lanes > 1 && !words_aligned(l, k, lanes)) lanes /= 2;
  return lanes;
}

std::uint64_t kernel_key(const lowered& l, std::uint32_t items, std::uint32_t lanes) {
  ir::hasher h;
  h.add("tensor elementwise v3").add(l.shape.size()).add(std::uint64_t{items});
  h.add(std::uint64_t{lanes}).add_nodes(l.g);
  for (bool w : word_inputs(l, lanes)) h.add(std::uint64_t{w});
  return h.value();
}

std::string render_kernel(const lowered& l, std::uint32_t items, std::uint32_t lanes) {
  if (lanes > 1) return render_lanes(l, items, lanes);
  const ir::graph& g = l.g;
  const ir::node_id root = g.roots.at(0);
  const std::size_t rank = l.shape.size();
  const bool decompose = decomposes(g);

  std::string s = signature(g) + shape_params(l);
  if (items > 1) s += ", uint64_t kt_total";
  s += ") {\n";
  if (items > 1)  // element kq_i + k * (items launched) for k < items: coalesced, loads overlap
    s += cat("#pragma unroll\n  for (uint32_t kt_k = 0; kt_k < ", num(items), "u; ++kt_k) {\n",
             "  const uint64_t kq_i = kiln_global_id(0) + kt_k * kiln_global_size(0);\n",
             "  if (kq_i >= kt_total) break;\n");
  else
    s += "  const uint64_t kq_i = kiln_global_id(0);\n";
  if (decompose && rank) s += coordinates(rank, "kq_i");
  for (std::size_t k = 0; k < g.inputs.size(); ++k) {
    const ir::layout& L = g.inputs[k].l;
    const std::string at = ir::is_flat(L) ? std::string("kq_i") : strided_offset(L, k, rank);
    s += cat("  const ", codegen::value_type(g.inputs[k].type), " ",
             codegen::load_name(static_cast<int>(k)), " = ",
             codegen::load_value(g.inputs[k].type, cat("kt_in", num(k), "[", at, "]")), ";\n");
  }
  s += statements(g, "  ");
  s += cat("  kt_out[kq_i] = ", codegen::store_value(g[root].dtype, node_name(g, root)), ";\n");
  return s += items > 1 ? "  }\n}\n" : "}\n";
}

}  // namespace kiln::detail
