// Kernel texts for conv2d's im2col / col2im and for pooling; see conv_kernels.hpp. Indices
// decompose the flat item index with the fastest dimension last, like the tensors themselves.
#include "tensor/conv_kernels.hpp"

#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "kiln/queue.hpp"
#include "runtime/generated_kernels.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {
namespace {

#define KT_GEOMETRY                                                                           \
  "int64_t C, int64_t H, int64_t W, int64_t R, int64_t S, int64_t P, int64_t Q, int64_t sh, " \
  "int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t total"

// Item i = ((((n C + c) R + r) S + s) P + p) Q + q: the columns of image n are one
// (C R S) x (P Q) row-major matrix, consecutive images one after the other.
constexpr const char* im2col_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT cols,"
    " KILN_GLOBAL const T_* KILN_RESTRICT x, " KT_GEOMETRY R"() {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  int64_t t = i;
  const int64_t q = t % Q; t /= Q;
  const int64_t p = t % P; t /= P;
  const int64_t s = t % S; t /= S;
  const int64_t r = t % R; t /= R;  // t = n C + c
  const int64_t h = p * sh - ph + r * dh, w = q * sw - pw + s * dw;
  cols[i] = (h >= 0 && h < H && w >= 0 && w < W) ? x[(t * H + h) * W + w] : (T_)0;
}
)";

// Item i = (((n C + c) R + r) S + s) P + p writes the Q entries of its row: the index
// arithmetic once per row (64-bit divisions dominate the per-element form on a CPU).
constexpr const char* im2col_rows_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT cols,"
    " KILN_GLOBAL const T_* KILN_RESTRICT x, " KT_GEOMETRY R"() {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  int64_t t = i;
  const int64_t p = t % P; t /= P;
  const int64_t s = t % S; t /= S;
  const int64_t r = t % R; t /= R;  // t = n C + c
  const int64_t h = p * sh - ph + r * dh, w0 = s * dw - pw;
  KILN_GLOBAL T_* out = cols + i * Q;
  if (h < 0 || h >= H) {
    for (int64_t q = 0; q < Q; ++q) out[q] = (T_)0;
    return;
  }
  KILN_GLOBAL const T_* row = x + (t * H + h) * W;
  for (int64_t q = 0; q < Q; ++q) {
    const int64_t w = q * sw + w0;
    out[q] = (w >= 0 && w < W) ? row[w] : (T_)0;
  }
}
)";

// Item i = ((n C + c) H + h) W + w. Column entry (c, r, s, p, q) read x at (h, w) when
// h = p sh - ph + r dh, so for each r at most one p: p = (h + ph - r dh) / sh, exact.
constexpr const char* col2im_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT dx,"
    " KILN_GLOBAL const T_* KILN_RESTRICT cols, " KT_GEOMETRY R"() {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t w = i % W, h = (i / W) % H, nc = i / (W * H);
  T_ acc = (T_)0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t hp = h + ph - r * dh;
    if (hp < 0 || hp % sh != 0 || hp / sh >= P) continue;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t wq = w + pw - s * dw;
      if (wq < 0 || wq % sw != 0 || wq / sw >= Q) continue;
      acc += cols[((nc * R + r) * S + s) * P * Q + (hp / sh) * Q + wq / sw];
    }
  }
  dx[i] = acc;
}
)";

// Item i = ((n C + c) P + p) Q + q. The first maximum in row-major order wins; a NaN wins
// over everything after it (PyTorch's rule). A window with no element inside the input
// (possible only with dilation) gives `lowest` (-inf) and index -1.
constexpr const char* max_pool_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT y,"
    " KILN_GLOBAL int64_t* KILN_RESTRICT idx, KILN_GLOBAL const T_* KILN_RESTRICT x, " KT_GEOMETRY
    ", T_ lowest"
    R"() {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t q = i % Q, p = (i / Q) % P, nc = i / (Q * P);
  const int64_t h0 = p * sh - ph, w0 = q * sw - pw;
  KILN_GLOBAL const T_* plane = x + nc * H * W;
  T_ best = lowest;
  int64_t at = -1;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t h = h0 + r * dh;
    if (h < 0 || h >= H) continue;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t w = w0 + s * dw;
      if (w < 0 || w >= W) continue;
      const T_ v = plane[h * W + w];
      if (at < 0 || v > best || v != v) {
        best = v;
        at = h * W + w;
      }
    }
  }
  y[i] = best;
  idx[i] = at;
}
)";

// Item i = ((n C + c) H + h) W + w: the windows holding (h, w) are one per (r, s) at most.
constexpr const char* max_unpool_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT dx,"
    " KILN_GLOBAL const T_* KILN_RESTRICT dy, KILN_GLOBAL const int64_t* KILN_RESTRICT "
    "idx, " KT_GEOMETRY R"() {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t w = i % W, h = (i / W) % H, nc = i / (W * H);
  const int64_t self = h * W + w, base = nc * P * Q;
  T_ acc = (T_)0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t hp = h + ph - r * dh;
    if (hp < 0 || hp % sh != 0 || hp / sh >= P) continue;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t wq = w + pw - s * dw;
      if (wq < 0 || wq % sw != 0 || wq / sw >= Q) continue;
      const int64_t o = base + (hp / sh) * Q + wq / sw;
      if (idx[o] == self) acc += dy[o];
    }
  }
  dx[i] = acc;
}
)";

