// Bad input at kiln::query's entry points not covered elsewhere (fusion_test covers empty and
// moved-from inputs and combines using _i; async_test a pending without a query): zip inputs of
// different lengths or devices, an asynchronous terminal on another device's queue, a host range
// streamed to no device. Runs on every device. docs/testing.md lists what is covered where.
#include "bad_input.hpp"

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using bad_input::throws;

class QueryBadInputTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(QueryBadInputTest);

std::optional<kiln::device> another_device(const kiln::device& dev) {
  for (const kiln::device& d : kiln::device::all())
    if (!(d == dev)) return d;
  return std::nullopt;
}

TEST_P(QueryBadInputTest, ZipInputsOfDifferentLengths) {
  kiln::buffer<float> a(dev(), 8), b(dev(), 9);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::zip(a, b); },
                                             {"zip", "differ in length", "8 and 9"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)kiln::zip(a, a, b.subview(0, 7)); }, {"8 and 7"}));
}

TEST_P(QueryBadInputTest, ZipInputsOnDifferentDevices) {
  const auto other = another_device(dev());
  if (!other) GTEST_SKIP() << "only " << dev().id() << " here: zip across devices needs two";
  kiln::buffer<float> a(dev(), 8), b(*other, 8);
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)kiln::zip(a, b); }, {"zip", "different devices", dev().id(), other->id()}));
}

TEST_P(QueryBadInputTest, AsyncTerminalOnAnotherDevicesQueue) {
  const auto other = another_device(dev());
  if (!other) GTEST_SKIP() << "only " << dev().id() << " here: a foreign queue needs two devices";
  kiln::buffer<float> a(dev(), std::vector<float>(16, 1.0f));
  kiln::queue theirs(*other);
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)(a | kiln::async(kiln::sum(), theirs)).get(); },
                                     {"kiln::async", dev().id(), other->id()}));
}

TEST_P(QueryBadInputTest, HostRangeOnNoDevice) {
  const std::vector<float> host(16, 1.0f);
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)(host | kiln::on(kiln::device(nullptr)) | kiln::sum()); },
      {"kiln::on", "no device"}));
}

// Positions near 2^64: skip + take must not wrap into a short or empty window.
TEST_P(QueryBadInputTest, TakeAndSkipNearTheTop) {
  kiln::buffer<std::int32_t> a(dev(), std::vector<std::int32_t>(10, 1));
  EXPECT_EQ(a | kiln::skip(UINT64_MAX) | kiln::count(), 0u);
  EXPECT_EQ(a | kiln::take(UINT64_MAX) | kiln::count(), 10u);
  EXPECT_EQ(a | kiln::skip(4) | kiln::take(UINT64_MAX) | kiln::count(), 6u);
  EXPECT_EQ(a | kiln::skip(4) | kiln::take(UINT64_MAX - 2) | kiln::sum(), 6);
  EXPECT_EQ(a | kiln::take(UINT64_MAX) | kiln::skip(UINT64_MAX - 1) | kiln::count(), 0u);
  EXPECT_EQ((a | kiln::skip(3) | kiln::take(UINT64_MAX) | kiln::to_vector()).size(), 7u);
}

}  // namespace
}  // namespace query_test
