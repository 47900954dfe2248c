// Every tensor error: its class (a kiln::invalid_argument) and a message that names what is
// wrong (both shapes, both devices, the axis and the rank, both dtypes).
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class ErrorsTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ErrorsTest);

// Runs f, expecting E whose message contains every one of parts.
template <class E, class F>
::testing::AssertionResult throws_naming(F f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const E& e) {
    static_assert(std::is_base_of_v<kiln::invalid_argument, E>);
    const std::string m = e.what();
    for (const std::string& p : parts)
      if (m.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << m << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "nothing thrown";
}

TEST_P(ErrorsTest, ShapeErrorsNameBothShapes) {
  const kiln::tensor a = kiln::tensor::ones(dev(), {2, 3}), b = kiln::tensor::ones(dev(), {4});
  EXPECT_TRUE(throws_naming<kiln::shape_error>([&] { (void)(a + b); }, {"[2, 3] and [4]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>([&] { (void)kiln::where(a > 0.f, a, b); }, {"[4]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>(
      [&] {
        (void)a.view({4, 2});
      },
      {"[4, 2]", "[2, 3]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>(
      [&] {
        (void)a.reshape({-1, 4});
      },
      {"[-1, 4]", "[2, 3]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>([&] { (void)a.view({-1, -1}); }, {"[-1, -1]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>(
      [&] {
        (void)kiln::tensor::from(dev(), std::vector<float>(5), {2, 3});
      },
      {"[2, 3]", "[5]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>(
      [&] {
        (void)a.expand({2, 4});
      },
      {"[2, 3]", "[2, 4]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>([&] { (void)a.item<float>(); }, {"[2, 3]", "6"}));
  EXPECT_TRUE(
      throws_naming<kiln::shape_error>([&] { (void)a.t().view({6}); }, {"[3, 2]", "[1, 3]"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>(
      [&] {
        (void)kiln::tensor::zeros(dev(), {1, 1, 1, 1, 1, 1, 1, 1, 1});
      },
      {"at most 8"}));
  EXPECT_TRUE(throws_naming<kiln::shape_error>([&] { (void)a.unsqueeze(0).unsqueeze(0).t(); },
                                               {"[1, 1, 2, 3]"}));
}

TEST_P(ErrorsTest, DtypeErrorNamesBothTypes) {
  const kiln::tensor a = kiln::tensor::ones(dev(), {2}, kiln::scalar_type::i32);
  EXPECT_TRUE(
      throws_naming<kiln::dtype_error>([&] { (void)a.to_vector<float>(); }, {"int32_t", "float"}));
  EXPECT_TRUE(throws_naming<kiln::dtype_error>([&] { (void)(a * 2.0).to_vector<std::int32_t>(); },
                                               {"double"}));
  EXPECT_TRUE(throws_naming<kiln::dtype_error>([&] { (void)(a < 1).item<int>(); }, {"bool"}));
}

TEST_P(ErrorsTest, AxisErrorsNameTheAxisAndRank) {
  const kiln::tensor a = kiln::tensor::ones(dev(), {2, 3});
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.transpose(0, 2); }, {"2", "rank 2"}));
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.permute({0, 0}); }, {"repeated"}));
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.permute({0}); }, {"rank 2"}));
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.slice(-3, 0, 1); }, {"-3"}));
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.squeeze(5); }, {"5"}));
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.unsqueeze(4); }, {"4", "[-3, 2]"}));
  EXPECT_TRUE(throws_naming<kiln::axis_error>([&] { (void)a.size(2); }, {"2"}));
  EXPECT_NO_THROW((void)a.unsqueeze(-3));
  EXPECT_THROW((void)a.slice(0, 0, 2, 0), kiln::invalid_argument);
  EXPECT_THROW((void)(kiln::tensor() + a), kiln::invalid_argument);
}

TEST_P(ErrorsTest, DeviceMismatchNamesBothDevices) {
  const auto all = kiln::device::all();
  const auto other =
      std::find_if(all.begin(), all.end(), [&](const kiln::device& d) { return !(d == dev()); });
  if (other == all.end()) GTEST_SKIP() << "one device only: no second device to mix with";
  const kiln::tensor a = kiln::tensor::ones(dev(), {2}), b = kiln::tensor::ones(*other, {2});
  EXPECT_TRUE(
      throws_naming<kiln::device_mismatch>([&] { (void)(a + b); }, {dev().id(), other->id()}));
  EXPECT_TRUE(throws_naming<kiln::device_mismatch>([&] { (void)kiln::where(a > 0.f, a, b); },
                                                   {other->id()}));
}

// Exhausted device memory: kiln::out_of_memory naming the size asked, for a new tensor and
// for the result of a lazy expression (a broadcast view costs nothing until evaluated).
TEST_P(ErrorsTest, ExhaustedMemoryNamesTheSize) {
  const std::int64_t big = std::int64_t(1) << 21;  // 2^42 doubles: 32 TiB
  try {
    (void)kiln::tensor::empty(dev(), {big, big}, kiln::scalar_type::f64);
    FAIL() << "a 32 TiB tensor was allocated";
  } catch (const kiln::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("35184372088832 bytes"), std::string::npos) << e.what();
  }
  const kiln::tensor row = upload(dev(), random_host<float>({1, big}, 5));
  const kiln::tensor wide = row.expand({big, big});  // a view: stride 0, no memory
  EXPECT_EQ(wide.numel(), big * big);
  try {
    (wide * 2.f).eval();
    FAIL() << "a 16 TiB result was allocated";
  } catch (const kiln::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("17592186044416 bytes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tensor_test
