// layer_norm and rms_norm (forward, statistics, autograd backward) against a double-precision
// host model, in f32, f64, f16 and bf16, over rows of 1 to 4097 elements and one or two
// normalised dims; the host model's gradient formulas against central differences; bad input;
// the nn modules.
#include <cmath>
#include <kiln/nn/normalization.hpp>
#include <kiln/tensor/layer_norm.hpp>

#include "codegen/target.hpp"
#include "tensor/layer_norm_kernels.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::scalar_type;
using kiln::tensor;

class TensorLayerNormTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorLayerNormTest);

// A device tensor of dtype with seeded values in [-4, 4] + offset (never zero), and the values
// it holds after rounding to dtype, in double.
struct operand {
  tensor t;
  std::vector<double> v;
};
operand make(const kiln::device& dev, const shape_t& s, std::uint64_t seed, scalar_type dtype,
             double offset = 0) {
  std::vector<float> v = values<float>(std::size_t(numel(s)), seed);
  for (float& e : v) e += float(offset);
  tensor t = tensor::from(dev, v, s).to(dtype).contiguous();
  std::vector<float> back = t.to(scalar_type::f32).to_vector<float>();
  return {t, {back.begin(), back.end()}};
}

std::vector<double> read(const tensor& t) {
  if (t.dtype() == scalar_type::f64) return t.to_vector<double>();
  const std::vector<float> v = t.to(scalar_type::f32).to_vector<float>();
  return {v.begin(), v.end()};
}

