// Kernel texts and launches for topk and multinomial; see sampling_kernels.hpp. Sources are
// cached by (kind, dtype, first pass, largest) or (kind, weight dtype, sum dtype).
#include "tensor/sampling_kernels.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "kiln/kernel.hpp"
#include "runtime/generated_kernels.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;

bool is_floating(scalar_type t) {
  return t == scalar_type::f32 || t == scalar_type::f64 || is_reduced_float(t);
}

// x's storage as the kernel reads it: bool as its byte.
scalar_type stored_type(scalar_type t) { return t == scalar_type::boolean ? scalar_type::u8 : t; }

// KT_BETTER(a, ia, b, ib): candidate (a, ia) ranks before (b, ib). NaN is the largest value
// (PyTorch); equal values rank by lower index; index -1 (no candidate) ranks last.
std::string better_macro(scalar_type t, bool largest) {
  const std::string cmp = largest ? "(a) > (b)" : "(a) < (b)";
  std::string order = cat("((", cmp, ") || ((a) == (b) && (ia) < (ib)))");
  if (is_floating(t)) {
    // Both NaN: by index; one NaN: it wins when largest, loses when smallest.
    const std::string one = largest ? "((a) != (a))" : "((b) != (b))";
    order =
        cat("(((a) != (a)) || ((b) != (b)) ? ((((a) != (a)) && ((b) != (b))) ? (ia) < (ib) : ", one,
            ") : ", order, ")");
  }
  return cat("#define KT_BETTER(a, ia, b, ib) ((ib) < 0 || ((ia) >= 0 && ", order, "))\n");
}

std::string topk_source(scalar_type t, bool first, bool largest) {
  const std::string V = type_name(topk_value_type(t)), X = type_name(stored_type(t));
  const std::string in = first ? cat("KILN_GLOBAL const ", X, "* KILN_RESTRICT x")
                               : cat("KILN_GLOBAL const ", V,
                                     "* KILN_RESTRICT xv, KILN_GLOBAL const int64_t* "
                                     "KILN_RESTRICT xi");
  const std::string load =
      first ? cat("    const ", V, " v = (", V, ")", codegen::load_value(t, "x[row * m + j]"),
                  ";\n    const int64_t id = j;\n")
            : cat("    const ", V,
                  " v = xv[row * m + j];\n    const int64_t id = xi[row * m + j];\n"
                  "    if (id < 0) continue;\n");
  // Chunk c of a row holds entries [c * chunk, (c + 1) * chunk) (CPUs: an item walks memory
  // in order), or interleaved c, c + chunks, ... (GPUs: neighbouring items read neighbouring
  // entries). The order is total (value, then index), so any partition gives the same result.
  // The k-th best so far (the bar to enter) stays in registers; a newcomer's place is found by
  // binary search, then the worse ones shift down.
  return cat(
      better_macro(t, largest), "KILN_KERNEL void kt_topk(", in, ", KILN_GLOBAL ", V,
      "* KILN_RESTRICT ov, KILN_GLOBAL int64_t* KILN_RESTRICT oi, int64_t total, int64_t m, "
      "int64_t chunks, int64_t chunk, int64_t interleaved, int64_t k) {\n"
      "  const int64_t i = (int64_t)kiln_global_id(0);\n  if (i >= total) return;\n"
      "  const int64_t row = i / chunks, c = i % chunks, base = i * k;\n"
      "  const int64_t j0 = interleaved ? c : c * chunk, js = interleaved ? chunks : 1;\n"
      "  const int64_t j1 = interleaved ? m : (j0 + chunk < m ? j0 + chunk : m);\n"
      "  int64_t cnt = 0, bar_i = -1;\n  ",
      V, " bar_v = (", V, ")0;\n  for (int64_t j = j0; j < j1; j += js) {\n", load,
      "    if (!KT_BETTER(v, id, bar_v, bar_i)) continue;\n"
      "    int64_t lo = 0, hi = cnt < k ? cnt : k - 1;\n"
      "    while (lo < hi) {\n      const int64_t mid = (lo + hi) / 2;\n"
      "      if (KT_BETTER(v, id, ov[base + mid], oi[base + mid])) hi = mid; else lo = mid + 1;\n"
      "    }\n"
      "    for (int64_t p = cnt < k ? cnt++ : k - 1; p > lo; --p) {\n"
      "      ov[base + p] = ov[base + p - 1];\n      oi[base + p] = oi[base + p - 1];\n    }\n"
      "    ov[base + lo] = v;\n    oi[base + lo] = id;\n"
      "    if (cnt == k) {\n      bar_v = ov[base + k - 1];\n      bar_i = oi[base + k - 1];\n"
      "    }\n  }\n"
      "  for (int64_t p = cnt; p < k; ++p) {\n    ov[base + p] = (",
      V, ")0;\n    oi[base + p] = -1;\n  }\n}\n");
}

