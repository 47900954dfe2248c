// kiln::join / kiln::left_join (kiln/query/join.hpp) on every device, against the nested loop:
// computed keys, stages before and after on both sides, duplicates on both sides, float keys
// (-0.0 matches +0.0, NaN nothing), empty sides, and bad input.
#include <algorithm>
#include <cmath>
#include <kiln/query.hpp>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

class JoinTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(JoinTest);

std::vector<std::int64_t> small_keys(std::size_t n, int range, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> k(n);
  for (auto& x : k) x = static_cast<std::int64_t>(rng() % range);
  return k;
}

TEST_P(JoinTest, InnerAndLeftMatchTheNestedLoopWithStagesOnBothSides) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{900}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto ak = small_keys(n, 60, n + 1);
    const auto av = data<float>(n, n + 2);
    const auto bk = small_keys(n / 3 + 1, 60, n + 3);
    const auto bv = data<std::int32_t>(bk.size(), n + 4);
    // this side: filter av > -50, key ak * 2; other side: key bk * 2, element (bk, bv)
    std::vector<std::tuple<std::int64_t, float, std::int64_t, std::int32_t>> inner;
    std::vector<std::tuple<std::int64_t, float, std::int64_t, std::int32_t, bool>> left;
    for (std::size_t i = 0; i < n; ++i) {
      if (!(av[i] > -50.f)) continue;
      bool any = false;
      for (std::size_t j = 0; j < bk.size(); ++j)
        if (ak[i] * 2 == bk[j] * 2) {
          inner.emplace_back(ak[i], av[i], bk[j], bv[j]);
          left.emplace_back(ak[i], av[i], bk[j], bv[j], true);
          any = true;
        }
      if (!any) left.emplace_back(ak[i], av[i], 0, 0, false);
    }
    const auto a = kiln::zip(upload(dev(), ak), upload(dev(), av));
    const auto b = kiln::zip(upload(dev(), bk), upload(dev(), bv));
    EXPECT_EQ(a | kiln::filter(_2 > -50.f) | kiln::join(b, _1 * 2, _1 * 2) | kiln::to_vector(),
              inner);
    EXPECT_EQ(a | kiln::filter(_2 > -50.f) | kiln::left_join(b, _1 * 2, _1 * 2) | kiln::to_vector(),
              left);
    // Stages after the join see both sides' components.
    double want = 0;
    for (const auto& [k1, v1, k2, v2] : inner) want += double(v1) * double(v2);
    const double got = a | kiln::filter(_2 > -50.f) | kiln::join(b, _1 * 2, _1 * 2) |
                       kiln::transform(kiln::cast<double>(_2) * kiln::cast<double>(_4)) |
                       kiln::sum();
    EXPECT_NEAR(got, want, 1e-6 * (1 + std::abs(want)));
  }
}

TEST_P(JoinTest, FloatKeysAndASingleBufferAsTheOtherSide) {
  const std::vector<float> ak = {1.f, -0.f, NAN, 2.f, 0.f, 3.f};
  const std::vector<float> bk = {0.f, NAN, 2.f, 2.f, -1.f};
  // -0.0 and +0.0 match each other, NaN matches nothing (not even NaN).
  const std::vector<std::tuple<float, float>> want = {
      {-0.f, 0.f}, {2.f, 2.f}, {2.f, 2.f}, {0.f, 0.f}};
  const auto got = upload(dev(), ak) | kiln::join(upload(dev(), bk), _1, _1) | kiln::to_vector();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::get<0>(got[i]), std::get<0>(want[i])) << i;
    EXPECT_EQ(std::get<1>(got[i]), std::get<1>(want[i])) << i;
  }
  // A left join keeps the NaN and the unmatched 1 and 3, in order.
  const auto l = upload(dev(), ak) | kiln::left_join(upload(dev(), bk), _1, _1) |
                 kiln::transform(kiln::cast<int>(_3)) | kiln::to_vector();
  EXPECT_EQ(l, (std::vector<int>{0, 1, 0, 1, 1, 1, 0}));
}

TEST_P(JoinTest, EmptySidesAndAllEqualKeys) {
  const auto ones = upload(dev(), std::vector<std::int32_t>(40, 7));
  const auto few = upload(dev(), std::vector<std::int32_t>(30, 7));
  EXPECT_EQ(ones | kiln::join(few, _1, _1) | kiln::count(), 40u * 30u);
  const auto none = upload(dev(), std::vector<std::int32_t>{5});
  EXPECT_EQ(ones | kiln::join(none, _1, _1) | kiln::count(), 0u);
  EXPECT_EQ(ones | kiln::left_join(none, _1, _1) | kiln::count(), 40u);
  // The other side filtered to nothing.
  EXPECT_EQ(ones | kiln::left_join(few | kiln::filter(_1 > 100), _1, _1) |
                kiln::transform(kiln::cast<int>(_3)) | kiln::sum(),
            0);
}

TEST_P(JoinTest, SidesOnDifferentDevicesAreRefused) {
  const kiln::device cpu = kiln::device::get("cpu:0");
  if (cpu == dev()) GTEST_SKIP() << "needs a device other than cpu:0";
  const auto a = upload(dev(), std::vector<std::int32_t>{1, 2});
  const auto b = upload(cpu, std::vector<std::int32_t>{1, 2});
  EXPECT_THROW((void)(a | kiln::join(b, _1, _1) | kiln::to_vector()), kiln::invalid_argument);
}

}  // namespace
}  // namespace query_test
