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
#include "tensor/kernel_args.hpp"

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

// topk by radix select, one work-group of KT_B items per row (devices with barriers). Each
// entry maps to an unsigned key of its width whose order is the ranking (larger first; NaN
// largest, -0 == +0; smallest-first inverts it). Passes over 8-bit digits from the top count
// the entries that match the digits found so far in a local histogram, then take the digit
// where the k-th best falls: the key of the k-th best, `kth`, and `rem`, how many entries equal
// to it are wanted. A last pass gathers the entries above kth (local atomic slots, any order)
// and the first rem equal to it in index order (a work-group scan per tile of KT_B), then each
// selected entry's rank among the k gives its output position.
constexpr const char* topk_group_text = R"(
#define KT_B 256
KILN_FUNC uint64_t kt_key(uint64_t b) {
  const uint64_t top = (uint64_t)1 << (KT_W - 1);
  const uint64_t all = KT_W == 64 ? ~(uint64_t)0 : (((uint64_t)1 << (KT_W & 63)) - 1);
  uint64_t u = b;
  if (KT_KIND == 2) {
    const uint64_t mag = b & (top - 1);
    u = mag > (uint64_t)KT_INF ? all : mag == 0 ? top : (b & top) ? (~b & all) : (b | top);
  } else if (KT_KIND == 1) {
    u = b ^ top;
  }
  return KT_LARGEST ? u : (~u & all);
}

KILN_KERNEL void kt_topk_group(KILN_GLOBAL const KT_X* KILN_RESTRICT x,
                               KILN_GLOBAL int64_t* KILN_RESTRICT out, int64_t n, int64_t k) {
  KILN_LOCAL uint32_t h[256];
  KILN_LOCAL uint32_t sc[KT_B];
  KILN_LOCAL uint64_t sk[KT_KMAX];
  KILN_LOCAL int64_t si[KT_KMAX];
  KILN_LOCAL uint32_t sh[3];
  const uint32_t t = (uint32_t)kiln_local_id(0);
  const int64_t row = (int64_t)kiln_group_id(0);
  KILN_GLOBAL const KT_T* xr = x + row * n;
  uint64_t prefix = 0, mask = 0;
  uint32_t rem = (uint32_t)k;
  for (int shift = KT_W - 8; shift >= 0; shift -= 8) {
    h[t] = 0u;
    kiln_barrier();
    for (int64_t j = t; j < n; j += KT_B) {
      const uint64_t key = kt_key((uint64_t)xr[j]);
      if ((key & mask) == prefix) kiln_atomic_add(&h[(uint32_t)((key >> shift) & 255u)], 1u);
    }
    kiln_barrier();
    if (t == 0) {
      uint32_t acc = 0, d = 255;
      while (acc + h[d] < rem) acc += h[d--];
      sh[0] = d;
      sh[1] = rem - acc;
    }
    kiln_barrier();
    prefix |= (uint64_t)sh[0] << shift;
    mask |= (uint64_t)255 << shift;
    rem = sh[1];
    kiln_barrier();
  }
  const uint32_t above = (uint32_t)k - rem;
  if (t == 0) sh[2] = 0u;
  kiln_barrier();
  uint32_t seen = 0;
  for (int64_t base = 0; base < n; base += KT_B) {
    const int64_t j = base + t;
    const uint64_t key = j < n ? kt_key((uint64_t)xr[j]) : (uint64_t)0;
    if (j < n && key > prefix) {
      const uint32_t p = kiln_atomic_add(&sh[2], 1u);
      sk[p] = key;
      si[p] = j;
    }
    if (seen < rem) {  // the same on every item: the scan's barriers are uniform
      const uint32_t eq = j < n && key == prefix ? 1u : 0u;
      sc[t] = eq;
      kiln_barrier();
      for (uint32_t o = 1; o < KT_B; o <<= 1) {
        const uint32_t y = t >= o ? sc[t - o] : 0u;
        kiln_barrier();
        sc[t] += y;
        kiln_barrier();
      }
      const uint32_t before = seen + sc[t] - eq;
      if (eq && before < rem) {
        sk[above + before] = key;
        si[above + before] = j;
      }
      seen += sc[KT_B - 1];
      kiln_barrier();
    }
  }
  kiln_barrier();
  for (uint32_t s = t; s < (uint32_t)k; s += KT_B) {
    const uint64_t ks = sk[s];
    const int64_t is = si[s];
    uint32_t r = 0;
    for (uint32_t o = 0; o < (uint32_t)k; ++o)
      r += (sk[o] > ks || (sk[o] == ks && si[o] < is)) ? 1u : 0u;
    out[row * k + r] = is;
  }
}
)";

