// Bad input at kiln::tensor's entry points not covered by errors_test.cpp and the per-operation
// tests: every method of an undefined tensor, shapes whose element or byte counts overflow
// int64, arange/linspace ranges too long to count, reduction and softmax axes out of range or
// repeated. Runs on every device. docs/testing.md lists what is covered where.
#include "bad_input.hpp"

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using bad_input::throws;

class TensorBadInputTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorBadInputTest);

// Every method of a default-constructed tensor: kiln::invalid_argument saying it is undefined.
TEST_P(TensorBadInputTest, UndefinedTensor) {
  const kiln::tensor u;
  const kiln::tensor a = kiln::tensor::ones(dev(), {2, 3});
  const std::initializer_list<std::string> undefined{"undefined"};
  EXPECT_FALSE(u.defined());
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.numel(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.dim(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.shape(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.dtype(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.get_device(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.eval(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.to_vector<float>(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.item<float>(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.view({1}); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.reshape({1}); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.contiguous(); }, undefined));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)u.to(kiln::scalar_type::f64); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.sum(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.softmax(0); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::exp(u); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)(a * u); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)(u + 1.0f); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::matmul(a, u); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)u.detach(); }, undefined));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { u.backward(); }, undefined));
}

// Element counts past int64 must not wrap to a small (or zero-byte) allocation.
TEST_P(TensorBadInputTest, ShapesWhoseSizeOverflows) {
  const std::int64_t big = std::int64_t(1) << 32;
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] {
        (void)kiln::tensor::empty(dev(), {big, big, big});
      },
      {"[4294967296, 4294967296"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] {
        (void)kiln::tensor::zeros(dev(), {big, big, big}, kiln::scalar_type::u8);
      },
      {"overflow"}));
  // 2^62 elements fit in int64, their bytes (2^65 as doubles) do not.
  const std::int64_t half = std::int64_t(1) << 31;
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        (void)kiln::tensor::empty(dev(), {half, half}, kiln::scalar_type::f64);
      },
      {"[2147483648, 2147483648]", "double", "2^64 bytes"}));
  const kiln::tensor one = kiln::tensor::ones(dev(), {1, 1, 1});
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] {
        (void)one.expand({big, big, big});
      },
      {"overflow"}));
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        (void)one.expand({1, 1, -5});
      },
      {"expand", "negative size", "[1, 1, -5]"}));
}

TEST_P(TensorBadInputTest, RangesTooLongToCount) {
  const std::initializer_list<std::string> too_many{"arange", "more than an int64 counts"};
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::tensor::arange(dev(), 0, 1e30); },
                                             too_many));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)kiln::tensor::arange(dev(), 0, 1, 1e-300); }, too_many));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)kiln::tensor::arange(dev(), -1e308, 1e308); }, too_many));  // end - start: inf
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::tensor::arange(dev(), 0, NAN); },
                                             {"arange", "finite"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)kiln::tensor::linspace(dev(), NAN, 1, 3); }, {"linspace"}));
  EXPECT_EQ(kiln::tensor::arange(dev(), 5, 0).numel(), 0) << "an empty range is not an error";
}

TEST_P(TensorBadInputTest, ReductionAndSoftmaxAxes) {
  const kiln::tensor a = kiln::tensor::ones(dev(), {2, 3});
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.sum(2); }, {"2"}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.mean(-3); }, {"-3"}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.sum({0, 0}); }, {}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.sum({1, -1}); }, {}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.max(5); }, {"5"}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.argmax(2); }, {"2"}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.softmax(2); }, {"2"}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.log_softmax(-3); }, {"-3"}));
  EXPECT_TRUE(throws<kiln::axis_error>([&] { (void)a.var(7); }, {"7"}));
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        (void)kiln::tensor::empty(dev(), {0, 3}).max();
      },
      {}));
}

TEST_P(TensorBadInputTest, NegativeSizesAndBadSlices) {
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        (void)kiln::tensor::zeros(dev(), {2, -1});
      },
      {"negative size", "[2, -1]"}));
  const kiln::tensor a = kiln::tensor::ones(dev(), {4});
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)a.slice(0, 0, 4, -1); }, {"step"}));
  EXPECT_EQ(a.slice(0, 3, 1).numel(), 0) << "an empty slice is not an error";
  EXPECT_EQ(a.slice(0, INT64_MIN, INT64_MAX).numel(), 4) << "ends are clamped";
  EXPECT_TRUE(throws<kiln::shape_error>([&] { (void)a.view({-2}); }, {"[-2]"}));
  EXPECT_TRUE(throws<kiln::shape_error>([&] { (void)a.reshape({3, -1}); }, {"[3, -1]"}));
}

}  // namespace
}  // namespace tensor_test