::testing::AssertionResult close(const char* what, const std::vector<double>& got,
                                 const std::vector<double>& want, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= tol * std::max(1.0, std::fabs(want[i]))))
      return ::testing::AssertionFailure()
             << what << " element " << i << ": " << got[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

double tolerance(scalar_type t) {
  switch (t) {
    case scalar_type::f64: return 1e-10;
    case scalar_type::f32: return 2e-5;
    case scalar_type::f16: return 2e-3;
    default: return 1.6e-2;  // bf16: 8 bits of mantissa
  }
}

// The host model of rows x n values: statistics, output and gradients in double.
struct model {
  bool rms;
  std::int64_t rows, n;
  std::vector<double> x, w, b;  // w, b empty: none
  double eps;
  std::vector<double> mean, rstd;

  double xhat(std::int64_t r, std::int64_t j) const {
    return (x[std::size_t(r * n + j)] - mean[std::size_t(r)]) * rstd[std::size_t(r)];
  }
  std::vector<double> forward() {
    mean.assign(std::size_t(rows), 0);
    rstd.assign(std::size_t(rows), 0);
    std::vector<double> y(x.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      double m = 0, v = 0;
      for (std::int64_t j = 0; j < n; ++j) m += x[std::size_t(r * n + j)];
      m = rms ? 0 : m / double(n);
      for (std::int64_t j = 0; j < n; ++j) v += std::pow(x[std::size_t(r * n + j)] - m, 2);
      mean[std::size_t(r)] = m;
      rstd[std::size_t(r)] = 1 / std::sqrt(v / double(n) + eps);
      for (std::int64_t j = 0; j < n; ++j)
        y[std::size_t(r * n + j)] =
            xhat(r, j) * (w.empty() ? 1 : w[std::size_t(j)]) + (b.empty() ? 0 : b[std::size_t(j)]);
    }
    return y;
  }
  // dx, dw, db of sum(y * dy) (after forward()).
  void backward(const std::vector<double>& dy, std::vector<double>& dx, std::vector<double>& dw,
                std::vector<double>& db) const {
    dx.assign(x.size(), 0), dw.assign(std::size_t(n), 0), db.assign(std::size_t(n), 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      double sg = 0, sgx = 0;
      for (std::int64_t j = 0; j < n; ++j) {
        const double g = dy[std::size_t(r * n + j)] * (w.empty() ? 1 : w[std::size_t(j)]);
        sg += g, sgx += g * xhat(r, j);
        dw[std::size_t(j)] += dy[std::size_t(r * n + j)] * xhat(r, j);
        db[std::size_t(j)] += dy[std::size_t(r * n + j)];
      }
      for (std::int64_t j = 0; j < n; ++j) {
        const double g = dy[std::size_t(r * n + j)] * (w.empty() ? 1 : w[std::size_t(j)]);
        dx[std::size_t(r * n + j)] =
            rstd[std::size_t(r)] * (g - ((rms ? 0 : sg) + xhat(r, j) * sgx) / double(n));
      }
    }
  }
};

struct norm_case {
  shape_t shape;
  std::size_t dims;  // normalised trailing dims
};

// Runs layer_norm or rms_norm of x (dtype t, optional affine in pt) with autograd, checks the
// output, the statistics and the gradients of sum(y * dy) against the host model.
void check(const kiln::device& dev, bool rms, const norm_case& c, scalar_type t, bool affine,
           scalar_type pt, std::uint64_t seed) {
  SCOPED_TRACE(std::string(rms ? "rms_norm " : "layer_norm ") + kiln::to_string(c.shape) +
               " over " + std::to_string(c.dims) + " dims, " + kiln::type_name(t) +
               (affine ? std::string(", affine ") + kiln::type_name(pt) : ", no affine"));
  const shape_t ns(c.shape.end() - std::ptrdiff_t(c.dims), c.shape.end());
  const std::int64_t n = numel(ns), rows = numel(c.shape) / n;
  operand x = make(dev, c.shape, seed, t, 3), dy = make(dev, c.shape, seed + 1, t);
  operand w = affine ? make(dev, ns, seed + 2, pt) : operand{};
  operand b = affine && !rms ? make(dev, ns, seed + 3, pt) : operand{};
  x.t.requires_grad_();
  if (affine) w.t.requires_grad_();
  if (b.t.defined()) b.t.requires_grad_();
  const double eps = 1e-5;
  const kiln::layer_norm_result r = rms ? kiln::native_rms_norm(x.t, ns, w.t, eps)
                                        : kiln::native_layer_norm(x.t, ns, w.t, b.t, eps);
  model m{rms, rows, n, x.v, w.v, b.v, eps, {}, {}};
  const std::vector<double> y = m.forward();
  const double tol = tolerance(t);
  ASSERT_EQ(r.output.shape(), c.shape);
  ASSERT_EQ(r.output.dtype(), t);
  EXPECT_TRUE(close("output", read(r.output), y, tol));
  shape_t ss = c.shape;
  for (std::size_t d = ss.size() - c.dims; d < ss.size(); ++d) ss[d] = 1;
  const scalar_type acc = t == scalar_type::f64 ? t : scalar_type::f32;
  ASSERT_EQ(r.rstd.shape(), ss);
  ASSERT_EQ(r.rstd.dtype(), acc);
  const double stol = t == scalar_type::f64 ? 1e-10 : 2e-5;
  EXPECT_TRUE(close("rstd", read(r.rstd), m.rstd, stol));
  if (!rms) {
    ASSERT_EQ(r.mean.shape(), ss);
    EXPECT_TRUE(close("mean", read(r.mean), m.mean, stol));
  } else {
    EXPECT_FALSE(r.mean.defined());
  }
  (r.output * dy.t).sum().backward();
  std::vector<double> dx, dw, db;
  m.backward(dy.v, dx, dw, db);
  EXPECT_TRUE(close("x.grad", read(x.t.grad()), dx, 2 * tol));
  if (affine) {
    // Column sums over every row: the reference is a sum too, so scale by its length.
    const double ptol = tolerance(pt) * std::max(1.0, std::sqrt(double(rows)) / 4);
    EXPECT_EQ(w.t.grad().dtype(), pt);
    EXPECT_EQ(w.t.grad().shape(), ns);
    EXPECT_TRUE(close("weight.grad", read(w.t.grad()), dw, ptol));
    if (b.t.defined()) {
      EXPECT_TRUE(close("bias.grad", read(b.t.grad()), db, ptol));
    }
  }
}

bool has_fp64(const kiln::device& dev) { return dev.supports(kiln::feature::fp64); }

TEST_P(TensorLayerNormTest, MatchesHostModelInEveryDtype) {
  const std::vector<norm_case> cases{{{5, 1}, 1},    {{3, 4, 7}, 1}, {{9, 768}, 1},
                                     {{3, 4097}, 1}, {{300, 33}, 1}, {{4, 6, 128}, 2},
                                     {{2, 3, 5}, 2}};
  std::uint64_t seed = 10;
  for (scalar_type t : {scalar_type::f32, scalar_type::f64, scalar_type::f16, scalar_type::bf16}) {
    if (t == scalar_type::f64 && !has_fp64(dev())) continue;
    for (bool rms : {false, true})
      for (const norm_case& c : cases)
        for (bool affine : {true, false})
          // Without affine in f32 only: each combination is its own kernels to compile.
          if (affine || t == scalar_type::f32) check(dev(), rms, c, t, affine, t, seed += 4);
  }
}

TEST_P(TensorLayerNormTest, ManyRowsAndMixedWeightDtype) {
  check(dev(), false, {{2048, 40}, 1}, scalar_type::f32, true, scalar_type::f32, 1);
  check(dev(), true, {{1500, 96}, 1}, scalar_type::f32, true, scalar_type::f32, 2);
  // Rows longer than 32 per lane of 256 lanes: re-read from cache, not kept in registers.
  check(dev(), false, {{3, 9000}, 1}, scalar_type::f32, true, scalar_type::f32, 5);
  check(dev(), true, {{2, 8300}, 1}, scalar_type::bf16, true, scalar_type::bf16, 6);
  // PyTorch allows f32 parameters with 16-bit input: output in the input's dtype.
  check(dev(), false, {{16, 768}, 1}, scalar_type::bf16, true, scalar_type::f32, 3);
  check(dev(), true, {{16, 100}, 1}, scalar_type::f16, true, scalar_type::f32, 4);
  // 16-bit rows of a multiple of 8 move as 16-byte words: lanes past the row's last word.
  check(dev(), false, {{40, 136}, 1}, scalar_type::bf16, true, scalar_type::f32, 7);
  check(dev(), true, {{24, 1040}, 1}, scalar_type::f16, true, scalar_type::f16, 8);
  // 16-bit rows of 513-1024 over one warp, the weight and bias in words too (16-bit and f32).
  check(dev(), false, {{40, 1024}, 1}, scalar_type::bf16, true, scalar_type::bf16, 9);
  check(dev(), false, {{33, 1000}, 1}, scalar_type::bf16, true, scalar_type::f32, 10);
  check(dev(), true, {{20, 520}, 1}, scalar_type::f16, true, scalar_type::f16, 11);
}

// More rows than one pass of the GPU's groups (a fused backward walks several row blocks per
// group: 2, 4 and 8 rows per group, whole and ragged rows; an H200 runs 528 groups), and the
// parameter gradients repeat bit for bit from run to run (partial sums in a fixed order, no
// atomics; f32 gradients, so that no rounding hides a different order).
TEST_P(TensorLayerNormTest, ParameterGradientsOverManyRowsRepeat) {
  // Elsewhere (the two-kernel form) fewer rows: CI's two cores.
  const std::int64_t s = dev().info().type == kiln::device_type::gpu ? 1 : 16;
  check(dev(), false, {{3001 / s, 1024}, 1}, scalar_type::f32, true, scalar_type::f32, 21);
  check(dev(), false, {{2500 / s, 384}, 1}, scalar_type::bf16, true, scalar_type::bf16, 22);
  check(dev(), true, {{8200 / s, 100}, 1}, scalar_type::f32, true, scalar_type::f32, 23);
  check(dev(), false, {{1300 / s, 776}, 1}, scalar_type::f16, true, scalar_type::f32, 24);
  const operand x = make(dev(), {2100 / s, 768}, 25, scalar_type::bf16, 3);
  const operand dy = make(dev(), {2100 / s, 768}, 26, scalar_type::bf16);
  const operand w = make(dev(), {768}, 27, scalar_type::f32);
  const kiln::layer_norm_result r = kiln::native_layer_norm(x.t, {768}, w.t, tensor());
  std::uint64_t launches = 0;
  const auto grads = [&] {
    const kiln::layer_norm_grads g =
        kiln::layer_norm_backward(dy.t, x.t, {768}, r.mean, r.rstd, w.t, true, true);
    launches = kiln::last_tensor_stats().kernel_launches;
    return std::pair{read(g.weight), read(g.bias)};
  };
  const auto first = grads();
  // One pass over dy and x where 32-wide warps allow (the backward and the partials' sum),
  // else the two-kernel form (dx, the partial sums, their sum).
  EXPECT_EQ(launches, dev().supports(kiln::feature::warp32) ? 2u : 3u);
  for (int run = 0; run < 3; ++run) {
    const auto again = grads();
    EXPECT_EQ(again.first, first.first) << "run " << run;
    EXPECT_EQ(again.second, first.second) << "run " << run;
  }
}

// 16-bit inputs that start on a 16-byte word (moved in words) or off one (element by element)
// give what the same values give in a tensor of their own, forward and backward.
TEST_P(TensorLayerNormTest, SixteenBitViewsStartingAnywhere) {
  const std::int64_t rows = 12, n = 256;
  for (scalar_type t : {scalar_type::bf16, scalar_type::f16}) {
    const operand all = make(dev(), {rows * n + 12}, 61, t, 3);
    const operand dy = make(dev(), {rows, n}, 62, t);
    const operand w = make(dev(), {n}, 63, scalar_type::f32);
    for (std::int64_t off : {8, 4, 1}) {
      SCOPED_TRACE(std::string(kiln::type_name(t)) + ", offset " + std::to_string(off));
      const tensor view = all.t.slice(0, off, off + rows * n).reshape({rows, n});
      const tensor own = (view * 1).eval();  // the same values at the start of their own memory
      const auto a = kiln::native_layer_norm(view, {n}, w.t, {});
      const auto b = kiln::native_layer_norm(own, {n}, w.t, {});
      // Summed in another order where one is in words and the other is not: a rounding apart.
      EXPECT_TRUE(close("output", read(a.output), read(b.output), tolerance(t)));
      const auto ga = kiln::layer_norm_backward(dy.t, view, {n}, a.mean, a.rstd, w.t, true, false);
      const auto gb = kiln::layer_norm_backward(dy.t, own, {n}, b.mean, b.rstd, w.t, true, false);
      EXPECT_TRUE(close("x.grad", read(ga.input), read(gb.input), 2 * tolerance(t)));
      EXPECT_TRUE(close("weight.grad", read(ga.weight), read(gb.weight), 2 * tolerance(t)));
    }
  }
}

// A weight and bias that start on a 16-byte word (read in words by the one-warp 16-bit forward)
// or off one (element by element) give what the same values give in tensors of their own.
TEST_P(TensorLayerNormTest, ParametersStartingAnywhere) {
  const std::int64_t rows = 6, n = 1024;
  const operand x = make(dev(), {rows, n}, 71, scalar_type::bf16);
  for (scalar_type pt : {scalar_type::bf16, scalar_type::f32}) {
    const operand all = make(dev(), {2 * n + 16}, 72, pt, 1);
    for (std::int64_t off : {8, 3}) {
      SCOPED_TRACE(std::string(kiln::type_name(pt)) + ", offset " + std::to_string(off));
      const tensor w = all.t.slice(0, off, off + n), b = all.t.slice(0, n + off, 2 * n + off);
      const tensor w_own = (w * 1).eval(), b_own = (b * 1).eval();
      EXPECT_TRUE(close("output", read(kiln::layer_norm(x.t, {n}, w, b)),
                        read(kiln::layer_norm(x.t, {n}, w_own, b_own)),
                        tolerance(scalar_type::bf16)));
      EXPECT_TRUE(close("rms output", read(kiln::rms_norm(x.t, {n}, w)),
                        read(kiln::rms_norm(x.t, {n}, w_own)), tolerance(scalar_type::bf16)));
    }
  }
}

// The host model's gradient formulas against central differences of its own loss.
TEST_P(TensorLayerNormTest, HostModelGradientsMatchFiniteDifferences) {
  for (bool rms : {false, true}) {
    const std::int64_t rows = 3, n = 7;
    model m{rms, rows, n, values<double>(21, 5), values<double>(7, 6), {}, 1e-3, {}, {}};
    if (!rms) m.b = values<double>(7, 7);
    const std::vector<double> dy = values<double>(21, 8);
    std::vector<double> dx, dw, db;
    m.forward();
    m.backward(dy, dx, dw, db);
    const auto loss = [&] {
      const std::vector<double> y = m.forward();
      double l = 0;
      for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * dy[i];
      return l;
    };
    const auto diff = [&](std::vector<double>& v, std::size_t i) {
      const double h = 1e-6, keep = v[i];
      v[i] = keep + h;
      const double up = loss();
      v[i] = keep - h;
      const double down = loss();
      v[i] = keep;
      return (up - down) / (2 * h);
    };
    for (std::size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], diff(m.x, i), 1e-6) << i;
    for (std::size_t j = 0; j < dw.size(); ++j) EXPECT_NEAR(dw[j], diff(m.w, j), 1e-6) << j;
    if (!rms) {
      for (std::size_t j = 0; j < db.size(); ++j) EXPECT_NEAR(db[j], diff(m.b, j), 1e-6) << j;
    }
  }
}