// The unsigned type of t's width (the kernel reads raw bits).
scalar_type bits_of(scalar_type t) {
  switch (size_of(t)) {
    case 1: return scalar_type::u8;
    case 2: return scalar_type::u16;
    case 4: return scalar_type::u32;
    default: return scalar_type::u64;
  }
}

std::string topk_group_source(scalar_type t, bool largest) {
  const bool fl = is_floating(t);
  const bool sign = t == scalar_type::i8 || t == scalar_type::i16 || t == scalar_type::i32 ||
                    t == scalar_type::i64;
  const char* inf = t == scalar_type::f32    ? "0x7f800000u"
                    : t == scalar_type::f64  ? "0x7ff0000000000000ull"
                    : t == scalar_type::f16  ? "0x7c00u"
                    : t == scalar_type::bf16 ? "0x7f80u"
                                             : "0u";
  // The kernel's parameters name concrete types (the launcher checks them): KT_X spells x's.
  std::string text = topk_group_text;
  const std::string X = type_name(bits_of(t));
  text.replace(text.find("KT_X"), 4, X);
  return cat("#define KT_T ", X, "\n#define KT_W ", std::to_string(8 * size_of(t)),
             "\n#define KT_KIND ",
             fl     ? "2"
             : sign ? "1"
                    : "0",
             "\n#define KT_INF ", inf, "\n#define KT_LARGEST ", largest ? "1" : "0",
             "\n#define KT_KMAX ", std::to_string(topk_group_max_k), "\n", text);
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
  static constexpr const char* names[] = {"kt_topk", "kt_chunk_sum", "kt_chunk_scan", "kt_draw",
                                          "kt_topk_group"};
  const char* fn = names[std::size_t(k)];
  const generated_kernels g = get_generated(dev, "tensor_sampling", h.value(), [&] {
    return generated_program{
        sampling_source(k, t, t2, first, largest), {fn}, std::string(fn) + " of " + type_name(t)};
  });
  if (g.compiled) stats_now().programs_compiled++;
  return g.kernels.at(0);
}

arg_binding mem(const tensor_impl& x, scalar_type as, bool is_const) {
  return tensor_mem(x, as, is_const);
}

void run(const kernel& k, const device& dev, std::int64_t total, std::vector<arg_binding>& a,
         const local_size* group = nullptr) {
  queue& q = dev.default_queue();
  launch(*k.impl(), *q.impl(), range(static_cast<std::uint64_t>(total)), group, a.data(), a.size());
  stats_now().kernel_launches++;
}

}  // namespace

std::string sampling_source(sampling_kernel_kind k, scalar_type t, scalar_type t2, bool first,
                            bool largest) {
  switch (k) {
    case kind::topk: return topk_source(t, first, largest);
    case kind::topk_group: return topk_group_source(t, largest);
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

void launch_topk_group(const tensor_impl& x, tensor_impl& out, std::int64_t rows, std::int64_t n,
                       std::int64_t k, bool largest) {
  if (rows == 0 || k == 0) return;
  const device& dev = out.dev;
  std::vector<arg_binding> a{mem(x, bits_of(x.dtype), true), mem(out, scalar_type::i64, false),
                             bind_arg(n), bind_arg(k)};
  const local_size group(topk_group_items);
  run(sampling_kernel(dev, kind::topk_group, x.dtype, x.dtype, false, largest), dev,
      rows * topk_group_items, a, &group);
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
