// kiln::query grouping stages (kiln/query/group.hpp) on every device, against std::map / std::
// references on seeded random inputs: group_by | aggregate with every aggregate, key types,
// float keys with NaN and signed zeros, stages before and after, distinct and distinct_by,
// reduce_by_key and unique_by_key over runs, top_k, tuple results, and bad input.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <kiln/query.hpp>
#include <map>
#include <set>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

class GroupTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(GroupTest);

struct ref_group {
  double sum = 0;
  std::uint64_t count = 0;
  float min = INFINITY, max = -INFINITY, first = 0;
};

// Keys in [-range, range], values in [-100, 100].
std::vector<std::int32_t> keys(std::size_t n, int range, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> k(n);
  for (auto& x : k) x = static_cast<std::int32_t>(rng() % (2 * range + 1)) - range;
  return k;
}

TEST_P(GroupTest, GroupByEveryAggregateAgainstAMap) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{5000}}) {
    SCOPED_TRACE("n " + std::to_string(n));
    const auto k = keys(n, 40, n + 1);
    const auto v = data<float>(n, n + 2);
    std::map<std::int32_t, ref_group> want;
    for (std::size_t i = 0; i < n; ++i) {
      auto [it, fresh] = want.try_emplace(k[i]);
      ref_group& g = it->second;
      if (fresh) g.first = v[i];
      g.sum += v[i];
      ++g.count;
      g.min = std::min(g.min, v[i]);
      g.max = std::max(g.max, v[i]);
    }
    const auto got =
        kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::group_by(_1) |
        kiln::aggregate(kiln::agg::sum(_2), kiln::agg::count(), kiln::agg::min(_2),
                        kiln::agg::max(_2), kiln::agg::mean(_2), kiln::agg::first(_2)) |
        kiln::to_vector();
    static_assert(std::is_same_v<decltype(got),
                                 const std::vector<std::tuple<std::int32_t, float, std::uint64_t,
                                                              float, float, float, float>>>);
    ASSERT_EQ(got.size(), want.size());
    std::size_t i = 0;
    for (const auto& [key, g] : want) {
      const auto& [gk, sum, count, mn, mx, mean, first] = got[i++];
      SCOPED_TRACE("key " + std::to_string(key));
      EXPECT_EQ(gk, key);
      EXPECT_NEAR(sum, g.sum, 1e-3 * (1 + std::abs(g.sum)));
      EXPECT_EQ(count, g.count);
      EXPECT_EQ(mn, g.min);
      EXPECT_EQ(mx, g.max);
      EXPECT_NEAR(mean, g.sum / double(g.count), 1e-4 * (1 + std::abs(g.sum / double(g.count))));
      EXPECT_EQ(first, g.first);
    }
  }
}

TEST_P(GroupTest, CountsPerKeyForEveryKeyType) {
  for_each_type(types_ab{}, [&]<class T>() {
    const auto v = tie_data<T>(3000, 5);
    std::map<T, std::uint64_t> want;
    for (T x : v) ++want[x];
    const auto got = upload(dev(), v) | kiln::group_by(_1) |
                     kiln::aggregate(kiln::agg::count(), kiln::agg::sum(_1)) | kiln::to_vector();
    ASSERT_EQ(got.size(), want.size());
    std::size_t i = 0;
    for (const auto& [key, c] : want) {
      EXPECT_EQ(std::get<0>(got[i]), key);
      EXPECT_EQ(std::get<1>(got[i]), c);
      EXPECT_EQ(std::get<2>(got[i]), static_cast<sum_type<T>>(key) * static_cast<sum_type<T>>(c));
      ++i;
    }
  });
}

TEST_P(GroupTest, FloatKeysMergeSignedZerosAndGroupNansLast) {
  std::vector<double> k = {2.5, -0.0, NAN, 0.0, 2.5, -INFINITY, NAN, -0.0, 7.0, -NAN};
  std::vector<std::int64_t> v = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  const auto got = kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::group_by(_1) |
                   kiln::aggregate(kiln::agg::sum(_2), kiln::agg::count()) | kiln::to_vector();
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(std::get<0>(got[0]), -INFINITY);
  EXPECT_EQ(std::get<1>(got[0]), 32);
  EXPECT_EQ(std::get<0>(got[1]), 0.0);  // -0.0 and +0.0: one group
  EXPECT_EQ(std::get<1>(got[1]), 2 + 8 + 128);
  EXPECT_EQ(std::get<2>(got[1]), 3u);
  EXPECT_EQ(std::get<1>(got[2]), 1 + 16);
  EXPECT_EQ(std::get<1>(got[3]), 256);
  EXPECT_TRUE(std::isnan(std::get<0>(got[4])));  // every NaN: one group, last
  EXPECT_EQ(std::get<1>(got[4]), 4 + 64 + 512);
}

