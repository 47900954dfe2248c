// Losses: values against hand-computed cases, gradients against finite differences, stability
// for large logits, and bad input.
#include <kiln/nn.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;

class NnLossTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(NnLossTest);

using v = std::vector<tensor>;

TEST_P(NnLossTest, HandComputedValues) {
  const auto t = [&](std::vector<float> x, kiln::shape_t s) { return tensor::from(dev(), x, s); };
  // mse: ((1-0)^2 + (2-4)^2) / 2 = 2.5
  EXPECT_FLOAT_EQ(nn::mse_loss(t({1, 2}, {2}), t({0, 4}, {2})).item<float>(), 2.5f);
  EXPECT_FLOAT_EQ(nn::mse_loss(t({1, 2}, {2}), t({0, 4}, {2}), "sum").item<float>(), 5.f);
  // cross-entropy of logits [0, ln 3] with label 1: -log(3 / 4) = 0.2876821
  const tensor logits = t({0.f, std::log(3.f), 0.f, 0.f}, {2, 2});
  const tensor labels = tensor::from(dev(), std::vector<std::int64_t>{1, 0});
  const std::vector<float> per = nn::cross_entropy(logits, labels, "none").to_vector<float>();
  EXPECT_NEAR(per[0], -std::log(0.75), 1e-6);
  EXPECT_NEAR(per[1], std::log(2.0), 1e-6);
  EXPECT_NEAR(nn::cross_entropy(logits, labels).item<float>(),
              (-std::log(0.75) + std::log(2.0)) / 2, 1e-6);
  // int32 labels work too
  EXPECT_NEAR(nn::cross_entropy(logits, labels.to(kiln::scalar_type::i32), "sum").item<float>(),
              -std::log(0.75) + std::log(2.0), 1e-6);
  // bce with logits: x = 0, t = 1: log 2; x = 2, t = 0: log(1 + e^2)
  EXPECT_NEAR(
      nn::binary_cross_entropy_with_logits(t({0, 2}, {2}), t({1, 0}, {2}), "sum").item<float>(),
      std::log(2.0) + std::log(1 + std::exp(2.0)), 1e-5);
}

TEST_P(NnLossTest, CrossEntropyIsStableForLargeLogits) {
  const tensor logits = tensor::from(dev(), std::vector<float>{1000, -1000, 0, 500}, {2, 2});
  const tensor labels = tensor::from(dev(), std::vector<std::int64_t>{1, 1});
  auto x = logits.detach().requires_grad_();
  const tensor loss = nn::cross_entropy(x, labels, "sum");
  EXPECT_NEAR(loss.item<float>(), 2000 + 0, 1e-2);  // row 0: 2000; row 1: ~0
  loss.backward();
  const std::vector<float> g = x.grad().to_vector<float>();
  EXPECT_NEAR(g[0], 1, 1e-6);
  EXPECT_NEAR(g[1], -1, 1e-6);
  for (float e : g) EXPECT_TRUE(std::isfinite(e));
  const tensor huge = tensor::from(dev(), std::vector<float>{-1000, 1000}, {2});
  EXPECT_NEAR(
      nn::binary_cross_entropy_with_logits(huge, tensor::ones(dev(), {2}), "sum").item<float>(),
      1000, 1e-2);
}

TEST_P(NnLossTest, Gradients) {
  KILN_NEED_F64();
  const kiln::device d = dev();
  const tensor labels = tensor::from(d, std::vector<std::int64_t>{2, 0, 1, 2});
  for (const char* r : {"mean", "sum", "none"}) {
    SCOPED_TRACE(r);
    EXPECT_TRUE(gradcheck(d, [&](const v& x) { return nn::cross_entropy(x[0], labels, r); },
                          {random_input({4, 3}, 1, -3, 3)}));
  }
  EXPECT_TRUE(gradcheck(d, [](const v& x) { return nn::mse_loss(x[0], x[1]); },
                        {random_input({3, 2}, 2), random_input({3, 2}, 3)}));
  EXPECT_TRUE(gradcheck(d,
                        [](const v& x) { return nn::binary_cross_entropy_with_logits(x[0], x[1]); },
                        {random_input({5}, 4), random_input({5}, 5, 0.05, 1)}));
}

TEST_P(NnLossTest, BadInput) {
  const tensor logits = tensor::randn(dev(), {3, 4}, 1);
  const auto labels = [&](std::vector<std::int64_t> l) { return tensor::from(dev(), l); };
  // On accelerators the label check is reported by a later call (within two): three calls.
  const auto bad_then_good = [&](std::vector<std::int64_t> bad) {
    nn::cross_entropy(logits, labels(bad));
    for (int i = 0; i < 2; ++i) nn::cross_entropy(logits, labels({0, 1, 2}));
  };
  EXPECT_THROW(bad_then_good({0, 4, 1}), kiln::invalid_argument);
  EXPECT_THROW(bad_then_good({0, -1, 1}), kiln::invalid_argument);
  if (dev().info().type == kiln::device_type::cpu) {  // at once
    EXPECT_THROW(nn::cross_entropy(logits, labels({0, 4, 1})), kiln::invalid_argument);
  }
  for (int i = 0; i < 3; ++i)  // nothing left over: good labels never throw
    EXPECT_NO_THROW(nn::cross_entropy(logits, labels({0, 1, 2})));
  EXPECT_THROW(nn::cross_entropy(logits, labels({0, 1})), kiln::shape_error);
  EXPECT_THROW(nn::cross_entropy(logits, tensor::zeros(dev(), {3})), kiln::dtype_error);
  EXPECT_THROW(nn::cross_entropy(logits, labels({0, 1, 2}), "avg"), kiln::invalid_argument);
  EXPECT_THROW(nn::mse_loss(logits, tensor()), kiln::invalid_argument);
  EXPECT_THROW(nn::binary_cross_entropy_with_logits(logits, tensor::zeros(dev(), {3})),
               kiln::shape_error);
}

}  // namespace
}  // namespace autograd_test
