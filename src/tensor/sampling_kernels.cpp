// Kernel texts and launches for topk and multinomial; see sampling_kernels.hpp. Sources are
// cached by (kind, dtype, first pass, largest) or (kind, weight dtype, cdf dtype).
#include "tensor/sampling_kernels.hpp"

#include <algorithm>
#include <string>
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

std::string cdf_source(scalar_type w, scalar_type c) {
  const std::string W = type_name(w), C = type_name(c);
  return cat("KILN_KERNEL void kt_cdf(KILN_GLOBAL ", C, "* KILN_RESTRICT cdf, KILN_GLOBAL const ",
             W,
             "* KILN_RESTRICT w, int64_t rows, int64_t n) {\n"
             "  const int64_t r = (int64_t)kiln_global_id(0);\n  if (r >= rows) return;\n  ",
             C, " acc = (", C, ")0;\n  for (int64_t j = 0; j < n; ++j) {\n    acc += (", C, ")",
             codegen::load_value(w, "w[r * n + j]"), ";\n    cdf[r * n + j] = acc;\n  }\n}\n");
}

// Binary search for the first j with cdf[j] > target; with u < 1, u * total can still round
// to total, then the first j reaching total (the last positive category) is taken.
std::string draw_source(scalar_type c) {
  const std::string C = type_name(c);
  return cat("KILN_KERNEL void kt_draw(KILN_GLOBAL int64_t* KILN_RESTRICT out, KILN_GLOBAL const ",
             C, "* KILN_RESTRICT cdf, KILN_GLOBAL const ", C,
             "* KILN_RESTRICT u, int64_t total, int64_t n, int64_t s) {\n"
             "  const int64_t i = (int64_t)kiln_global_id(0);\n  if (i >= total) return;\n"
             "  KILN_GLOBAL const ",
             C, "* c = cdf + (i / s) * n;\n  const ", C, " sum = c[n - 1];\n  ", C,
             " target = u[i] * sum;\n  if (target >= sum) {\n    int64_t lo = 0, hi = n - 1;\n"
             "    while (lo < hi) {\n      const int64_t mid = lo + (hi - lo) / 2;\n"
             "      if (c[mid] >= sum) hi = mid; else lo = mid + 1;\n    }\n"
             "    out[i] = lo;\n    return;\n  }\n"
             "  int64_t lo = 0, hi = n - 1;\n  while (lo < hi) {\n"
             "    const int64_t mid = lo + (hi - lo) / 2;\n"
             "    if (c[mid] > target) hi = mid; else lo = mid + 1;\n  }\n  out[i] = lo;\n}\n");
}

enum class kind : std::uint8_t { topk, cdf, draw };

kernel sampling_kernel(const device& dev, kind k, scalar_type t, scalar_type t2, bool first,
                       bool largest) {
  ir::hasher h;
  h.add("tensor sampling v3").add(std::uint64_t(k)).add(std::uint64_t(t)).add(std::uint64_t(t2));
  h.add(std::uint64_t(first)).add(std::uint64_t(largest));
  const char* fn = k == kind::topk ? "kt_topk" : k == kind::cdf ? "kt_cdf" : "kt_draw";
  const generated_kernels g = get_generated(dev, "tensor_sampling", h.value(), [&] {
    std::string src = k == kind::topk  ? topk_source(t, first, largest)
                      : k == kind::cdf ? cdf_source(t, t2)
                                       : draw_source(t);
    return generated_program{std::move(src), {fn}, std::string(fn) + " of " + type_name(t)};
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

void launch_cdf(tensor_impl& cdf, const tensor_impl& w, std::int64_t rows, std::int64_t n) {
  if (rows * n == 0) return;
  std::vector<arg_binding> a{mem(cdf, cdf.dtype, false), mem(w, w.dtype, true), bind_arg(rows),
                             bind_arg(n)};
  run(sampling_kernel(cdf.dev, kind::cdf, w.dtype, cdf.dtype, false, false), cdf.dev, rows, a);
}

void launch_draw(tensor_impl& out, const tensor_impl& cdf, const tensor_impl& u, std::int64_t rows,
                 std::int64_t n, std::int64_t s) {
  const std::int64_t total = rows * s;
  if (total == 0) return;
  std::vector<arg_binding> a{mem(out, scalar_type::i64, false),
                             mem(cdf, cdf.dtype, true),
                             mem(u, u.dtype, true),
                             bind_arg(total),
                             bind_arg(n),
                             bind_arg(s)};
  run(sampling_kernel(out.dev, kind::draw, cdf.dtype, cdf.dtype, false, false), out.dev, total, a);
}

}  // namespace kiln::detail
