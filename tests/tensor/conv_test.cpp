// conv2d and its backwards on every device, against a direct convolution in double over seeded
// operands (never zero): strides, padding, dilation, groups, bias, 1 x 1 and non-square
// kernels, unbatched and non-contiguous inputs; the adjoint identity tying the three together;
// the portable path beside the vendor one where a device has both; and every error.
// Tolerance per element: 2 (k + 2) eps sum |terms|, eps = 2^-23 (f32), 2^-52 (f64), k the
// terms summed (docs/tensor.md).
#include <cmath>
#include <cstdlib>
#include <kiln/tensor/autocast.hpp>
#include <kiln/tensor/conv.hpp>
#include <kiln/tensor/normalization.hpp>
#include <kiln/tensor/placement.hpp>

#include "tensor/conv_kernels.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class TensorConvTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorConvTest);

struct config {
  shape_t x, w;
  kiln::conv2d_options o;
  bool bias = true;
};

// A few shapes covering each option; small enough for two CI cores.
std::vector<config> configs() {
  return {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}, true},
      {{1, 2, 9, 9}, {3, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 2}}, true},
      {{2, 4, 8, 7}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}, false},
      {{1, 3, 11, 10},
       {2, 3, 3, 3},
       {.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 3}},
       true},
      {{3, 5, 4, 4}, {7, 5, 1, 1}, {}, true},
      {{2, 6, 5, 5}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}, true},  // depthwise
  };
}

struct dims {
  std::int64_t n, c, h, w, k, r, s, p, q, g;
};

dims dims_of(const config& c) {
  const auto& o = c.o;
  dims d{c.x[0], c.x[1], c.x[2], c.x[3], c.w[0], c.w[2], c.w[3], 0, 0, o.groups};
  d.p = (d.h + 2 * o.padding[0] - o.dilation[0] * (d.r - 1) - 1) / o.stride[0] + 1;
  d.q = (d.w + 2 * o.padding[1] - o.dilation[1] * (d.s - 1) - 1) / o.stride[1] + 1;
  return d;
}

// Visits every (n, k, p, q, c, r, s) term of the convolution with its input coordinates.
template <class F>
void for_each_term(const config& cfg, F f) {
  const dims d = dims_of(cfg);
  const auto& o = cfg.o;
  const std::int64_t cg = d.c / d.g, kg = d.k / d.g;
  for (std::int64_t n = 0; n < d.n; ++n)
    for (std::int64_t k = 0; k < d.k; ++k)
      for (std::int64_t p = 0; p < d.p; ++p)
        for (std::int64_t q = 0; q < d.q; ++q)
          for (std::int64_t cl = 0; cl < cg; ++cl)
            for (std::int64_t r = 0; r < d.r; ++r)
              for (std::int64_t s = 0; s < d.s; ++s) {
                const std::int64_t h = p * o.stride[0] - o.padding[0] + r * o.dilation[0];
                const std::int64_t w = q * o.stride[1] - o.padding[1] + s * o.dilation[1];
                if (h < 0 || h >= d.h || w < 0 || w >= d.w) continue;
                const std::int64_t c = (k / kg) * cg + cl;
                f(((n * d.c + c) * d.h + h) * d.w + w, ((k * cg + cl) * d.r + r) * d.s + s,
                  ((n * d.k + k) * d.p + p) * d.q + q);
              }
}

struct expected {
  std::vector<double> v, mag;
  std::int64_t terms = 1;
};