TEST_P(TensorLayerNormTest, NonContiguousInputAndDirectBackward) {
  const operand x = make(dev(), {24, 10}, 41, scalar_type::f32, 1);
  const tensor xt = x.t.transpose(0, 1);  // [10, 24], strided
  const operand w = make(dev(), {24}, 42, scalar_type::f32);
  const tensor y = kiln::layer_norm(xt, {24}, w.t);
  const tensor y2 = kiln::layer_norm(xt.contiguous(), {24}, w.t);
  EXPECT_TRUE(close("output", read(y), read(y2), 0));
  const auto r = kiln::native_layer_norm(xt, {24}, w.t, {});
  const tensor dy = tensor::ones(dev(), {10, 24});
  const auto g = kiln::layer_norm_backward(dy, xt, {24}, r.mean, r.rstd, w.t, true, true);
  EXPECT_EQ(g.input.shape(), (shape_t{10, 24}));
  EXPECT_EQ(g.weight.shape(), (shape_t{24}));
  EXPECT_EQ(g.bias.shape(), (shape_t{24}));
  // dbias of a ones dy: the row count.
  for (double v : read(g.bias)) EXPECT_EQ(v, 10.0);
  // No rows: empty output and statistics, zero parameter gradients.
  const tensor e = tensor::zeros(dev(), {0, 24});
  const auto re = kiln::native_layer_norm(e, {24}, w.t, {});
  EXPECT_EQ(re.output.shape(), (shape_t{0, 24}));
  EXPECT_EQ(re.rstd.shape(), (shape_t{0, 1}));
  const auto ge = kiln::layer_norm_backward(e, e, {24}, re.mean, re.rstd, w.t, true, true);
  for (double v : read(ge.weight)) EXPECT_EQ(v, 0.0);
}

