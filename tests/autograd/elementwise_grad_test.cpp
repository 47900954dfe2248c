// Gradients of the elementwise operations (broadcasting included) against finite differences.
#include <cmath>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

class AutogradElementwiseTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(AutogradElementwiseTest);

using v = std::vector<tensor>;

TEST_P(AutogradElementwiseTest, BinaryWithBroadcasting) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({2, 3}, 1), random_input({3}, 2, 0.5, 2)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0] + x[1]; }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0] - x[1]; }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0] * x[1]; }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0] / x[1]; }, ins));
  const std::vector<input> col{random_input({2, 1}, 3), random_input({1, 3}, 4)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0] * x[1] + x[0]; }, col));
}

TEST_P(AutogradElementwiseTest, ScalarsAndTheSameInputTwice) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({5}, 5)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return 3.0 * x[0] * x[0] - x[0] / 2.0 + 1.0; }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return 2.0 / x[0] - (1.0 - x[0]); }, ins));
}

TEST_P(AutogradElementwiseTest, Unary) {
  KILN_NEED_F64();
  const std::vector<input> any{random_input({7}, 6)};
  const std::vector<input> positive{random_input({7}, 7, 0.2, 3)};
  using f = tensor (*)(const tensor&);
  for (auto [name, fn] : std::vector<std::pair<const char*, f>>{{"neg", kiln::neg},
                                                                {"abs", kiln::abs},
                                                                {"exp", kiln::exp},
                                                                {"sin", kiln::sin},
                                                                {"cos", kiln::cos},
                                                                {"tanh", kiln::tanh},
                                                                {"relu", kiln::relu},
                                                                {"sigmoid", kiln::sigmoid},
                                                                {"square", kiln::square},
                                                                {"floor", kiln::floor}}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(gradcheck(
        dev(), [fn](const v& x) { return fn(x[0]); }, any));
  }
  for (auto [name, fn] : std::vector<std::pair<const char*, f>>{
           {"sqrt", kiln::sqrt}, {"log", kiln::log}, {"rsqrt", kiln::rsqrt}}) {
    SCOPED_TRACE(name);
    EXPECT_TRUE(gradcheck(
        dev(), [fn](const v& x) { return fn(x[0]); }, positive));
  }
  const std::vector<input> small{random_input({7}, 8, -1.2, 1.2)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::tan(x[0]); }, small));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::gelu(x[0]); }, any));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::gelu(x[0], "tanh"); }, any));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::clamp(x[0], -1.0, 1.0); }, any));
}

TEST_P(AutogradElementwiseTest, PowMinimumMaximumWhere) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({2, 3}, 9, 0.3, 2), random_input({3}, 10, -2, 2)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::pow(x[0], x[1]); }, ins));
  EXPECT_TRUE(gradcheck(dev(), [](const v& x) { return kiln::pow(x[0], 3.0); }, {ins[0]}));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::minimum(x[0], x[1]); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::maximum(x[0], x[1]); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::where(x[1] > 0.0, x[0], x[1] * 2.0); }, ins));
}

TEST_P(AutogradElementwiseTest, ConversionsKeepTheInputsDtype) {
  KILN_NEED_F64();
  auto x = tensor::from(dev(), std::vector<float>{1.5f, -2.f, 3.f}).requires_grad_();
  (x.to(kiln::scalar_type::f64) * 2.0).sum().backward();  // f64 work on an f32 leaf
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), kiln::scalar_type::f32);
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 2, 2}));
  auto y = tensor::from(dev(), std::vector<float>{1.f, 2.f}).requires_grad_();
  (y * 3.0).sum().backward();  // f32 * double promotes to f64 (C++'s rule)
  EXPECT_EQ(y.grad().dtype(), kiln::scalar_type::f32);
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{3, 3}));
}

TEST_P(AutogradElementwiseTest, FloatChainsMatchTheDoubleGradient) {
  // The f32 path on every device (no fp64 needed): d/dx sum(tanh(x) * x) = tanh' x + tanh.
  const input in = random_input({64}, 11);
  std::vector<float> xf(in.v.begin(), in.v.end());
  auto x = tensor::from(dev(), xf).requires_grad_();
  (kiln::tanh(x) * x).sum().backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  for (std::size_t k = 0; k < g.size(); ++k) {
    const double t = std::tanh(double(xf[k]));
    EXPECT_NEAR(g[k], (1 - t * t) * xf[k] + t, 1e-5) << k;
  }
}

}  // namespace
}  // namespace autograd_test
