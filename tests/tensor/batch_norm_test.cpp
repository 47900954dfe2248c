// batch_norm (training and inference, running statistics) against a double-precision host
// model, its backward against finite differences of that model, copy_ (the in-place write the
// running statistics use), and the errors of both.
#include <cmath>
#include <kiln/tensor/inplace.hpp>
#include <kiln/tensor/normalization.hpp>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class TensorBatchNormTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorBatchNormTest);

// The host model: x [N, C, S] (S: the spatial elements, flattened), per-channel statistics.
struct model {
  std::int64_t n, c, s;
  std::vector<double> x, w, b;

  double at(std::int64_t i, std::int64_t ch, std::int64_t k) const {
    return x[std::size_t((i * c + ch) * s + k)];
  }
  // Mean and biased variance of channel ch.
  std::pair<double, double> stats(std::int64_t ch) const {
    double m = 0, v = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < s; ++k) m += at(i, ch, k);
    m /= double(n * s);
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t k = 0; k < s; ++k) v += (at(i, ch, k) - m) * (at(i, ch, k) - m);
    return {m, v / double(n * s)};
  }
  std::vector<double> forward(double eps) const {
    std::vector<double> y(x.size());
    for (std::int64_t ch = 0; ch < c; ++ch) {
      const auto [m, v] = stats(ch);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t k = 0; k < s; ++k)
          y[std::size_t((i * c + ch) * s + k)] =
              (at(i, ch, k) - m) / std::sqrt(v + eps) * w[std::size_t(ch)] + b[std::size_t(ch)];
    }
    return y;
  }
};

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& want,
                                 double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " elements, expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(double(got[i]) - want[i]) <= tol * (1 + std::fabs(want[i]))))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

TEST_P(TensorBatchNormTest, TrainingNormalisesByBatchStatisticsAndUpdatesRunningOnes) {
  const shape_t shape{3, 4, 5, 2};
  const host<float> x = random_host<float>(shape, 11), w = random_host<float>({4}, 12);
  const host<float> b = random_host<float>({4}, 13), rm0 = random_host<float>({4}, 14);
  std::vector<float> rv0 = random_host<float>({4}, 15).v;
  for (float& v : rv0) v = std::fabs(v) + 0.5f;
  const model m{3, 4, 10, to_double(x.v), to_double(w.v), to_double(b.v)};
  const auto rm = kiln::tensor::from(dev(), rm0.v), rv = kiln::tensor::from(dev(), rv0);
  const double eps = 1e-5, momentum = 0.2;
  const kiln::batch_norm_result r = kiln::batch_norm(upload(dev(), x), upload(dev(), w),
                                                     upload(dev(), b), rm, rv, true, momentum, eps);
  EXPECT_TRUE(close(r.output.to_vector<float>(), m.forward(eps), 2e-5));
  std::vector<double> mean, invstd, want_rm, want_rv;
  for (std::int64_t ch = 0; ch < 4; ++ch) {
    const auto [mu, var] = m.stats(ch);
    mean.push_back(mu);
    invstd.push_back(1 / std::sqrt(var + eps));
    want_rm.push_back((1 - momentum) * rm0.v[std::size_t(ch)] + momentum * mu);
    want_rv.push_back((1 - momentum) * rv0[std::size_t(ch)] + momentum * var * 30 / 29);
  }
  EXPECT_TRUE(close(r.mean.to_vector<float>(), mean, 1e-5));
  EXPECT_TRUE(close(r.invstd.to_vector<float>(), invstd, 1e-5));
  EXPECT_TRUE(close(rm.to_vector<float>(), want_rm, 1e-5)) << "running mean";
  EXPECT_TRUE(close(rv.to_vector<float>(), want_rv, 1e-5)) << "running var (unbiased)";
}

TEST_P(TensorBatchNormTest, InferenceUsesRunningStatisticsAndNoAffineIsAllowed) {
  const host<float> x = random_host<float>({2, 3, 4}, 21);
  const std::vector<float> rm{0.5f, -1.f, 2.f}, rv{1.5f, 0.25f, 4.f};
  const kiln::batch_norm_result r =
      kiln::batch_norm(upload(dev(), x), {}, {}, kiln::tensor::from(dev(), rm),
                       kiln::tensor::from(dev(), rv), false);
  std::vector<double> want;
  for (std::size_t i = 0; i < x.v.size(); ++i) {
    const std::size_t ch = (i / 4) % 3;
    want.push_back((x.v[i] - rm[ch]) / std::sqrt(double(rv[ch]) + 1e-5));
  }
  EXPECT_TRUE(close(r.output.to_vector<float>(), want, 1e-5));
  EXPECT_EQ(kiln::tensor::from(dev(), rm).to_vector<float>(), rm);  // not updated
}

