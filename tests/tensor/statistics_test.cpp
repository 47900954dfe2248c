// What is built on reductions: var, std, norm, softmax and log_softmax, against double
// precision host references; softmax stays finite for large logits.
#include "tensor/reduce_fixture.hpp"

namespace tensor_test {
namespace {

class StatisticsTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(StatisticsTest);

double mean_of(const std::vector<double>& v) { return sum_of(v) / double(v.size()); }
double var_of(const std::vector<double>& v, double correction) {
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / std::max(double(v.size()) - correction, 0.0);
}

TEST_P(StatisticsTest, VarAndStd) {
  const host<float> h = random_host<float>({4, 5, 6}, 21);
  const kiln::tensor x = upload(dev(), h);
  for (int correction : {0, 1})
    for (const std::vector<int>& axes : std::vector<std::vector<int>>{{1}, {0, 2}, {}}) {
      const rows_of r = split_rows(doubles(h), h.shape, axes, false);
      const std::vector<double> want = fold_rows(r, [&](auto& v) { return var_of(v, correction); });
      std::vector<double> sd;
      for (double w : want) sd.push_back(std::sqrt(w));
      const std::vector<double> one(want.size(), 16.0);  // |x| <= 4: var <= 16
      EXPECT_TRUE(near_rows(read_doubles(x.var(axes, correction)), want, one, 2e-6));
      EXPECT_TRUE(near_rows(read_doubles(x.std(axes, correction)), sd, one, 2e-6));
    }
  // Integers give double; keepdim keeps the axis.
  const host<std::int16_t> hi = random_host<std::int16_t>({3, 7}, 22);
  const kiln::tensor v = upload(dev(), hi).var(1, 1, true);
  EXPECT_EQ(v.dtype(), kiln::scalar_type::f64);
  EXPECT_EQ(v.shape(), (shape_t{3, 1}));
  const rows_of r = split_rows(doubles(hi), hi.shape, {1}, true);
  EXPECT_TRUE(near_rows(read_doubles(v), fold_rows(r, [](auto& w) { return var_of(w, 1); }),
                        std::vector<double>(3, 1.0), 1e-12));
  // One element with correction 1: 0 / 0.
  const kiln::tensor one = kiln::tensor::full(dev(), {1}, kiln::scalar_type::f32, 2.f);
  EXPECT_TRUE(std::isnan(one.var().item<float>()));
}

TEST_P(StatisticsTest, Norms) {
  const host<double> h = random_host<double>({6, 5}, 23);
  const kiln::tensor x = upload(dev(), h);
  const rows_of r = split_rows(doubles(h), h.shape, {1}, false);
  const auto norm = [&](double p) {
    return fold_rows(r, [&](auto& v) {
      double s = 0, m = std::isinf(p) && p < 0 ? INFINITY : 0;
      for (double e : v) {
        if (p == 0)
          s += e != 0;
        else if (std::isinf(p))
          m = p > 0 ? std::max(m, std::fabs(e)) : std::min(m, std::fabs(e));
        else
          s += std::pow(std::fabs(e), p);
      }
      return std::isinf(p) ? m : p == 0 ? s : std::pow(s, 1 / p);
    });
  };
  const std::vector<double> scale(6, 1.0);
  for (double p : {2.0, 1.0, 3.0, 0.0, double(INFINITY), -double(INFINITY)}) {
    SCOPED_TRACE(p);
    EXPECT_TRUE(near_rows(read_doubles(x.norm(p, 1)), norm(p), scale, 1e-12));
  }
  const host<std::int32_t> hi = random_host<std::int32_t>({10}, 24);
  double s = 0;
  for (auto e : hi.v) s += double(e) * e;
  EXPECT_NEAR(upload(dev(), hi).norm().item<double>(), std::sqrt(s), 1e-9);
}

// softmax along each axis, compared with exp(x - max) / sum in double.
TEST_P(StatisticsTest, SoftmaxAndLogSoftmax) {
  const host<float> h = random_host<float>({3, 4, 70}, 25);
  const kiln::tensor x = upload(dev(), h);
  for (int dim : {0, 1, 2, -1}) {
    SCOPED_TRACE(dim);
    const int d = dim < 0 ? dim + 3 : dim;
    host<float> sm{h.shape, {}}, lsm{h.shape, {}};
    for (std::int64_t i = 0; i < numel(h.shape); ++i) {
      shape_t c = coords(h.shape, i);
      double m = -INFINITY, s = 0;
      for (c[std::size_t(d)] = 0; c[std::size_t(d)] < h.shape[std::size_t(d)]; ++c[std::size_t(d)])
        m = std::max(m, double(h.v[std::size_t(flat(h.shape, c))]));
      for (c[std::size_t(d)] = 0; c[std::size_t(d)] < h.shape[std::size_t(d)]; ++c[std::size_t(d)])
        s += std::exp(double(h.v[std::size_t(flat(h.shape, c))]) - m);
      const double v = h.v[std::size_t(i)];
      sm.v.push_back(float(std::exp(v - m) / s));
      lsm.v.push_back(float(v - m - std::log(s)));
    }
    EXPECT_TRUE(matches(x.softmax(dim), sm, 2e-6));
    EXPECT_TRUE(matches(kiln::log_softmax(x, dim), lsm, 2e-6));
  }
  // Large logits: no overflow (exp(1000) would be inf without the shift).
  const kiln::tensor big =
      kiln::tensor::from(dev(), std::vector<float>{1000, 999, -1000, 0}, {1, 4});
  const std::vector<float> p = big.softmax(1).to_vector<float>();
  EXPECT_NEAR(p[0], 1 / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(p[1], std::exp(-1.0) / (1 + std::exp(-1.0)), 1e-6);
  EXPECT_EQ(p[2], 0.f);
  const std::vector<float> lp = big.log_softmax(-1).to_vector<float>();
  EXPECT_NEAR(lp[2], -2000 - std::log(1 + std::exp(-1.0)), 1e-3);
  for (float e : lp) EXPECT_TRUE(std::isfinite(e));
}

// Row lengths that take each form of the row kernel: one item per row, items of a group
// keeping their elements in registers, and items re-reading long rows between the passes.
TEST_P(StatisticsTest, SoftmaxAndRowNormalisationOverRowLengths) {
  for (const shape_t& shape :
       {shape_t{6, 30}, shape_t{5, 300}, shape_t{3, 2000}, shape_t{2, 9000}}) {
    SCOPED_TRACE(kiln::to_string(shape));
    const host<float> h = random_host<float>(shape, 26);
    const kiln::tensor x = upload(dev(), h);
    const std::int64_t n = shape[1];
    std::vector<double> sm, nm;
    for (std::int64_t i = 0; i < shape[0]; ++i) {
      const float* row = h.v.data() + i * n;
      double mx = -INFINITY, s = 0, mean = 0, var = 0;
      for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, double(row[j]));
      for (std::int64_t j = 0; j < n; ++j) s += std::exp(row[j] - mx), mean += row[j];
      mean /= double(n);
      for (std::int64_t j = 0; j < n; ++j) var += (row[j] - mean) * (row[j] - mean);
      var /= double(n);
      for (std::int64_t j = 0; j < n; ++j) {
        sm.push_back(std::exp(row[j] - mx) / s);
        nm.push_back((row[j] - mean) / std::sqrt(var + 1e-5));
      }
    }
    const std::vector<double> one(sm.size(), 1.0);
    EXPECT_TRUE(near_rows(read_doubles(x.softmax(1)), sm, one, 1e-6));
    EXPECT_EQ(stats().kernel_launches, 1u);
    const kiln::tensor norm = (x - x.mean(1, true)) / kiln::sqrt(x.var(1, 0, true) + 1e-5f);
    EXPECT_TRUE(near_rows(read_doubles(norm), nm, one, 2e-5));
    EXPECT_EQ(stats().kernel_launches, 1u);
  }
}

}  // namespace
}  // namespace tensor_test
