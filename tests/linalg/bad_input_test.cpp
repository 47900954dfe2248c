// Bad input at kiln::linalg's entry points not covered by errors_test.cpp: shapes whose extent
// overflows 2^64 elements, empty operands (fine where the shape reads nothing, refused where it
// does), a moved-from queue. Wrong element types, mixed types and a const output are compile
// errors (static_assert), not run-time ones. Runs on every device.
#include "bad_input.hpp"

#include <utility>

#include "linalg/linalg_fixture.hpp"

namespace {

using bad_input::throws;

class LinalgBadInputTest : public conformance::DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(LinalgBadInputTest);

TEST_P(LinalgBadInputTest, ShapesSpanningMoreThan2To64Elements) {
  kiln::buffer<float> a(dev(), 4), b(dev(), 4), c(dev(), 4);
  kiln::queue q(dev());
  const std::uint64_t big = std::uint64_t(1) << 33;
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { kiln::linalg::gemm(q, a, b, c, {.m = big, .n = 1, .k = big}); },
      {"kiln::linalg", "spans more than 2^64 elements"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] {
        kiln::linalg::gemm(
            q, a, b, c,
            {.m = 1, .n = 1, .k = 1, .batch = big, .stride_a = big, .stride_b = 1, .stride_c = 1});
      },
      {"spans more than 2^64 elements"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { kiln::linalg::gemv(q, a, b, c, {.m = big, .n = big}); }, {"spans more than 2^64"}));
  q.finish();
}

TEST_P(LinalgBadInputTest, EmptyOperands) {
  kiln::buffer<float> empty, c(dev(), std::vector<float>(4, 2.0f));
  kiln::queue q(dev());
  // k = 0: A and B hold nothing that is read; C = beta C.
  EXPECT_NO_THROW(kiln::linalg::gemm(q, empty, empty, c, {.m = 2, .n = 2, .k = 0}, {.beta = 0.5}));
  q.finish();
  EXPECT_TRUE(conformance::elements_equal(c.to_vector(), std::vector<float>(4, 1.0f)));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { kiln::linalg::gemm(q, empty, c, c, {.m = 2, .n = 2, .k = 1}); },
      {"A holds 0 elements but the shape needs 2"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { kiln::linalg::gemv(q, c, c, empty, {.m = 2, .n = 2}); },
                                     {"y holds 0 elements but the shape needs 2"}));
}

TEST_P(LinalgBadInputTest, MovedFromQueue) {
  kiln::buffer<float> a(dev(), 4), b(dev(), 4), c(dev(), 4);
  kiln::queue q(dev());
  kiln::queue taken = std::move(q);
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 2, .k = 2}); }, {"gemm", "moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { kiln::linalg::gemv(q, a, b, c, {.m = 2, .n = 2}); }, {"gemv", "moved-from"}));
}

}  // namespace