template <class T>
::testing::AssertionResult near(const kiln::tensor& got, const shape_t& shape, const expected& e) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure()
           << "shape " << kiln::to_string(got.shape()) << ", expected " << kiln::to_string(shape);
  const std::vector<T> g = got.to_vector<T>();
  const double eps = std::is_same_v<T, float> ? 0x1p-23 : 0x1p-52;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tol = 2.0 * double(e.terms + 2) * eps * e.mag[i] + 1e-300;
    if (!(std::fabs(double(g[i]) - e.v[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << ", expected "
                                           << e.v[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

template <class T>
void check_config(const kiln::device& dev, const config& cfg, std::uint64_t seed) {
  SCOPED_TRACE("input " + kiln::to_string(cfg.x) + ", weight " + kiln::to_string(cfg.w));
  const dims d = dims_of(cfg);
  const shape_t ys{d.n, d.k, d.p, d.q};
  const host<T> x = random_host<T>(cfg.x, seed), w = random_host<T>(cfg.w, seed + 1);
  const host<T> b = random_host<T>({d.k}, seed + 2), dy = random_host<T>(ys, seed + 3);

  expected fy{std::vector<double>(numel(ys)), std::vector<double>(numel(ys)),
              (d.c / d.g) * d.r * d.s + 1};
  expected fx{std::vector<double>(x.v.size()), std::vector<double>(x.v.size()),
              (d.k / d.g) * d.r * d.s};
  expected fw{std::vector<double>(w.v.size()), std::vector<double>(w.v.size()), d.n * d.p * d.q};
  if (cfg.bias)
    for (std::size_t i = 0; i < fy.v.size(); ++i) {
      fy.v[i] = double(b.v[(i / std::size_t(d.p * d.q)) % std::size_t(d.k)]);
      fy.mag[i] = std::fabs(fy.v[i]);
    }
  for_each_term(cfg, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
    const double t = double(x.v[xi]) * double(w.v[wi]);
    fy.v[yi] += t, fy.mag[yi] += std::fabs(t);
    const double tx = double(dy.v[yi]) * double(w.v[wi]);
    fx.v[xi] += tx, fx.mag[xi] += std::fabs(tx);
    const double tw = double(dy.v[yi]) * double(x.v[xi]);
    fw.v[wi] += tw, fw.mag[wi] += std::fabs(tw);
  });

  const kiln::tensor tx = upload(dev, x), tw = upload(dev, w), tdy = upload(dev, dy);
  const kiln::tensor y = kiln::conv2d(tx, tw, cfg.bias ? upload(dev, b) : kiln::tensor{}, cfg.o);
  EXPECT_TRUE(near<T>(y, ys, fy)) << "forward";
  EXPECT_TRUE(near<T>(kiln::conv2d_backward_data(tdy, tw, cfg.x, cfg.o), cfg.x, fx))
      << "backward data";
  EXPECT_TRUE(near<T>(kiln::conv2d_backward_filter(tx, tdy, cfg.w, cfg.o), cfg.w, fw))
      << "backward filter";
}

// Runs f with the portable path forced (KILN_DNN_PORTABLE), restoring the environment.
template <class F>
void portable(F f) {
  ::setenv("KILN_DNN_PORTABLE", "1", 1);
  f();
  ::unsetenv("KILN_DNN_PORTABLE");
}

TEST_P(TensorConvTest, MatchesDirectConvolutionForwardAndBackward) {
  std::uint64_t seed = 100;
  for (const config& c : configs()) {
    check_config<float>(dev(), c, seed += 10);
    if (has_f64()) check_config<double>(dev(), c, seed += 10);
  }
}

// f16 and bf16 operands: held as the 16-bit values, the reference computed from them in double.
template <class H>
std::vector<float> rounded(const std::vector<float>& v) {
  std::vector<float> out;
  for (float x : v) out.push_back(float(H(x)));
  return out;
}
template <class H>
kiln::tensor upload_as(const kiln::device& dev, const std::vector<float>& v, const shape_t& s) {
  std::vector<H> h;
  for (float x : v) h.push_back(H(x));
  return kiln::tensor::from(dev, h, s);
}

// Per element: the 16-bit rounding of the result (twice the unit roundoff, for libraries that
// round an intermediate) plus f32 accumulation, relative to sum |terms|.
::testing::AssertionResult near_reduced(const kiln::tensor& got, kiln::scalar_type t,
                                        const shape_t& shape, const expected& e, double u16) {
  if (got.shape() != shape || got.dtype() != t)
    return ::testing::AssertionFailure()
           << kiln::to_string(got.shape()) << " " << kiln::type_name(got.dtype()) << ", expected "
           << kiln::to_string(shape) << " " << kiln::type_name(t);
  const std::vector<float> g = got.to(kiln::scalar_type::f32).to_vector<float>();
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double tol = (4 * u16 + 2.0 * double(e.terms + 2) * 0x1p-23) * e.mag[i] + 1e-30;
    if (!(std::fabs(double(g[i]) - e.v[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << ", expected "
                                           << e.v[i] << " (tolerance " << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

template <class H>
void check_reduced(const kiln::device& dev, const config& cfg, std::uint64_t seed) {
  SCOPED_TRACE("input " + kiln::to_string(cfg.x) + ", weight " + kiln::to_string(cfg.w) + ", " +
               kiln::type_name(kiln::scalar_type_of<H>));
  const kiln::scalar_type t = kiln::scalar_type_of<H>;
  const double u16 = t == kiln::scalar_type::bf16 ? 0x1p-8 : 0x1p-11;
  const dims d = dims_of(cfg);
  const shape_t ys{d.n, d.k, d.p, d.q};
  const auto x = rounded<H>(random_host<float>(cfg.x, seed).v);
  const auto w = rounded<H>(random_host<float>(cfg.w, seed + 1).v);
  const auto b = rounded<H>(random_host<float>({d.k}, seed + 2).v);
  const auto dy = rounded<H>(random_host<float>(ys, seed + 3).v);
  expected fy{std::vector<double>(numel(ys)), std::vector<double>(numel(ys)),
              (d.c / d.g) * d.r * d.s + 1};
  expected fx{std::vector<double>(x.size()), std::vector<double>(x.size()),
              (d.k / d.g) * d.r * d.s};
  expected fw{std::vector<double>(w.size()), std::vector<double>(w.size()), d.n * d.p * d.q};
  for (std::size_t i = 0; i < fy.v.size(); ++i) {
    fy.v[i] = double(b[(i / std::size_t(d.p * d.q)) % std::size_t(d.k)]);
    fy.mag[i] = std::fabs(fy.v[i]);
  }
  for_each_term(cfg, [&](std::int64_t xi, std::int64_t wi, std::int64_t yi) {
    const double tt = double(x[xi]) * w[wi], tx = double(dy[yi]) * w[wi],
                 tw = double(dy[yi]) * x[xi];
    fy.v[yi] += tt, fy.mag[yi] += std::fabs(tt);
    fx.v[xi] += tx, fx.mag[xi] += std::fabs(tx);
    fw.v[wi] += tw, fw.mag[wi] += std::fabs(tw);
  });
  const kiln::tensor tx = upload_as<H>(dev, x, cfg.x), tw = upload_as<H>(dev, w, cfg.w);
  const kiln::tensor tdy = upload_as<H>(dev, dy, ys);
  EXPECT_TRUE(
      near_reduced(kiln::conv2d(tx, tw, upload_as<H>(dev, b, {d.k}), cfg.o), t, ys, fy, u16))
      << "forward";
  EXPECT_TRUE(near_reduced(kiln::conv2d_backward_data(tdy, tw, cfg.x, cfg.o), t, cfg.x, fx, u16))
      << "backward data";
  EXPECT_TRUE(near_reduced(kiln::conv2d_backward_filter(tx, tdy, cfg.w, cfg.o), t, cfg.w, fw, u16))
      << "backward filter";
}

// f16 and bf16 convolutions: cuDNN (tensor cores, f32 accumulation) where the device has it;
// elsewhere the f32 kernels with the result rounded once.
TEST_P(TensorConvTest, SixteenBitConvolutionsMatchTheReference) {
  std::uint64_t seed = 900;
  for (const config& c : configs()) {
    check_reduced<kiln::bfloat16>(dev(), c, seed += 10);
    check_reduced<kiln::half>(dev(), c, seed += 10);
  }
  const auto x = kiln::tensor::randn(dev(), {1, 2, 5, 5}, 3, kiln::scalar_type::bf16);
  kiln::conv2d(x, kiln::tensor::randn(dev(), {2, 2, 3, 3}, 4, kiln::scalar_type::bf16));
  // cuDNN takes the 16-bit tensors itself (elsewhere the f32 path, whichever it is, ran).
  if (dev().backend() == "cuda") {
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
  }
  // Mixed 16-bit and f32 operands are refused, as in f32/f64.
  EXPECT_THROW(kiln::conv2d(x, kiln::tensor::randn(dev(), {2, 2, 3, 3}, 4)), kiln::dtype_error);
}

// Under kiln::autocast a convolution runs in the scope's type, pooling keeps it, and batch norm
// normalises in f32 and hands the input's type on; gradients reach the f32 leaves.
TEST_P(TensorConvTest, AutocastRunsConvolutionPoolingAndBatchNormIn16Bit) {
  auto x = kiln::tensor::randn(dev(), {2, 3, 8, 8}, 61).requires_grad_();
  auto w = kiln::tensor::randn(dev(), {4, 3, 3, 3}, 62).requires_grad_();
  auto gamma = kiln::tensor::ones(dev(), {4}).requires_grad_();
  auto beta = kiln::tensor::zeros(dev(), {4}).requires_grad_();
  kiln::tensor rm = kiln::tensor::zeros(dev(), {4}), rv = kiln::tensor::ones(dev(), {4});
  kiln::tensor y, ref;
  {
    kiln::autocast mixed(kiln::scalar_type::bf16);
    const kiln::tensor c = kiln::conv2d(x, w, {}, {.padding = {1, 1}});
    EXPECT_EQ(c.dtype(), kiln::scalar_type::bf16);
    const kiln::tensor n = kiln::batch_norm(c, gamma, beta, rm, rv, true).output;
    EXPECT_EQ(n.dtype(), kiln::scalar_type::bf16);
    y = kiln::max_pool2d(kiln::relu(n));
    EXPECT_EQ(y.dtype(), kiln::scalar_type::bf16);
  }
  EXPECT_EQ(rm.dtype(), kiln::scalar_type::f32);  // running statistics stay f32
  (y.to(kiln::scalar_type::f32) * y.to(kiln::scalar_type::f32)).sum().backward();
  for (const kiln::tensor* p : {&x, &w, &gamma, &beta}) {
    ASSERT_TRUE(p->grad().defined());
    EXPECT_EQ(p->grad().dtype(), kiln::scalar_type::f32);
    const auto g = p->grad().to_vector<float>();
    double norm = 0;
    for (float v : g) norm += double(v) * v;
    EXPECT_TRUE(std::isfinite(norm) && norm > 0);
  }
  // The same network in f32: the 16-bit one agrees to bf16's precision.
  {
    kiln::no_grad off;
    kiln::tensor r1 = kiln::tensor::zeros(dev(), {4}), r2 = kiln::tensor::ones(dev(), {4});
    ref = kiln::max_pool2d(kiln::relu(
        kiln::batch_norm(kiln::conv2d(x, w, {}, {.padding = {1, 1}}), gamma, beta, r1, r2, true)
            .output));
  }
  const auto a = y.to(kiln::scalar_type::f32).to_vector<float>(), b = ref.to_vector<float>();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 0.05 * (1 + std::fabs(b[i])));
}

// Where the device has a vendor library, its portable kernels are checked as well.
TEST_P(TensorConvTest, PortablePathMatchesDirectConvolution) {
  const kiln::tensor x = kiln::tensor::randn(dev(), {1, 2, 5, 5}, 3);
  kiln::conv2d(x, kiln::tensor::randn(dev(), {2, 2, 3, 3}, 4));
  const kiln::conv_path native = kiln::last_conv_path();
  EXPECT_NE(native, kiln::conv_path::none);
  if (native != kiln::conv_path::vendor)
    GTEST_SKIP() << dev().id() << " has no dnn extension: the portable path ran in every test";
  portable([&] {
    std::uint64_t seed = 500;
    for (const config& c : configs()) check_config<float>(dev(), c, seed += 10);
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::portable);
  });
}

// <conv(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)>.
TEST_P(TensorConvTest, BackwardsAreTheAdjointsOfTheForward) {
  const config c{{2, 4, 9, 8}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 0}, .groups = 2}};
  const dims d = dims_of(c);
  const auto x = kiln::tensor::randn(dev(), c.x, 11), w = kiln::tensor::randn(dev(), c.w, 12);
  const auto dy = kiln::tensor::randn(dev(), {d.n, d.k, d.p, d.q}, 13);
  const double a = (kiln::conv2d(x, w, {}, c.o) * dy).sum().item<float>();
  const double b = (x * kiln::conv2d_backward_data(dy, w, c.x, c.o)).sum().item<float>();
  const double e = (w * kiln::conv2d_backward_filter(x, dy, c.w, c.o)).sum().item<float>();
  EXPECT_NEAR(a, b, 1e-3 * (1 + std::fabs(a)));
  EXPECT_NEAR(a, e, 1e-3 * (1 + std::fabs(a)));
}

TEST_P(TensorConvTest, TakesUnbatchedStridedAndLazyInputs) {
  const host<float> x = random_host<float>({3, 6, 5}, 21), w = random_host<float>({2, 3, 3, 3}, 22);
  const kiln::tensor tw = upload(dev(), w);
  const kiln::tensor batched = kiln::conv2d(upload(dev(), x).unsqueeze(0), tw);
  const kiln::tensor unbatched = kiln::conv2d(upload(dev(), x), tw);
  EXPECT_EQ(unbatched.shape(), (shape_t{2, 4, 3}));
  EXPECT_EQ(unbatched.to_vector<float>(), batched.squeeze(0).to_vector<float>());
  // [1, 3, 5, 6] stored as W-major: a permuted view; and a lazy input.
  const host<float> xt = random_host<float>({1, 3, 5, 6}, 23);
  const kiln::tensor contiguous = upload(dev(), xt);
  const kiln::tensor permuted = contiguous.permute({0, 1, 3, 2}).contiguous().permute({0, 1, 3, 2});
  ASSERT_FALSE(permuted.is_contiguous());
  const auto want = kiln::conv2d(contiguous, tw).to_vector<float>();
  EXPECT_EQ(kiln::conv2d(permuted, tw).to_vector<float>(), want);
  EXPECT_EQ(kiln::conv2d(contiguous * 1.f, tw).to_vector<float>(), want);
}

TEST_P(TensorConvTest, BiasIsAddedLazilySoItFusesWithWhatFollows) {
  const auto x = kiln::tensor::randn(dev(), {1, 2, 4, 4}, 31);
  const auto y = kiln::conv2d(x, kiln::tensor::randn(dev(), {3, 2, 3, 3}, 32),
                              kiln::tensor::randn(dev(), {3}, 33));
  EXPECT_TRUE(y.is_lazy());
  kiln::relu(y).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);  // bias add and relu: one kernel
}

TEST_P(TensorConvTest, EmptyBatchGivesEmptyOutputsAndZeroFilterGradient) {
  const auto x = kiln::tensor::zeros(dev(), {0, 2, 5, 5});
  const auto w = kiln::tensor::randn(dev(), {3, 2, 3, 3}, 41);
  EXPECT_EQ(kiln::conv2d(x, w).shape(), (shape_t{0, 3, 3, 3}));
  const auto dy = kiln::tensor::zeros(dev(), {0, 3, 3, 3});
  EXPECT_EQ(kiln::conv2d_backward_data(dy, w, x.shape()).shape(), x.shape());
  const auto dw = kiln::conv2d_backward_filter(x, dy, w.shape()).to_vector<float>();
  EXPECT_EQ(dw, std::vector<float>(dw.size(), 0.f));
}

TEST_P(TensorConvTest, BadInputsGiveClearErrors) {
  const auto x = kiln::tensor::randn(dev(), {1, 4, 6, 6}, 51);
  const auto w = kiln::tensor::randn(dev(), {2, 4, 3, 3}, 52);
  using kiln::conv2d;
  EXPECT_THROW(
      {
        try {
          conv2d(x, kiln::tensor::randn(dev(), {2, 3, 3, 3}, 53));
        } catch (const kiln::shape_error& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("[1, 4, 6, 6]"));
          EXPECT_THAT(e.what(), ::testing::HasSubstr("[2, 3, 3, 3]"));
          throw;
        }
      },
      kiln::shape_error);
  EXPECT_THROW(conv2d(x, w, {}, {.groups = 3}), kiln::shape_error);
  EXPECT_THROW(conv2d(x.view({4, 6, 6, 1}).squeeze(3).unsqueeze(0).unsqueeze(0), w),
               kiln::shape_error);  // rank 5
  EXPECT_THROW(conv2d(x, kiln::tensor::randn(dev(), {2, 4, 7, 7}, 54)), kiln::shape_error);
  EXPECT_THROW(conv2d(x, w, kiln::tensor::zeros(dev(), {3})), kiln::shape_error);  // bias
  EXPECT_THROW(conv2d(x, w, {}, {.stride = {0, 1}}), kiln::invalid_argument);
  EXPECT_THROW(conv2d(x, w, {}, {.padding = {-1, 0}}), kiln::invalid_argument);
  EXPECT_THROW(conv2d(x, w, {}, {.dilation = {1, 0}}), kiln::invalid_argument);
  EXPECT_THROW(conv2d(x.to(kiln::scalar_type::i32), w.to(kiln::scalar_type::i32)),
               kiln::dtype_error);
  if (has_f64()) {
    EXPECT_THROW(conv2d(x, w.to(kiln::scalar_type::f64)), kiln::dtype_error);
  }
  EXPECT_THROW(conv2d(kiln::tensor{}, w), kiln::invalid_argument);
  EXPECT_THROW(kiln::conv2d_backward_data(kiln::tensor::zeros(dev(), {1, 2, 5, 4}), w, x.shape()),
               kiln::shape_error);
  EXPECT_THROW(kiln::conv2d_backward_filter(x, kiln::tensor::zeros(dev(), {1, 2, 3, 4}), w.shape()),
               kiln::shape_error);
  for (const kiln::device& other : kiln::device::all())
    if (!(other == dev())) {
      EXPECT_THROW(conv2d(x, kiln::tensor::randn(other, {2, 4, 3, 3}, 55)), kiln::device_mismatch);
      break;
    }
}

// kiln::automatic operands: conv2d is placed as class conv (threshold 0: the GPU when there is
// one) and gives what the fixed device gives; its result stays automatic.
TEST_P(TensorConvTest, AutomaticOperandsArePlacedAsConvolutions) {
  if (dev().info().type != kiln::device_type::cpu || !(dev() == kiln::device::host()))
    GTEST_SKIP() << "placement moves data from the host CPU; run once, on " << dev().id();
  const host<float> x = random_host<float>({2, 3, 6, 6}, 61),
                    w = random_host<float>({4, 3, 3, 3}, 62);
  const auto want = kiln::conv2d(upload(dev(), x), upload(dev(), w)).to_vector<float>();
  kiln::set_placement_threshold(kiln::op_class::conv, 0);
  const auto ax = kiln::tensor::from(kiln::automatic, x.v, x.shape);
  const auto aw = kiln::tensor::from(kiln::automatic, w.v, w.shape);
  const kiln::tensor y = kiln::conv2d(ax, aw);
  const kiln::placement_info p = kiln::last_placement();
  kiln::reset_placement_thresholds();
  EXPECT_EQ(p.cls, kiln::op_class::conv);
  EXPECT_EQ(p.work, 2.0 * 2 * 4 * 4 * 4 * 3 * 3 * 3);
  EXPECT_TRUE(y.is_automatic());
  EXPECT_EQ(y.get_device(), p.dev);
  const auto got = y.to_vector<float>();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4f) << i;
}

// The conv and pooling kernels compile for CUDA too (NVRTC, where the backend is compile-only).
TEST_P(TensorConvTest, ConvSourcesCompileEverywhere) {
  using k = kiln::detail::conv_kernel_kind;
  for (const auto t : {kiln::scalar_type::f32, kiln::scalar_type::f64})
    for (const k kind : {k::im2col, k::im2col_rows, k::col2im, k::max_pool, k::max_unpool,
                         k::avg_pool, k::avg_unpool})
      EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::conv_source(t, kind)));
}

}  // namespace
}  // namespace tensor_test
