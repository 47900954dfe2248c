// Gradients of matmul, conv2d, pooling and batch_norm against finite differences.
#include <kiln/tensor/conv.hpp>
#include <kiln/tensor/normalization.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

class AutogradNnTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(AutogradNnTest);

using v = std::vector<tensor>;

TEST_P(AutogradNnTest, Matmul) {
  KILN_NEED_F64();
  const auto mm = [](const v& x) { return kiln::matmul(x[0], x[1]); };
  EXPECT_TRUE(gradcheck(dev(), mm, {random_input({3, 4}, 1), random_input({4, 2}, 2)}));
  EXPECT_TRUE(gradcheck(dev(), mm, {random_input({2, 3, 4}, 3), random_input({4, 2}, 4)}));
  EXPECT_TRUE(gradcheck(dev(), mm, {random_input({2, 1, 3, 4}, 5), random_input({3, 4, 2}, 6)}));
  EXPECT_TRUE(gradcheck(dev(), mm, {random_input({4}, 7), random_input({4, 3}, 8)}));
  EXPECT_TRUE(gradcheck(dev(), mm, {random_input({3, 4}, 9), random_input({4}, 10)}));
  EXPECT_TRUE(gradcheck(dev(), mm, {random_input({4}, 11), random_input({4}, 12)}));
  // A transposed operand (the layout linear layers use).
  EXPECT_TRUE(gradcheck(dev(), [](const v& x) { return kiln::matmul(x[0], x[1].t()); },
                        {random_input({3, 4}, 13), random_input({2, 4}, 14)}));
  // Batched rows against one transposed matrix: the weight's gradient is one GEMM over all rows.
  EXPECT_TRUE(gradcheck(dev(), [](const v& x) { return kiln::matmul(x[0], x[1].t()); },
                        {random_input({2, 3, 4}, 15), random_input({5, 4}, 16)}));
  EXPECT_TRUE(gradcheck(dev(), [](const v& x) { return kiln::matmul(x[0], x[1].t()); },
                        {random_input({4}, 17), random_input({1, 4}, 18)}));
}

TEST_P(AutogradNnTest, Conv2d) {
  KILN_NEED_F64();
  for (const kiln::conv2d_options o :
       {kiln::conv2d_options{}, kiln::conv2d_options{.stride = {2, 1}, .padding = {1, 1}},
        kiln::conv2d_options{.padding = {1, 0}, .dilation = {1, 2}},
        kiln::conv2d_options{.groups = 2}}) {
    SCOPED_TRACE("stride " + std::to_string(o.stride[0]) + " groups " + std::to_string(o.groups));
    const std::int64_t cg = 4 / o.groups;
    EXPECT_TRUE(gradcheck(
        dev(), [o](const v& x) { return kiln::conv2d(x[0], x[1], x[2], o); },
        {random_input({2, 4, 5, 5}, 1), random_input({2, cg, 3, 3}, 2), random_input({2}, 3)},
        1e-5));
  }
  // Unbatched input.
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::conv2d(x[0], x[1]); },
      {random_input({1, 4, 4}, 4), random_input({3, 1, 2, 2}, 5)}, 1e-5));
}

TEST_P(AutogradNnTest, Pooling) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({2, 2, 6, 6}, 1)};
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return kiln::max_pool2d(x[0], {.kernel = {2, 2}});
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return kiln::max_pool2d(x[0], {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}});
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return kiln::avg_pool2d(
            x[0],
            {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}, .count_include_pad = false});
      },
      ins));
  EXPECT_TRUE(gradcheck(
      dev(),
      [](const v& x) {
        return kiln::max_pool2d_with_indices(x[0], {.kernel = {2, 3}}).values;
      },
      ins));
}

TEST_P(AutogradNnTest, BatchNormTrainingAndInference) {
  KILN_NEED_F64();
  const std::vector<input> ins{random_input({3, 2, 2, 2}, 1), random_input({2}, 2, 0.5, 2),
                               random_input({2}, 3)};
  EXPECT_TRUE(gradcheck(
      dev(), [](const v& x) { return kiln::batch_norm(x[0], x[1], x[2], {}, {}, true).output; },
      ins, 1e-5));
  const kiln::device d = dev();
  EXPECT_TRUE(gradcheck(
      dev(),
      [d](const v& x) {
        const auto rm = tensor::from(d, std::vector<double>{0.1, -0.2});
        const auto rv = tensor::from(d, std::vector<double>{1.5, 0.7});
        return kiln::batch_norm(x[0], x[1], x[2], rm, rv, false).output;
      },
      ins, 1e-5));
}

}  // namespace
}  // namespace autograd_test