// Multinomial with replacement over rows of n weights cut into chunks of B: chunk sums (one
// item per chunk), their running sums (one item per row, in place), then per sample a binary
// search over the chunks and a walk inside one. Every sum runs in a fixed order, so the bits
// (and the samples) are the same on every backend. C_ is the sum type, W_ the weights' (their
// loads spelled by LOADW).
constexpr const char* chunk_sum_text = R"(
KILN_KERNEL void kt_chunk_sum(KILN_GLOBAL C_* KILN_RESTRICT sums, KILN_GLOBAL const W_* KILN_RESTRICT w,
                              int64_t total, int64_t n, int64_t chunks, int64_t B) {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t r = i / chunks, lo = (i % chunks) * B, hi = lo + B < n ? lo + B : n;
  C_ acc = (C_)0;
  for (int64_t j = lo; j < hi; ++j) acc += (C_)LOADW(w[r * n + j]);
  sums[i] = acc;
}
)";

constexpr const char* chunk_scan_text = R"(
KILN_KERNEL void kt_chunk_scan(KILN_GLOBAL C_* KILN_RESTRICT sums, int64_t rows, int64_t chunks) {
  const int64_t r = (int64_t)kiln_global_id(0);
  if (r >= rows) return;
  C_ acc = (C_)0;
  for (int64_t c = 0; c < chunks; ++c) {
    acc += sums[r * chunks + c];
    sums[r * chunks + c] = acc;
  }
}
)";

// The first chunk whose running sum exceeds target = u * total, then the first entry there
// whose running sum does (it has a positive weight). u < 1, but u * total can round to
// total: then the first chunk reaching total and its last positive weight.
constexpr const char* draw_text = R"(
KILN_KERNEL void kt_draw(KILN_GLOBAL int64_t* KILN_RESTRICT out, KILN_GLOBAL const W_* KILN_RESTRICT w,
                         KILN_GLOBAL const C_* KILN_RESTRICT sums, KILN_GLOBAL const C_* KILN_RESTRICT u,
                         int64_t total, int64_t n, int64_t chunks, int64_t B, int64_t s) {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t r = i / s;
  KILN_GLOBAL const C_* p = sums + r * chunks;
  const C_ sum = p[chunks - 1], target = u[i] * sum;
  const int over = target >= sum;
  int64_t lo = 0, hi = chunks - 1;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (over ? p[mid] >= sum : p[mid] > target) hi = mid; else lo = mid + 1;
  }
  const int64_t j0 = lo * B, j1 = j0 + B < n ? j0 + B : n;
  C_ acc = lo > 0 ? p[lo - 1] : (C_)0;
  int64_t last = j0;
  for (int64_t j = j0; j < j1; ++j) {
    const C_ v = (C_)LOADW(w[r * n + j]);
    if (v > (C_)0) last = j;
    acc += v;
    if (!over && acc > target) {
      out[i] = j;
      return;
    }
  }
  out[i] = last;
}
)";

// text with C_ the sum type and W_ / LOADW the weights' storage type and load.
std::string multinomial_source(const char* text, scalar_type w, scalar_type c) {
  std::string s = text;
  for (const auto& [from, to] : {std::pair{"C_", type_name(c)}, std::pair{"W_", type_name(w)}})
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at))
      s.replace(at, 2, to);
  return cat("#define LOADW(e) ", codegen::load_value(w, "(e)"), "\n", s);
}

using kind = sampling_kernel_kind;