TEST_P(GroupTest, ComputedKeyAfterAFilterAndStagesAfterTheGroups) {
  const auto k = keys(4000, 1000, 3);
  const auto v = data<std::int32_t>(4000, 4);
  std::map<std::int32_t, std::int64_t> sums;
  for (std::size_t i = 0; i < k.size(); ++i)
    if (v[i] > 0) sums[k[i] % 7] += v[i] / 1024;
  std::vector<std::int64_t> want;
  for (const auto& [key, s] : sums)
    if (s > 10) want.push_back(s * 2 + key);
  const auto got = kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::filter(_2 > 0) |
                   kiln::group_by(_1 % 7) | kiln::aggregate(kiln::agg::sum(_2 / 1024)) |
                   kiln::filter(_2 > 10) | kiln::transform(_2 * 2 + _1) | kiln::to_vector();
  EXPECT_EQ(got, want);
}

TEST_P(GroupTest, DistinctAndDistinctBy) {
  for_each_type(types_a{}, [&]<class T>() {
    const auto v = tie_data<T>(2500, 9);
    const std::set<T> s(v.begin(), v.end());
    EXPECT_EQ(upload(dev(), v) | kiln::distinct() | kiln::to_vector(),
              std::vector<T>(s.begin(), s.end()));
  });
  // distinct_by keeps every component of the first element (in input order) of each key.
  const auto k = keys(3000, 20, 11);
  const auto v = data<float>(3000, 12);
  std::map<std::int32_t, std::pair<std::int32_t, float>> first;
  for (std::size_t i = 0; i < k.size(); ++i) first.try_emplace(k[i] / 3, k[i], v[i]);
  std::vector<std::tuple<std::int32_t, float>> want;
  for (const auto& [key, e] : first) want.emplace_back(e.first, e.second);
  EXPECT_EQ(
      kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::distinct_by(_1 / 3) | kiln::to_vector(),
      want);
}

TEST_P(GroupTest, ReduceByKeyAndUniqueByKeyTakeRunsAsTheyCome) {
  std::mt19937_64 rng(21);
  std::vector<std::uint32_t> k;
  std::vector<double> v;
  for (std::uint32_t run = 0; k.size() < 6000; ++run) {
    const std::size_t len = 1 + rng() % (run % 9 == 0 ? 700 : 5);
    const std::uint32_t key = static_cast<std::uint32_t>(rng() % 4);  // equal keys recur
    for (std::size_t i = 0; i < len; ++i) {
      k.push_back(key);
      v.push_back(static_cast<double>(rng() % 1000) - 500.0);
    }
  }
  std::vector<std::tuple<std::uint32_t, double, std::uint64_t>> want;
  std::vector<std::tuple<std::uint32_t, double>> firsts;
  for (std::size_t i = 0; i < k.size(); ++i) {
    if (i == 0 || k[i] != k[i - 1]) {
      want.emplace_back(k[i], v[i], 0);
      firsts.emplace_back(k[i], v[i]);
    }
    auto& [key, mx, count] = want.back();
    mx = std::max(mx, v[i]);
    ++count;
  }
  const auto kb = upload(dev(), k);
  const auto vb = upload(dev(), v);
  EXPECT_EQ(kiln::zip(kb, vb) | kiln::reduce_by_key(_1, kiln::agg::max(_2), kiln::agg::count()) |
                kiln::to_vector(),
            want);
  EXPECT_EQ(kiln::zip(kb, vb) | kiln::unique_by_key(_1) | kiln::to_vector(), firsts);
}

TEST_P(GroupTest, TopKIsTheDescendingPrefixAndNeedsKElements) {
  std::vector<float> v = data<float>(5000, 31);
  v[7] = NAN;  // NaN sorts last: taken only after every number
  const auto b = upload(dev(), v);
  std::vector<float> sorted = v;
  std::sort(sorted.begin(), sorted.end(), [](float a, float c) {
    return std::isnan(a) ? false : std::isnan(c) ? true : a > c;
  });
  EXPECT_EQ(b | kiln::top_k(10) | kiln::to_vector(),
            std::vector<float>(sorted.begin(), sorted.begin() + 10));
  const auto all = b | kiln::top_k(v.size()) | kiln::to_vector();
  ASSERT_EQ(all.size(), v.size());
  EXPECT_TRUE(std::isnan(all.back()));
  // After a filter the count is known only when the query runs: too few is an error then.
  const std::size_t pos =
      static_cast<std::size_t>(std::count_if(v.begin(), v.end(), [](float x) { return x > 0.f; }));
  EXPECT_EQ((b | kiln::filter(_1 > 0.f) | kiln::top_k(pos) | kiln::to_vector()).size(), pos);
  try {
    (void)(b | kiln::filter(_1 > 0.f) | kiln::top_k(pos + 1) | kiln::to_vector());
    ADD_FAILURE() << "top_k of more elements than the query has did not throw";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("top_k"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)(b | kiln::top_k(v.size() + 1) | kiln::sum()), kiln::invalid_argument);
}