TEST_P(TensorLayerNormTest, DefaultRmsEpsIsTheComputeTypeEpsilon) {
  // Rows of equal values: rstd = 1 / sqrt(v^2 + eps), so a tiny v exposes eps.
  const tensor x = tensor::full(dev(), {2, 8}, scalar_type::f32, 1e-4f);
  const auto r = kiln::native_rms_norm(x, {8}, {});
  const double want = 1 / std::sqrt(double(1e-4f) * double(1e-4f) + 0x1p-23);
  EXPECT_NEAR(read(r.rstd)[0], want, want * 1e-5);
}

TEST_P(TensorLayerNormTest, BadInputIsRefusedWithClearErrors) {
  const tensor x = make(dev(), {4, 6}, 51, scalar_type::f32).t;
  const tensor w6 = tensor::ones(dev(), {6}), w5 = tensor::ones(dev(), {5});
  EXPECT_THROW(kiln::layer_norm(x, {6}, w5), kiln::shape_error);
  EXPECT_THROW(kiln::layer_norm(x, {6}, w6, w5), kiln::shape_error);
  EXPECT_THROW(kiln::layer_norm(x, {4}), kiln::shape_error);        // not the trailing dims
  EXPECT_THROW(kiln::layer_norm(x, {3, 4, 6}), kiln::shape_error);  // more dims than x
  EXPECT_THROW(kiln::layer_norm(x, {}), kiln::shape_error);
  EXPECT_THROW(kiln::layer_norm(x, {6}, {}, {}, 0.0), kiln::invalid_argument);
  EXPECT_THROW(kiln::layer_norm(x, {6}, {}, {}, -1e-5), kiln::invalid_argument);
  EXPECT_THROW(kiln::rms_norm(x, {6}, {}, 0.0), kiln::invalid_argument);
  EXPECT_THROW(kiln::layer_norm(x.to(scalar_type::i32), {6}), kiln::dtype_error);
  EXPECT_THROW(kiln::rms_norm(x.to(scalar_type::i64), {6}), kiln::dtype_error);
  EXPECT_THROW(kiln::layer_norm(x.to(scalar_type::f16), {6}, w6.to(scalar_type::bf16)),
               kiln::dtype_error);
  if (has_fp64(dev())) {
    EXPECT_THROW(kiln::layer_norm(x, {6}, w6.to(scalar_type::f64)), kiln::dtype_error);
  }
  EXPECT_THROW(kiln::layer_norm(tensor(), {6}), kiln::invalid_argument);
  try {
    kiln::layer_norm(x, {6}, w5);
    ADD_FAILURE() << "no error";
  } catch (const kiln::shape_error& e) {
    EXPECT_NE(std::string(e.what()).find("weight is [5]"), std::string::npos) << e.what();
  }
  const auto r = kiln::native_layer_norm(x, {6}, w6, {});
  EXPECT_THROW(kiln::layer_norm_backward(tensor::ones(dev(), {4, 5}), x, {6}, r.mean, r.rstd, w6,
                                         true, true),
               kiln::shape_error);
  EXPECT_THROW(kiln::layer_norm_backward(tensor::ones(dev(), {4, 6}).to(scalar_type::f16), x, {6},
                                         r.mean, r.rstd, w6, true, true),
               kiln::dtype_error);
  EXPECT_THROW(
      kiln::layer_norm_backward(tensor::ones(dev(), {4, 6}), x, {6}, r.mean, {}, w6, true, true),
      kiln::invalid_argument);
  EXPECT_THROW(kiln::layer_norm_backward(tensor::ones(dev(), {4, 6}), x, {6}, r.mean, r.rstd, {},
                                         true, false),
               kiln::invalid_argument);
}