kernel sampling_kernel(const device& dev, kind k, scalar_type t, scalar_type t2, bool first,
                       bool largest) {
  ir::hasher h;
  h.add("tensor sampling v4").add(std::uint64_t(k)).add(std::uint64_t(t)).add(std::uint64_t(t2));
  h.add(std::uint64_t(first)).add(std::uint64_t(largest));
  static constexpr const char* names[] = {"kt_topk", "kt_chunk_sum", "kt_chunk_scan", "kt_draw"};
  const char* fn = names[std::size_t(k)];
  const generated_kernels g = get_generated(dev, "tensor_sampling", h.value(), [&] {
    return generated_program{
        sampling_source(k, t, t2, first, largest), {fn}, std::string(fn) + " of " + type_name(t)};
  });
  if (g.compiled) stats_now().programs_compiled++;
  return g.kernels.at(0);
}

arg_binding mem(const tensor_impl& x, scalar_type as, bool is_const) {
  arg_binding b;
  b.is_mem = true;
  b.mem = x.mem.get();
  b.byte_offset = static_cast<std::uint64_t>(x.offset) * size_of(x.dtype);
  b.type = as;
  b.is_const = is_const;
  return b;
}

void run(const kernel& k, const device& dev, std::int64_t total, std::vector<arg_binding>& a) {
  queue& q = dev.default_queue();
  launch(*k.impl(), *q.impl(), range(static_cast<std::uint64_t>(total)), nullptr, a.data(),
         a.size());
  stats_now().kernel_launches++;
}

}  // namespace

std::string sampling_source(sampling_kernel_kind k, scalar_type t, scalar_type t2, bool first,
                            bool largest) {
  switch (k) {
    case kind::topk: return topk_source(t, first, largest);
    case kind::chunk_sum: return multinomial_source(chunk_sum_text, t, t2);
    case kind::chunk_scan: return multinomial_source(chunk_scan_text, t, t2);
    case kind::draw: return multinomial_source(draw_text, t, t2);
  }
  return "";
}

scalar_type topk_value_type(scalar_type t) {
  if (is_reduced_float(t)) return scalar_type::f32;
  return stored_type(t);
}

void launch_topk_pass(const tensor_impl* x, const tensor_impl* in_v, const tensor_impl* in_i,
                      tensor_impl& out_v, tensor_impl& out_i, scalar_type t, std::int64_t rows,
                      std::int64_t m, std::int64_t chunks, std::int64_t chunk, bool interleaved,
                      std::int64_t k, bool largest) {
  const std::int64_t total = rows * chunks;
  if (total == 0 || k == 0) return;
  const scalar_type v = topk_value_type(t);
  std::vector<arg_binding> a;
  if (x) {
    a.push_back(mem(*x, stored_type(t), true));
  } else {
    a.push_back(mem(*in_v, v, true));
    a.push_back(mem(*in_i, scalar_type::i64, true));
  }
  a.push_back(mem(out_v, v, false));
  a.push_back(mem(out_i, scalar_type::i64, false));
  for (std::int64_t n : {total, m, chunks, chunk, std::int64_t{interleaved}, k})
    a.push_back(bind_arg(n));
  const device& dev = out_v.dev;
  run(sampling_kernel(dev, kind::topk, t, t, x != nullptr, largest), dev, total, a);
}

void launch_draws(tensor_impl& out, const tensor_impl& w, const tensor_impl& u, std::int64_t rows,
                  std::int64_t n, std::int64_t s) {
  const std::int64_t total = rows * s;
  if (total == 0) return;
  const device& dev = out.dev;
  const scalar_type c = u.dtype;
  const std::int64_t B = multinomial_chunk, chunks = (n + B - 1) / B;
  auto sums = allocate_tensor(dev, {rows, chunks}, c);
  std::vector<arg_binding> a{mem(*sums, c, false), mem(w, w.dtype, true), bind_arg(rows * chunks),
                             bind_arg(n),          bind_arg(chunks),      bind_arg(B)};
  run(sampling_kernel(dev, kind::chunk_sum, w.dtype, c, false, false), dev, rows * chunks, a);
  a = {mem(*sums, c, false), bind_arg(rows), bind_arg(chunks)};
  run(sampling_kernel(dev, kind::chunk_scan, w.dtype, c, false, false), dev, rows, a);
  a = {mem(out, scalar_type::i64, false),
       mem(w, w.dtype, true),
       mem(*sums, c, true),
       mem(u, c, true),
       bind_arg(total),
       bind_arg(n),
       bind_arg(chunks),
       bind_arg(B),
       bind_arg(s)};
  run(sampling_kernel(dev, kind::draw, w.dtype, c, false, false), dev, total, a);
}

}  // namespace kiln::detail