TEST_P(GroupTest, HostDataAndAutomaticPlacement) {
  const auto k = keys(5000, 30, 61);
  std::map<std::int32_t, std::uint64_t> want;
  for (std::int32_t x : k) ++want[x];
  const auto check = [&](const std::vector<std::tuple<std::int32_t, std::uint64_t>>& got) {
    ASSERT_EQ(got.size(), want.size());
    std::size_t i = 0;
    for (const auto& [key, c] : want) EXPECT_EQ(got[i++], std::make_tuple(key, c));
  };
  check(k | kiln::on(dev()) | kiln::group_by(_1) | kiln::aggregate(kiln::agg::count()) |
        kiln::to_vector());
  check(k | kiln::on(kiln::automatic) | kiln::group_by(_1) | kiln::aggregate(kiln::agg::count()) |
        kiln::to_vector());
  // A join whose other side is host data too.
  const std::vector<std::int32_t> other = {3, -7, 3, 100};
  std::uint64_t pairs = 0;
  for (std::int32_t x : k) pairs += (x == 3) * 2 + (x == -7);
  EXPECT_EQ(k | kiln::on(dev()) | kiln::join(other | kiln::on(dev()), _1, _1) | kiln::count(),
            pairs);
}

// The hash path (GPUs' choice for exact aggregates) and the sort path give the same groups;
// KILN_QUERY_GROUP forces either on any device. Float sums always sort (not exact in a hash).
TEST_P(GroupTest, HashAndSortPathsAgree) {
  const auto k = keys(20000, 700, 71);
  const auto v = data<std::int32_t>(20000, 72);
  const auto fk = data<float>(20000, 73);
  const auto run = [&] {
    return std::make_tuple(
        kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::group_by(_1 * 3) |
            kiln::aggregate(kiln::agg::count(), kiln::agg::sum(_2), kiln::agg::min(_2),
                            kiln::agg::max(_2), kiln::agg::first(_2)) |
            kiln::to_vector(),
        upload(dev(), k) | kiln::distinct() | kiln::to_vector(),
        kiln::zip(upload(dev(), fk), upload(dev(), k)) | kiln::group_by(kiln::floor(_1)) |
            kiln::aggregate(kiln::agg::count(), kiln::agg::max(_2)) | kiln::to_vector());
  };
  struct unset {
    ~unset() { unsetenv("KILN_QUERY_GROUP"); }
  } restore;
  setenv("KILN_QUERY_GROUP", "sort", 1);
  const auto sorted = run();
  setenv("KILN_QUERY_GROUP", "hash", 1);
  const auto hashed = run();
  EXPECT_EQ(std::get<0>(hashed), std::get<0>(sorted));
  EXPECT_EQ(std::get<1>(hashed), std::get<1>(sorted));
  EXPECT_EQ(std::get<2>(hashed), std::get<2>(sorted));
  EXPECT_GT(std::get<0>(sorted).size(), 1000u);
}

TEST_P(GroupTest, TupleResultsOnTheHostAndAsBuffersAndAsync) {
  const auto k = keys(2000, 5, 41);
  const auto v = data<std::int32_t>(2000, 42);
  const auto q = [&] {
    return kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::group_by(_1 * 2) |
           kiln::aggregate(kiln::agg::count());
  };
  const auto host = q() | kiln::to_vector();
  ASSERT_EQ(host.size(), 11u);
  auto [keys_b, counts_b] = q() | kiln::to_buffer();
  ASSERT_EQ(keys_b.size(), 11u);
  const auto kv = keys_b.to_vector();
  const auto cv = counts_b.to_vector();
  for (std::size_t i = 0; i < host.size(); ++i) {
    EXPECT_EQ(kv[i], std::get<0>(host[i]));
    EXPECT_EQ(cv[i], std::get<1>(host[i]));
    EXPECT_EQ(kv[i], 2 * (static_cast<std::int32_t>(i) - 5));
  }
  EXPECT_EQ((q() | kiln::async(kiln::to_vector(), dev().default_queue())).get(), host);
  // A zip collects as tuples too.
  const auto z = kiln::zip(upload(dev(), k), upload(dev(), v)) | kiln::take(3) | kiln::to_vector();
  ASSERT_EQ(z.size(), 3u);
  EXPECT_EQ(z[2], std::make_tuple(k[2], v[2]));
}

}  // namespace
}  // namespace query_test
