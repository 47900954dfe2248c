// Creation and reading back: from host data, constants, arange, empty; properties; to_vector
// and item.
#include <cmath>
#include <tuple>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class CreateTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(CreateTest);

using six_types = type_list<bool, std::int32_t, std::int64_t, std::uint8_t, float, double>;

TEST_P(CreateTest, FromRoundTripsEveryShape) {
  for_each_type(six_types{}, [&]<class T>() {
    for (const shape_t& s : {shape_t{}, shape_t{0}, shape_t{1}, shape_t{7}, shape_t{2, 3},
                             shape_t{3, 0, 2}, shape_t{1, 2, 1, 3}}) {
      SCOPED_TRACE(kiln::to_string(s));
      const host<T> h = random_host<T>(s, 11);
      const kiln::tensor x = upload(dev(), h);
      EXPECT_EQ(x.shape(), s);
      EXPECT_EQ(x.dim(), static_cast<int>(s.size()));
      EXPECT_EQ(x.numel(), numel(s));
      EXPECT_EQ(x.dtype(), kiln::scalar_type_of<T>);
      EXPECT_TRUE(x.is_contiguous());
      EXPECT_FALSE(x.is_lazy());
      EXPECT_EQ(x.get_device(), dev());
      EXPECT_EQ(x.storage_offset(), 0);
      EXPECT_TRUE(matches(x, h));
    }
  });
}

TEST_P(CreateTest, FromWithoutShapeIsOneDimensional) {
  const std::vector<float> v{1.5f, -2.f, 3.f};
  const auto x = kiln::tensor::from(dev(), v);
  EXPECT_EQ(x.shape(), (shape_t{3}));
  EXPECT_EQ(x.strides(), (shape_t{1}));
  EXPECT_EQ(x.to_vector<float>(), v);
}

TEST_P(CreateTest, ConstantsFillEveryElement) {
  const auto z = kiln::tensor::zeros(dev(), {2, 3}, kiln::scalar_type::i64);
  EXPECT_EQ(z.to_vector<std::int64_t>(), std::vector<std::int64_t>(6, 0));
  const auto o = kiln::tensor::ones(dev(), {4}, kiln::scalar_type::f64);
  EXPECT_EQ(o.to_vector<double>(), std::vector<double>(4, 1.0));
  const auto f = kiln::tensor::full(dev(), {3, 1}, kiln::scalar_type::u8, 300);  // converted
  EXPECT_EQ(f.to_vector<std::uint8_t>(), std::vector<std::uint8_t>(3, 44));
  const auto b = kiln::tensor::full(dev(), {2}, kiln::scalar_type::boolean, 2.5);
  EXPECT_EQ(b.to_vector<bool>(), std::vector<bool>(2, true));
  const auto e = kiln::tensor::empty(dev(), {0, 4}, kiln::scalar_type::f32);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_TRUE(e.to_vector<float>().empty());
  EXPECT_EQ(kiln::tensor::empty(dev(), {5}).dtype(), kiln::scalar_type::f32);
}

TEST_P(CreateTest, ArangeMatchesPython) {
  EXPECT_EQ(kiln::tensor::arange(dev(), 0, 5, 1, kiln::scalar_type::i32).to_vector<std::int32_t>(),
            (std::vector<std::int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(kiln::tensor::arange(dev(), 1, 2, 0.25, kiln::scalar_type::f64).to_vector<double>(),
            (std::vector<double>{1, 1.25, 1.5, 1.75}));
  EXPECT_EQ(
      kiln::tensor::arange(dev(), 10, 1, -3, kiln::scalar_type::i64).to_vector<std::int64_t>(),
      (std::vector<std::int64_t>{10, 7, 4}));
  EXPECT_EQ(kiln::tensor::arange(dev(), 3, 3, 1, kiln::scalar_type::f32).numel(), 0);
  EXPECT_THROW(kiln::tensor::arange(dev(), 0, 1, 0), kiln::invalid_argument);
}

TEST_P(CreateTest, ItemReadsTheOneElement) {
  const auto x = kiln::tensor::from(dev(), std::vector<std::int64_t>{-42}, {1, 1});
  EXPECT_EQ(x.item<std::int64_t>(), -42);
  EXPECT_EQ((x * 2).item<std::int64_t>(), -84);
  EXPECT_EQ(x.squeeze().dim(), 0);
  EXPECT_EQ(x.squeeze().item<std::int64_t>(), -42);
}

// PyTorch's linspace: first half from start, second half from end, so both ends are exact.
TEST_P(CreateTest, LinspaceHasExactEndsAndPyTorchsSteps) {
  for (const auto& [start, end, steps] : {std::tuple{-1.3, 2.9, 7},
                                          {5.0, -5.0, 11},
                                          {0.1, 0.7, 8},
                                          {2.0, 2.0, 3},
                                          {-4.0, 1e6, 1000}}) {
    SCOPED_TRACE(std::to_string(start) + " to " + std::to_string(end));
    const double step = (end - start) / (steps - 1);
    host<double> want{{steps}, {}};
    for (int i = 0; i < steps; ++i)
      want.v.push_back(i < steps / 2 ? start + i * step : end - (steps - 1 - i) * step);
    const kiln::tensor x = kiln::tensor::linspace(dev(), start, end, steps, kiln::scalar_type::f64);
    EXPECT_EQ(stats().kernel_launches, 1u);  // evaluated at once
    EXPECT_TRUE(matches(x, want, 1e-15));    // a contracted multiply-add may round once less
    const std::vector<double> v = x.to_vector<double>();
    EXPECT_EQ(v.front(), start);
    EXPECT_EQ(v.back(), end);
    const std::vector<float> f =
        kiln::tensor::linspace(dev(), start, end, steps).to_vector<float>();  // f32 by default
    EXPECT_EQ(f.front(), static_cast<float>(start));
    EXPECT_EQ(f.back(), static_cast<float>(end));
  }
  EXPECT_EQ(kiln::tensor::linspace(dev(), 0, 1, 5).to_vector<float>(),
            (std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1}));
  EXPECT_EQ(
      kiln::tensor::linspace(dev(), 0, 10, 4, kiln::scalar_type::i32).to_vector<std::int32_t>(),
      (std::vector<std::int32_t>{0, 3, 6, 10}));  // static_cast truncates 3.33 and 6.67
  EXPECT_EQ(kiln::tensor::linspace(dev(), 3.5, 9, 1, kiln::scalar_type::f64).to_vector<double>(),
            (std::vector<double>{3.5}));
  const kiln::tensor e = kiln::tensor::linspace(dev(), 0, 1, 0);
  EXPECT_EQ(e.shape(), (shape_t{0}));
  EXPECT_THROW(kiln::tensor::linspace(dev(), 0, 1, -1), kiln::invalid_argument);
  EXPECT_THROW(kiln::tensor::linspace(dev(), 0, INFINITY, 3), kiln::invalid_argument);
}

}  // namespace
}  // namespace tensor_test