// The backward against central differences of the host model's loss sum(y * dy), in double.
TEST_P(TensorBatchNormTest, BackwardMatchesFiniteDifferences) {
  if (!dev().supports(kiln::feature::fp64)) GTEST_SKIP() << dev().id() << " has no fp64";
  const shape_t shape{2, 3, 2, 3};
  const host<double> x = random_host<double>(shape, 31), w = random_host<double>({3}, 32);
  const host<double> b = random_host<double>({3}, 33), dy = random_host<double>(shape, 34);
  const double eps = 1e-3;
  model m{2, 3, 6, x.v, w.v, b.v};
  const auto loss = [&](const model& mm) {
    const std::vector<double> y = mm.forward(eps);
    double l = 0;
    for (std::size_t i = 0; i < y.size(); ++i) l += y[i] * dy.v[i];
    return l;
  };
  const auto diff = [&](std::vector<double>& v, std::size_t i) {
    const double h = 1e-5, keep = v[i];
    v[i] = keep + h;
    const double up = loss(m);
    v[i] = keep - h;
    const double down = loss(m);
    v[i] = keep;
    return (up - down) / (2 * h);
  };
  const auto tx = upload(dev(), x), tw = upload(dev(), w);
  const kiln::batch_norm_result r =
      kiln::batch_norm(tx, tw, upload(dev(), b), {}, {}, true, 0.1, eps);
  const kiln::batch_norm_grads g =
      kiln::batch_norm_backward(upload(dev(), dy), tx, tw, r.mean, r.invstd, true);
  const auto gx = g.input.to_vector<double>(), gw = g.weight.to_vector<double>();
  const auto gb = g.bias.to_vector<double>();
  for (std::size_t i = 0; i < m.x.size(); ++i) EXPECT_NEAR(gx[i], diff(m.x, i), 1e-6) << i;
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(gw[i], diff(m.w, i), 1e-6) << i;
    EXPECT_NEAR(gb[i], diff(m.b, i), 1e-6) << i;
  }
  // Inference: the statistics are constants, dx = dy w invstd.
  const kiln::batch_norm_grads e =
      kiln::batch_norm_backward(upload(dev(), dy), tx, tw, r.mean, r.invstd, false);
  const auto ex = e.input.to_vector<double>(), inv = r.invstd.to_vector<double>();
  for (std::size_t i = 0; i < ex.size(); ++i) {
    const std::size_t ch = (i / 6) % 3;
    EXPECT_NEAR(ex[i], dy.v[i] * w.v[ch] * inv[ch], 1e-12);
  }
}

TEST_P(TensorBatchNormTest, BadInputsGiveClearErrors) {
  const auto x = kiln::tensor::randn(dev(), {2, 3, 4}, 41);
  const auto c3 = kiln::tensor::ones(dev(), {3});
  EXPECT_THROW(kiln::batch_norm(x.view({24}), {}, {}, {}, {}, true), kiln::shape_error);
  EXPECT_THROW(kiln::batch_norm(x, kiln::tensor::ones(dev(), {4}), {}, {}, {}, true),
               kiln::shape_error);
  EXPECT_THROW(kiln::batch_norm(x, {}, {}, {}, {}, false), kiln::invalid_argument);
  EXPECT_THROW(kiln::batch_norm(x, {}, {}, c3, c3, true, 0.1, 0), kiln::invalid_argument);
  EXPECT_THROW(kiln::batch_norm(kiln::tensor::randn(dev(), {1, 3}, 42), {}, {}, {}, {}, true),
               kiln::shape_error);  // one value per channel
  EXPECT_THROW(kiln::batch_norm(x.to(kiln::scalar_type::i32), {}, {}, {}, {}, true),
               kiln::dtype_error);
  EXPECT_THROW(kiln::batch_norm(x, c3.to(kiln::scalar_type::i32), {}, {}, {}, true),
               kiln::dtype_error);
  EXPECT_THROW(kiln::batch_norm_backward(kiln::tensor::ones(dev(), {2, 3, 5}), x, {}, c3, c3, true),
               kiln::shape_error);
}

class TensorInplaceTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorInplaceTest);

TEST_P(TensorInplaceTest, CopyWritesIntoTheStorageAllHandlesShare) {
  const host<float> h = random_host<float>({2, 3}, 51);
  const auto dst = upload(dev(), h);
  const auto view = dst.slice(0, 1, 2);  // shares storage
  const auto src = kiln::tensor::from(dev(), std::vector<double>{1, 2, 3});
  kiln::copy_(dst, src);  // broadcast over rows, converted to float
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(view.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  kiln::copy_(dst, dst * 2.f + 1.f);  // reads itself
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{3, 5, 7, 3, 5, 7}));
  kiln::copy_(dst.slice(0, 0, 1), dst.slice(0, 1, 2) - 1.f);  // a view of itself
  EXPECT_EQ(dst.to_vector<float>(), (std::vector<float>{2, 4, 6, 3, 5, 7}));
  kiln::copy_(dst, 0.5f);
  EXPECT_EQ(dst.to_vector<float>(), std::vector<float>(6, 0.5f));
}

TEST_P(TensorInplaceTest, BadCopiesGiveClearErrors) {
  const auto dst = kiln::tensor::zeros(dev(), {2, 3});
  EXPECT_THROW(kiln::copy_(dst, kiln::tensor::zeros(dev(), {2})), kiln::shape_error);
  EXPECT_THROW(kiln::copy_(dst.t(), kiln::tensor::zeros(dev(), {3, 2})), kiln::invalid_argument);
  EXPECT_THROW(kiln::copy_(kiln::tensor{}, dst), kiln::invalid_argument);
  for (const kiln::device& other : kiln::device::all())
    if (!(other == dev())) {
      EXPECT_THROW(kiln::copy_(dst, kiln::tensor::zeros(other, {2, 3})), kiln::device_mismatch);
      break;
    }
}

}  // namespace
}  // namespace tensor_test
