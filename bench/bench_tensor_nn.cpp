// bench_tensor's gemm, conv, pool and cpu groups (bench_tensor.cpp has the command line): the
// tensor API a training step calls, each result allocated inside the timing as in PyTorch, on
// uniform [0, 1) inputs (torch.rand in bench/torch_tensor.py). After the timed runs a few
// elements of the last result are checked against a float64 reference computed on the host;
// a row that is off says WRONG in its note.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <kiln/tensor.hpp>
#include <kiln/tensor/conv.hpp>
#include <string>
#include <vector>

#include "bench_tensor.hpp"

namespace kiln_bench_tensor {

namespace {

using i64 = std::int64_t;

std::vector<float> host(const kiln::tensor& t) { return t.contiguous().to_vector<float>(); }

// Worst |got - want| / max(|want|, 1) over the checked elements, as a note.
struct checker {
  double worst = 0;
  void add(double got, double want) {
    worst = std::max(worst, std::abs(got - want) / std::max(std::abs(want), 1.0));
  }
  std::string note(double tol) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s (rel err %.1e)", worst <= tol ? "ok" : "WRONG", worst);
    return buf;
  }
};

std::string precision(bool tf32) { return tf32 ? "tf32" : "f32"; }

// ---- matrix products ----

void gemm_case(const kiln::device& dev, const options& o, const std::string& group, i64 s,
               i64 batch, bool tf32) {
  const std::string name = (batch > 1 ? "bmm " + std::to_string(batch) + " x " : "sgemm ") +
                           std::to_string(s) + "^3 " + precision(tf32);
  if (!o.wants_case(name)) return;
  const kiln::shape_t shape = batch > 1 ? kiln::shape_t{batch, s, s} : kiln::shape_t{s, s};
  const kiln::tensor a = uniform(dev, shape, 11), b = uniform(dev, shape, 12);
  kiln::tensor c;
  const double ms =
      median_ms(dev.default_queue(), o, [&] { c = kiln::matmul(a, b, {.tf32 = tf32}); });
  const std::string path = kiln::linalg::to_string(kiln::linalg::last_path());
  checker chk;
  for (const auto [bi, i, j] :
       {std::array<i64, 3>{0, 0, 0}, {batch - 1, s - 1, s - 1}, {batch / 2, s / 3, s / 2 + 1}}) {
    const kiln::tensor A = batch > 1 ? a.slice(0, bi, bi + 1).squeeze(0) : a;
    const kiln::tensor B = batch > 1 ? b.slice(0, bi, bi + 1).squeeze(0) : b;
    const kiln::tensor C = batch > 1 ? c.slice(0, bi, bi + 1).squeeze(0) : c;
    const std::vector<float> row = host(A.slice(0, i, i + 1)), col = host(B.slice(1, j, j + 1));
    double want = 0;
    for (i64 k = 0; k < s; ++k) want += double(row[size_t(k)]) * col[size_t(k)];
    chk.add(C.slice(0, i, i + 1).slice(1, j, j + 1).item<float>(), want);
  }
  add_result({group, name, "TFLOP/s", path + ", " + chk.note(tf32 ? 2e-3 : 1e-4), ms,
              2.0 * double(s) * double(s) * double(s) * double(batch) / ms * 1e-9});
}

void gemv_case(const kiln::device& dev, const options& o, const std::string& group, i64 s) {
  const std::string name = "sgemv " + std::to_string(s) + "^2";
  if (!o.wants_case(name)) return;
  const kiln::tensor a = uniform(dev, {s, s}, 13), x = uniform(dev, {s}, 14);
  kiln::tensor y;
  const double ms = median_ms(dev.default_queue(), o,
                              [&] { y = kiln::gemv(a, x, kiln::tensor::empty(dev, {s})); });
  const std::string path = kiln::linalg::to_string(kiln::linalg::last_path());
  const std::vector<float> xv = host(x);
  checker chk;
  for (i64 i : {i64(0), s / 2, s - 1}) {
    const std::vector<float> row = host(a.slice(0, i, i + 1));
    double want = 0;
    for (i64 k = 0; k < s; ++k) want += double(row[size_t(k)]) * xv[size_t(k)];
    chk.add(y.slice(0, i, i + 1).item<float>(), want);
  }
  add_result({group, name, "GB/s", path + ", " + chk.note(1e-4), ms,
              4.0 * (double(s) * double(s) + 2.0 * double(s)) / ms * 1e-6});
}

// ---- convolutions ----

struct conv_shape {
  i64 n, c, k, hw, r, stride, pad;
  i64 out() const { return (hw + 2 * pad - r) / stride + 1; }
};

enum class pass { fwd, bwd_data, bwd_filter };
const char* pass_name(pass p) {
  return p == pass::fwd ? "fwd" : p == pass::bwd_data ? "bwd-data" : "bwd-filter";
}

// The conv rows' arithmetic: f32, TF32, and bf16 tensors (f32 compute on tensor cores).
enum class conv_math { f32, tf32, bf16 };
const char* math_name(conv_math m) {
  return m == conv_math::f32 ? "f32" : m == conv_math::tf32 ? "tf32" : "bf16";
}

// "conv 7x7 s2 p3 3->64 224^2 N32 fwd f32" (bench/torch_tensor.py spells it the same way).
std::string conv_name(const conv_shape& c, pass p, conv_math m) {
  return "conv " + std::to_string(c.r) + "x" + std::to_string(c.r) + " s" +
         std::to_string(c.stride) + " p" + std::to_string(c.pad) + " " + std::to_string(c.c) +
         "->" + std::to_string(c.k) + " " + std::to_string(c.hw) + "^2 N" + std::to_string(c.n) +
         " " + pass_name(p) + " " + math_name(m);
}

// Checks two elements of the pass's result (a corner, where padding matters, and an inner one).
std::string conv_check(const conv_shape& sh, pass p, const kiln::tensor& x, const kiln::tensor& w,
                       const kiln::tensor& dy, const kiln::tensor& out, double tolerance) {
  const i64 C = sh.c, K = sh.k, H = sh.hw, R = sh.r, P = sh.out(), st = sh.stride, pad = sh.pad;
  checker chk;
  if (p == pass::fwd) {
    for (const auto [n, k, py, px] :
         {std::array<i64, 4>{0, 0, 0, 0}, {sh.n - 1, K / 2, P / 2, 1}}) {
      const std::vector<float> xv = host(x.slice(0, n, n + 1)), wv = host(w.slice(0, k, k + 1));
      double want = 0;
      for (i64 c = 0; c < C; ++c)
        for (i64 r = 0; r < R; ++r)
          for (i64 s = 0; s < R; ++s) {
            const i64 h = py * st - pad + r, v = px * st - pad + s;
            if (h < 0 || h >= H || v < 0 || v >= H) continue;
            want += double(xv[size_t((c * H + h) * H + v)]) * wv[size_t((c * R + r) * R + s)];
          }
      chk.add(out.slice(0, n, n + 1)
                  .slice(1, k, k + 1)
                  .slice(2, py, py + 1)
                  .slice(3, px, px + 1)
                  .item<float>(),
              want);
    }
  } else if (p == pass::bwd_data) {
    for (const auto [n, c, h, v] : {std::array<i64, 4>{0, 0, 0, 0}, {sh.n - 1, C / 2, H / 2, 3}}) {
      const std::vector<float> dyv = host(dy.slice(0, n, n + 1)), wv = host(w.slice(1, c, c + 1));
      double want = 0;
      for (i64 k = 0; k < K; ++k)
        for (i64 r = 0; r < R; ++r)
          for (i64 s = 0; s < R; ++s) {
            const i64 hy = h + pad - r, vx = v + pad - s;
            if (hy < 0 || vx < 0 || hy % st || vx % st || hy / st >= P || vx / st >= P) continue;
            want += double(dyv[size_t((k * P + hy / st) * P + vx / st)]) *
                    wv[size_t((k * R + r) * R + s)];
          }
      chk.add(out.slice(0, n, n + 1)
                  .slice(1, c, c + 1)
                  .slice(2, h, h + 1)
                  .slice(3, v, v + 1)
                  .item<float>(),
              want);
    }
  } else {
    for (const auto [k, c, r, s] : {std::array<i64, 4>{0, 0, 0, 0}, {K - 1, C / 2, R / 2, R - 1}}) {
      const std::vector<float> dyv = host(dy.slice(1, k, k + 1)), xv = host(x.slice(1, c, c + 1));
      double want = 0;
      for (i64 n = 0; n < sh.n; ++n)
        for (i64 py = 0; py < P; ++py)
          for (i64 px = 0; px < P; ++px) {
            const i64 h = py * st - pad + r, v = px * st - pad + s;
            if (h < 0 || h >= H || v < 0 || v >= H) continue;
            want += double(dyv[size_t((n * P + py) * P + px)]) * xv[size_t((n * H + h) * H + v)];
          }
      chk.add(out.slice(0, k, k + 1)
                  .slice(1, c, c + 1)
                  .slice(2, r, r + 1)
                  .slice(3, s, s + 1)
                  .item<float>(),
              want);
    }
  }
  return chk.note(tolerance);  // cuDNN may pick Winograd or FFT algorithms: not 1 ulp
}

// For each pass, f32, TF32 and bf16 (f32 only on a device without tensor cores, i.e.
// with_tensor_cores false).
void conv_cases(const kiln::device& dev, const options& o, const std::string& group,
                const conv_shape& sh, bool with_tensor_cores) {
  const i64 P = sh.out();
  kiln::tensor x, w, dy, xh, wh, dyh;  // f32 operands; their bf16 roundings
  for (pass p : {pass::fwd, pass::bwd_data, pass::bwd_filter})
    for (conv_math m : {conv_math::f32, conv_math::tf32, conv_math::bf16}) {
      if (m != conv_math::f32 && !with_tensor_cores) continue;
      const std::string name = conv_name(sh, p, m);
      if (!o.wants_case(name)) continue;
      if (!x.defined()) {
        x = uniform(dev, {sh.n, sh.c, sh.hw, sh.hw}, 21);
        w = uniform(dev, {sh.k, sh.c, sh.r, sh.r}, 22);
        dy = uniform(dev, {sh.n, sh.k, P, P}, 23);
      }
      const bool bf16 = m == conv_math::bf16;
      if (bf16 && !xh.defined()) {
        const auto t = kiln::scalar_type::bf16;
        xh = x.to(t).eval(), wh = w.to(t).eval(), dyh = dy.to(t).eval();
      }
      const kiln::tensor &a = bf16 ? xh : x, &b = bf16 ? wh : w, &g = bf16 ? dyh : dy;
      const kiln::conv2d_options co{.stride = {sh.stride, sh.stride},
                                    .padding = {sh.pad, sh.pad},
                                    .tf32 = m == conv_math::tf32};
      kiln::tensor out;
      const double ms = median_ms(dev.default_queue(), o, [&] {
        if (p == pass::fwd)
          out = kiln::conv2d(a, b, {}, co).eval();
        else if (p == pass::bwd_data)
          out = kiln::conv2d_backward_data(g, b, a.shape(), co).eval();
        else
          out = kiln::conv2d_backward_filter(a, g, b.shape(), co).eval();
      });
      const double flops = 2.0 * double(sh.n) * double(sh.k) * double(sh.c) * double(sh.r) *
                           double(sh.r) * double(P) * double(P);
      const auto f32 = [](const kiln::tensor& t) { return t.to(kiln::scalar_type::f32); };
      // bf16: the reference from the rounded operands; the result is checked to bf16's 2^-8.
      const std::string check =
          bf16 ? conv_check(sh, p, f32(a), f32(b), f32(g), f32(out), 2e-2)
               : conv_check(sh, p, a, b, g, out, m == conv_math::tf32 ? 5e-3 : 1e-3);
      add_result({group, name, "TFLOP/s", check, ms, flops / ms * 1e-9});
    }
}

// ---- pooling ----

void pool_case(const kiln::device& dev, const options& o, const kiln::shape_t& shape,
               bool indices) {
  const std::string name = std::string(indices ? "max_pool2d_with_indices" : "max_pool2d") +
                           " 3x3 s2 p1 [" + std::to_string(shape[0]) + ", " +
                           std::to_string(shape[1]) + ", " + std::to_string(shape[2]) + ", " +
                           std::to_string(shape[3]) + "]";
  if (!o.wants_case(name)) return;
  const i64 N = shape[0], C = shape[1], H = shape[2], W = shape[3];
  const i64 P = (H + 2 - 3) / 2 + 1, Q = (W + 2 - 3) / 2 + 1;
  const kiln::tensor x = uniform(dev, shape, 31);
  const kiln::pool2d_options po{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  kiln::pooled out;
  const double ms = median_ms(dev.default_queue(), o, [&] {
    if (indices) {
      out = kiln::max_pool2d_with_indices(x, po);
      out.values.eval(), out.indices.eval();
    } else {
      out.values = kiln::max_pool2d(x, po).eval();
    }
  });
  checker chk;
  bool index_ok = true;
  for (const auto [n, c, p, q] : {std::array<i64, 4>{0, 0, 0, 0}, {N - 1, C - 1, P - 1, Q / 2}}) {
    const std::vector<float> plane = host(x.slice(0, n, n + 1).slice(1, c, c + 1));
    double want = -1;
    i64 arg = -1;
    for (i64 h = std::max<i64>(2 * p - 1, 0); h <= std::min(2 * p + 1, H - 1); ++h)
      for (i64 v = std::max<i64>(2 * q - 1, 0); v <= std::min(2 * q + 1, W - 1); ++v)
        if (plane[size_t(h * W + v)] > want) want = plane[size_t(h * W + v)], arg = h * W + v;
    const auto at = [&](const kiln::tensor& t) {
      return t.slice(0, n, n + 1).slice(1, c, c + 1).slice(2, p, p + 1).slice(3, q, q + 1);
    };
    chk.add(at(out.values).item<float>(), want);
    if (indices) index_ok = index_ok && at(out.indices).item<std::int64_t>() == arg;
  }
  const double elems_in = double(N * C * H * W), elems_out = double(N * C * P * Q);
  const double bytes = 4 * elems_in + (indices ? 12 : 4) * elems_out;
  add_result({"pool", name, "GB/s", index_ok ? chk.note(0) : "WRONG index", ms, bytes / ms * 1e-6});
}

}  // namespace

void run_gemm(const kiln::device& dev, const options& o) {
  std::printf("-- gemm on %s\n", dev.id().c_str());
  for (i64 s : o.quick ? std::vector<i64>{128, 256} : std::vector<i64>{4096, 8192})
    for (bool tf32 : {false, true}) gemm_case(dev, o, "gemm", s, 1, tf32);
  gemm_case(dev, o, "gemm", o.quick ? 64 : 256, o.quick ? 8 : 64, false);
  gemv_case(dev, o, "gemm", o.quick ? 512 : 8192);
}

void run_conv(const kiln::device& dev, const options& o) {
  std::printf("-- conv on %s\n", dev.id().c_str());
  // ResNet-50's stem, a 3x3 of the first stage and its 1x1 reduction; --quick: batch 2, 1/4 size.
  const i64 n = o.quick ? 2 : 32, d = o.quick ? 4 : 1;
  for (const conv_shape& sh :
       {conv_shape{n, 3, 64, 224 / d, 7, 2, 3}, conv_shape{n, 64, 64, 56 / d, 3, 1, 1},
        conv_shape{n, 256, 64, 56 / d, 1, 1, 0}})
    conv_cases(dev, o, "conv", sh, true);
}

void run_pool(const kiln::device& dev, const options& o) {
  std::printf("-- pool on %s\n", dev.id().c_str());
  const kiln::shape_t shape =
      o.quick ? kiln::shape_t{2, 16, 28, 28} : kiln::shape_t{32, 64, 112, 112};
  pool_case(dev, o, shape, false);
  pool_case(dev, o, shape, true);
}

void run_cpu(const kiln::device& dev, const options& o) {
  std::printf("-- cpu on %s (%s)\n", dev.id().c_str(), dev.info().name.c_str());
  for (i64 s : o.quick ? std::vector<i64>{128, 256} : std::vector<i64>{1024, 2048})
    gemm_case(dev, o, "cpu", s, 1, false);
  conv_cases(dev, o, "cpu", conv_shape{o.quick ? 1 : 4, 64, 64, o.quick ? 14 : 56, 3, 1, 1}, false);
}

}  // namespace kiln_bench_tensor
