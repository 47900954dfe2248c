// Gradients of reductions, softmax and views against finite differences.
#include <cmath>
#include <limits>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

class AutogradReduceTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(AutogradReduceTest);

using v = std::vector<tensor>;

TEST_P(AutogradReduceTest, SumMeanOverAxes) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({2, 3, 4}, 1)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].sum(); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].sum(1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return x[0].sum({0, 2}, true);
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].mean(-1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return (x[0] * x[0]).mean({0, 1}, true);
      },
      ins));
}

TEST_P(AutogradReduceTest, MaxMinVarStdNorm) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({3, 4}, 2)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].max(1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].min(); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].var(1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].std(0, 0, true); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].norm(2, 1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].norm(1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].norm(3, 0); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].norm(std::numeric_limits<double>::infinity(), 1); },
      ins));
}

TEST_P(AutogradReduceTest, MaxSplitsTiesEvenly) {
  auto x = tensor::from(dev(), std::vector<float>{1, 3, 3, 2}).requires_grad_();
  x.max().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{0, 0.5f, 0.5f, 0}));
}

TEST_P(AutogradReduceTest, SoftmaxAndLogSoftmax) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({3, 5}, 3, -4, 4)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].softmax(1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].log_softmax(-1); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].softmax(0); }, ins));
}

TEST_P(AutogradReduceTest, Views) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({2, 3, 4}, 4)};
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return x[0].view({6, 4}) * 2.0;
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return x[0].reshape({4, -1});
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return x[0].permute({2, 0, 1}) * 1.5;
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].transpose(0, 2).contiguous(); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].slice(2, 1, 4, 2); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].slice(0, 1, 2).squeeze(0); }, ins));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].unsqueeze(1).sum(2); }, ins));
  const std::vector<input> col{random_input({3, 1}, 5)};
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return x[0].expand({2, 3, 4});
      },
      col));
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return x[0].t(); }, col));
}

}  // namespace
}  // namespace autograd_test