// The divisor of window (p, q), PyTorch's: the window clipped to the padded input
// (count_include_pad), or to the input itself.
#define KT_AVG_DIVISOR                                                                       \
  "  const int64_t hs = p * sh - ph, ws = q * sw - pw;\n"                                    \
  "  const int64_t he = hs + R < H + ph ? hs + R : H + ph, we = ws + S < W + pw ? ws + S : " \
  "W + pw;\n"                                                                                \
  "  const int64_t hs0 = hs > 0 ? hs : 0, ws0 = ws > 0 ? ws : 0;\n"                          \
  "  const int64_t he0 = he < H ? he : H, we0 = we < W ? we : W;\n"                          \
  "  const int64_t area = include_pad ? (he - hs) * (we - ws) : (he0 - hs0) * (we0 - ws0);\n"

constexpr const char* avg_pool_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT y,"
    " KILN_GLOBAL const T_* KILN_RESTRICT x, " KT_GEOMETRY R"(, int64_t include_pad) {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t q = i % Q, p = (i / Q) % P, nc = i / (Q * P);
)" KT_AVG_DIVISOR R"(
  KILN_GLOBAL const T_* plane = x + nc * H * W;
  T_ acc = (T_)0;
  for (int64_t h = hs0; h < he0; ++h)
    for (int64_t w = ws0; w < we0; ++w) acc += plane[h * W + w];
  y[i] = area > 0 ? acc / (T_)area : (T_)0;
}
)";

constexpr const char* avg_unpool_text =
    "KILN_KERNEL void kt_conv(KILN_GLOBAL T_* KILN_RESTRICT dx,"
    " KILN_GLOBAL const T_* KILN_RESTRICT dy, " KT_GEOMETRY R"(, int64_t include_pad) {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  const int64_t w = i % W, h = (i / W) % H, nc = i / (W * H);
  T_ acc = (T_)0;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t hp = h + ph - r;
    if (hp < 0 || hp % sh != 0 || hp / sh >= P) continue;
    const int64_t p = hp / sh;
    for (int64_t s = 0; s < S; ++s) {
      const int64_t wq = w + pw - s;
      if (wq < 0 || wq % sw != 0 || wq / sw >= Q) continue;
      const int64_t q = wq / sw;
)" KT_AVG_DIVISOR R"(
      if (area > 0) acc += dy[(nc * P + p) * Q + q] / (T_)area;
    }
  }
  dx[i] = acc;
}
)";

#undef KT_GEOMETRY
#undef KT_AVG_DIVISOR

const char* text_of(conv_kernel_kind k) {
  switch (k) {
    case conv_kernel_kind::im2col: return im2col_text;
    case conv_kernel_kind::im2col_rows: return im2col_rows_text;
    case conv_kernel_kind::col2im: return col2im_text;
    case conv_kernel_kind::max_pool: return max_pool_text;
    case conv_kernel_kind::max_unpool: return max_unpool_text;
    case conv_kernel_kind::avg_pool: return avg_pool_text;
    case conv_kernel_kind::avg_unpool: return avg_unpool_text;
  }
  return "";
}

const char* name_of(conv_kernel_kind k) {
  switch (k) {
    case conv_kernel_kind::im2col: return "im2col";
    case conv_kernel_kind::im2col_rows: return "im2col by rows";
    case conv_kernel_kind::col2im: return "col2im";
    case conv_kernel_kind::max_pool: return "max pooling";
    case conv_kernel_kind::max_unpool: return "max pooling backward";
    case conv_kernel_kind::avg_pool: return "average pooling";
    case conv_kernel_kind::avg_unpool: return "average pooling backward";
  }
  return "";
}

}  // namespace

std::string conv_source(scalar_type t, conv_kernel_kind k) {
  return codegen::with_element_type(text_of(k), type_name(t));
}

kernel conv_kernel(const device& dev, scalar_type t, conv_kernel_kind k) {
  ir::hasher h;
  h.add("tensor conv v1").add(static_cast<std::uint64_t>(t)).add(std::uint64_t(k));
  const generated_kernels g = get_generated(dev, "tensor_conv", h.value(), [&] {
    return generated_program{
        conv_source(t, k), {"kt_conv"}, std::string(name_of(k)) + " of " + type_name(t)};
  });
  if (g.compiled) stats_now().programs_compiled++;
  return g.kernels.at(0);
}

std::string pair_text(const std::array<std::int64_t, 2>& v) {
  return codegen::cat("{", std::to_string(v[0]), ", ", std::to_string(v[1]), "}");
}

arg_binding tensor_arg(const tensor_impl& x, std::int64_t skip, bool is_const) {
  arg_binding b;
  b.is_mem = true;
  b.mem = x.mem.get();
  b.byte_offset = static_cast<std::uint64_t>(x.offset + skip) * size_of(x.dtype);
  b.type = x.dtype;
  b.is_const = is_const;
  return b;
}

void launch_conv(const device& dev, scalar_type t, conv_kernel_kind k,
                 std::vector<arg_binding> args, const conv_geometry& g, std::int64_t total,
                 const std::vector<arg_binding>& extra) {
  if (total <= 0) return;
  const kernel kn = conv_kernel(dev, t, k);
  for (std::int64_t v :
       {g.c, g.h, g.w, g.r, g.s, g.p, g.q, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, total})
    args.push_back(bind_arg(v));
  args.insert(args.end(), extra.begin(), extra.end());
  queue& q = dev.default_queue();
  launch(*kn.impl(), *q.impl(), range(static_cast<std::uint64_t>(total)), nullptr, args.data(),
         args.size());
  stats_now().kernel_launches++;
}

}  // namespace kiln::detail