TEST_P(TensorLayerNormTest, NnModulesHavePyTorchParameters) {
  kiln::nn::layer_norm ln(dev(), {4, 6});
  const auto sd = ln.state_dict();
  ASSERT_EQ(sd.size(), 2u);
  EXPECT_EQ(sd[0].first, "weight");
  EXPECT_EQ(sd[1].first, "bias");
  EXPECT_EQ(sd[0].second.shape(), (shape_t{4, 6}));
  for (double v : read(ln.weight)) EXPECT_EQ(v, 1.0);
  for (double v : read(ln.bias)) EXPECT_EQ(v, 0.0);
  const operand x = make(dev(), {3, 4, 6}, 61, scalar_type::f32, 2);
  EXPECT_TRUE(close("module", read(ln(x.t)), read(kiln::layer_norm(x.t, {4, 6})), 1e-6));

  kiln::nn::rms_norm rn(dev(), {6});
  ASSERT_EQ(rn.state_dict().size(), 1u);
  EXPECT_EQ(rn.state_dict()[0].first, "weight");
  EXPECT_TRUE(close("rms module", read(rn(x.t)), read(kiln::rms_norm(x.t, {6})), 1e-6));

  kiln::nn::layer_norm plain(dev(), {6}, 1e-5, {.elementwise_affine = false});
  EXPECT_TRUE(plain.state_dict().empty());
  kiln::nn::layer_norm no_bias(dev(), {6}, 1e-5, {.bias = false});
  EXPECT_EQ(no_bias.state_dict().size(), 1u);
  EXPECT_THROW(kiln::nn::layer_norm(dev(), {6}, 0.0), kiln::invalid_argument);
  EXPECT_THROW(kiln::nn::layer_norm(dev(), {}), kiln::shape_error);

  // Training through the module reaches its parameters.
  (ln(x.t) * x.t).sum().backward();
  EXPECT_TRUE(ln.weight.grad().defined());
  EXPECT_TRUE(ln.bias.grad().defined());
}

