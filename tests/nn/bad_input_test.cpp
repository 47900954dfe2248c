// Bad input at kiln::nn's entry points not covered by layers_test's and loss_test's BadInput:
// layer inputs of an integer dtype or of another device, negative and overflowing layer sizes,
// loss operands that do not match. Runs on every device. docs/testing.md lists what is covered
// where.
#include "bad_input.hpp"

#include <kiln/nn.hpp>

#include "conformance/backends.hpp"

namespace {

using bad_input::throws;
namespace nn = kiln::nn;
using kiln::tensor;

class NnBadInputTest : public conformance::DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(NnBadInputTest);

TEST_P(NnBadInputTest, LayerInputsOfTheWrongDtypeOrDevice) {
  nn::linear lin(dev(), 4, 2);
  EXPECT_TRUE(throws<kiln::dtype_error>(
      [&] {
        (void)lin(tensor::ones(dev(), {3, 4}, kiln::scalar_type::i32));
      },
      {"int32_t"}));
  std::optional<kiln::device> other;
  for (const kiln::device& d : kiln::device::all())
    if (!(d == dev())) other.emplace(d);
  if (!other) GTEST_SKIP() << "only " << dev().id() << " here: a foreign input needs two devices";
  EXPECT_TRUE(throws<kiln::device_mismatch>(
      [&] {
        (void)lin(tensor::ones(*other, {3, 4}));
      },
      {dev().id(), other->id()}));
}

TEST_P(NnBadInputTest, NegativeAndOverflowingLayerSizes) {
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { nn::linear l(dev(), -4, 2); }, {"linear"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { nn::linear l(dev(), 4, -2); }, {"linear"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { nn::conv2d c(dev(), 3, -1, 3); }, {"conv2d"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { nn::conv2d c(dev(), 3, 4, 0); }, {"conv2d"}));
  const std::int64_t big = std::int64_t(1) << 32;
  // A 2^32 x 2^32 weight has 2^64 elements: refused, not wrapped to an empty weight.
  EXPECT_TRUE(throws<kiln::shape_error>([&] { nn::linear l(dev(), big, big); },
                                        {"[4294967296, 4294967296]", "overflow"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { nn::batch_norm2d b(dev(), 0); }, {"batch_norm2d"}));
}

TEST_P(NnBadInputTest, LossOperandsThatDoNotMatch) {
  const tensor a = tensor::ones(dev(), {3, 4});
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        (void)nn::mse_loss(a, tensor::ones(dev(), {4, 3}));
      },
      {"[3, 4]", "[4, 3]"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)nn::mse_loss(a, a, "total"); }, {"\"total\""}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)nn::cross_entropy(tensor(), tensor::zeros(dev(), {3}, kiln::scalar_type::i64)); },
      {"undefined"}));
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        (void)nn::cross_entropy(tensor::ones(dev(), {4}),
                                tensor::zeros(dev(), {4}, kiln::scalar_type::i64));
      },
      {"[4]"}));
}

}  // namespace