// Every form of the kernels through NVRTC too (this machine runs only the CPU and OpenCL
// ones): each form and kind once, the dtypes taken in turn (f16 with an f32 weight).
TEST_P(TensorLayerNormTest, NormSourcesCompileEverywhere) {
  if (!conformance::cuda_compile_only()) GTEST_SKIP() << "CUDA is not in compile-only mode here";
  using kiln::detail::norm_kernel_kind;
  const scalar_type types[] = {scalar_type::f32, scalar_type::f64, scalar_type::f16,
                               scalar_type::bf16};
  std::size_t turn = 0;
  const auto compile = [&](norm_kernel_kind kind, bool rms, std::uint32_t lanes,
                           std::uint32_t cap) {
    const scalar_type t = types[turn++ % 4];
    const scalar_type w = t == scalar_type::f16 ? scalar_type::f32 : t;
    EXPECT_NO_THROW(conformance::compile_everywhere(
        kiln::detail::norm_source({kind, t, w, rms, true, !rms, lanes, cap})));
  };
  for (bool rms : {false, true}) {
    for (norm_kernel_kind kind : {norm_kernel_kind::forward, norm_kernel_kind::backward}) {
      compile(kind, rms, 1, 0);
      compile(kind, rms, 64, 0);
      compile(kind, rms, 256, 17);
    }
    compile(norm_kernel_kind::params, rms, 0, 0);  // by columns
    compile(norm_kernel_kind::params, rms, 1, 0);  // by rows
    compile(norm_kernel_kind::params_sum, rms, 1, 0);
    compile(norm_kernel_kind::params_sum, rms, 32, 0);
  }
  EXPECT_NO_THROW(conformance::compile_everywhere(
      kiln::detail::norm_source({norm_kernel_kind::forward, scalar_type::f32, scalar_type::f32,
                                 false, false, false, 32, 3})));
  // The warp32 forms (CUDA's shuffles), 16-bit words or not, cached or re-read.
  const std::string warp = kiln::codegen::target_for("cuda").warp->definitions;
  for (bool rms : {false, true})
    for (norm_kernel_kind kind : {norm_kernel_kind::forward, norm_kernel_kind::backward})
      for (const auto& [t, lanes, cap, vec] :
           {std::tuple{scalar_type::bf16, 64u, 16u, 8u}, std::tuple{scalar_type::f16, 32u, 24u, 8u},
            std::tuple{scalar_type::f32, 128u, 9u, 1u}, std::tuple{scalar_type::f32, 256u, 0u, 1u}})
        EXPECT_NO_THROW(kiln::compile_only(
            "cuda", conformance::cuda_check_arch,
            warp + kiln::detail::norm_source(
                       {kind, t, scalar_type::f32, rms, true, !rms, lanes, cap, vec, true})));
  // The backward with the parameter gradients' partials: words or not, 1 to 8 rows a group.
  for (const auto& [t, lanes, cap, vec] :
       {std::tuple{scalar_type::bf16, 128u, 8u, 8u}, std::tuple{scalar_type::f32, 32u, 4u, 1u},
        std::tuple{scalar_type::f32, 256u, 16u, 1u}, std::tuple{scalar_type::f64, 64u, 7u, 1u}})
    for (bool rms : {false, true})
      for (std::uint8_t fuse : {1, 2, 3}) {
        if (rms && fuse != 1) continue;
        kiln::detail::norm_kernel_key k{
            norm_kernel_kind::backward, t, t, rms, true, false, lanes, cap, vec, true};
        k.fuse = fuse;
        EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch,
                                           warp + kiln::detail::norm_source(k)));
      }
  // The one-warp forward with its weight and bias in words: 16-bit and f32 parameters.
  for (scalar_type w : {scalar_type::bf16, scalar_type::f32})
    for (bool rms : {false, true})
      EXPECT_NO_THROW(kiln::compile_only(
          "cuda", conformance::cuda_check_arch,
          warp + kiln::detail::norm_source({norm_kernel_kind::forward, scalar_type::bf16, w, rms,
                                            true, !rms, 32u, 32u, 8u, true, true})));
}

}  // namespace
}  // namespace tensor_test
