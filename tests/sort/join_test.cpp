// Device equi-join (src/sort/join.hpp): inner and left joins against the nested loop (a
// stably sorted build rows for large sizes) on seeded random keys of several types and widths, on
// every device; empty sides, one row, ~1e5 rows with many duplicates, all-equal keys (n * m rows),
// no matches; NaN and signed zeros; caller outputs poisoned first (one spare element stays
// poisoned); the row limit and bad input.
#include "sort/join.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <utility>

#include "conformance/backends.hpp"

namespace {

using kiln::scalar_type;
using kiln::detail::join_args;
using kiln::detail::join_keys;
using kiln::detail::join_kind;
using kiln::detail::join_result;
using kiln::detail::sort_operand;

constexpr std::uint64_t none = UINT64_MAX;
using rows = std::vector<std::pair<std::uint64_t, std::uint64_t>>;

bool is_nan(auto v) {
  if constexpr (std::is_floating_point_v<decltype(v)>)
    return std::isnan(v);
  else
    return false;
}

// The rows the join promises: the nested loop; for big inputs the same through the build rows
// sorted by key (NaN skipped: it equals nothing).
template <class K>
rows reference(const std::vector<K>& build, const std::vector<K>& probe, bool left) {
  rows out;
  if (build.size() * probe.size() <= (1u << 20)) {
    for (std::uint64_t i = 0; i < probe.size(); ++i) {
      const std::size_t before = out.size();
      for (std::uint64_t j = 0; j < build.size(); ++j)
        if (probe[i] == build[j]) out.emplace_back(i, j);
      if (left && out.size() == before) out.emplace_back(i, none);
    }
    return out;
  }
  // Build rows sorted by key, stably (equal keys, -0.0 and +0.0 among them, keep row order).
  std::vector<std::pair<K, std::uint64_t>> runs;
  for (std::uint64_t j = 0; j < build.size(); ++j)
    if (!is_nan(build[j])) runs.emplace_back(build[j], j);
  const auto by_key = [](const auto& x, const auto& y) { return x.first < y.first; };
  std::stable_sort(runs.begin(), runs.end(), by_key);
  for (std::uint64_t i = 0; i < probe.size(); ++i) {
    const auto [lo, hi] = is_nan(probe[i]) ? std::pair(runs.end(), runs.end())
                                           : std::equal_range(runs.begin(), runs.end(),
                                                              std::pair(probe[i], 0), by_key);
    for (auto it = lo; it != hi; ++it) out.emplace_back(i, it->second);
    if (left && lo == hi) out.emplace_back(i, none);
  }
  return out;
}

// n keys from `range` values (many duplicates when range is small); floats mix in NaNs,
// signed zeros and infinities (rarely for wide ranges: each special is one key, n/48 of them
// would make millions of rows).
template <class K>
std::vector<K> random_keys(std::uint64_t n, std::uint64_t range, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<K> out(n);
  for (K& v : out) {
    const std::uint64_t r = rng() % range;
    if constexpr (std::is_floating_point_v<K>) {
      const K special[] = {
          std::numeric_limits<K>::quiet_NaN(), -std::numeric_limits<K>::quiet_NaN(), K(0), -K(0),
          std::numeric_limits<K>::infinity(),  -std::numeric_limits<K>::infinity()};
      v = rng() % (range < 1000 ? 8 : 512) == 0
              ? special[rng() % std::size(special)]
              : K(std::int64_t(r) - std::int64_t(range / 2)) / K(4);
    } else if constexpr (std::is_signed_v<K>) {
      v = static_cast<K>(std::int64_t(r) - std::int64_t(range / 2));
    } else {
      v = static_cast<K>(r * 3 + (sizeof(K) > 4 ? (std::uint64_t(1) << 40) : 0));
    }
  }
  return out;
}

class JoinTest : public conformance::DeviceTest {
 protected:
  // A device copy of keys starting `off` elements into its buffer.
  template <class K>
  kiln::buffer<K> upload(const std::vector<K>& keys, std::uint64_t off) {
    kiln::buffer<K> b(dev(), keys.size() + off);
    if (!keys.empty()) b.view().subview(off, keys.size()).copy_from(keys);
    return b;
  }

  // Joins on the device and compares with the reference, row for row. Caller outputs (one
  // spare element, all poisoned) unless `allocated`.
  template <class K>
  void check(const std::vector<K>& build, const std::vector<K>& probe, join_kind kind,
             bool allocated = false) {
    const bool left = kind == join_kind::left;
    SCOPED_TRACE(::testing::Message()
                 << kiln::type_name(kiln::scalar_type_of<K>) << ", build " << build.size()
                 << ", probe " << probe.size() << (left ? ", left" : ", inner"));
    const rows want = reference(build, probe, left);
    const std::uint64_t off = 2;
    kiln::buffer<K> bk = upload(build, off), pk = upload(probe, off + 1);
    kiln::buffer<std::uint64_t> po(dev(), want.size() + 1), bo(dev(), want.size() + 1);
    po.fill(conformance::poison<std::uint64_t>());
    bo.fill(conformance::poison<std::uint64_t>());
    join_args a;
    a.key_type = kiln::scalar_type_of<K>;
    a.build_n = build.size();
    a.build_keys = {bk.view().memory(), off};
    a.probe_n = probe.size();
    a.probe_keys = {pk.view().memory(), off + 1};
    a.kind = kind;
    if (!allocated) {
      a.probe_out = {po.view().memory(), 0};
      a.build_out = {bo.view().memory(), 0};
    }
    const join_result r = join_keys(dev().default_queue(), a);
    ASSERT_EQ(r.count, want.size());
    ASSERT_TRUE(r.probe_index && r.build_index);
    if (!allocated) {
      EXPECT_EQ(r.probe_index, po.view().memory());
      EXPECT_EQ(r.build_index, bo.view().memory());
    }
    const std::vector<std::uint64_t> gp =
        kiln::buffer_view<std::uint64_t>(r.probe_index, r.probe_offset, r.count + !allocated)
            .to_vector();
    const std::vector<std::uint64_t> gb =
        kiln::buffer_view<std::uint64_t>(r.build_index, r.build_offset, r.count + !allocated)
            .to_vector();
    EXPECT_TRUE(conformance::all_indices(
        want.size(),
        [&](std::uint64_t i) { return gp[i] == want[i].first && gb[i] == want[i].second; },
        [&](std::uint64_t i) {
          std::ostringstream s;
          s << "got (" << gp[i] << ", " << gb[i] << "), expected (" << want[i].first << ", "
            << want[i].second << ")";
          return s.str();
        }));
    if (!allocated) {
      EXPECT_TRUE(conformance::is_poison(gp[want.size()])) << "probe index written past count";
      EXPECT_TRUE(conformance::is_poison(gb[want.size()])) << "build index written past count";
    }
  }

  template <class K>
  void every_size() {
    SCOPED_TRACE(kiln::type_name(kiln::scalar_type_of<K>));
    struct shape {
      std::uint64_t nb, np, range;
    };
    std::vector<shape> shapes = {{0, 0, 5},   {0, 5, 5},           {5, 0, 5},
                                 {1, 1, 1},   {1, 7, 2},           {7, 1, 2},
                                 {37, 53, 9}, {1000, 100003, 250}, {100003, 20011, 20000}};
    if (is_gpu()) shapes.push_back({3000017, 1000003, 1000000});
    for (const shape& s : shapes)
      for (join_kind kind : {join_kind::inner, join_kind::left})
        check<K>(random_keys<K>(s.nb, s.range, 100 + s.nb), random_keys<K>(s.np, s.range, 7 + s.np),
                 kind);
  }
};

TEST_P(JoinTest, KeyTypesInnerAndLeftAgainstNestedLoop) {
  every_size<std::int32_t>();
  every_size<std::uint64_t>();
  every_size<float>();
  every_size<std::int64_t>();
}

// The other key widths (1, 2 bytes) and double, on small and medium sizes.
TEST_P(JoinTest, OtherWidthsAndDouble) {
  for (join_kind kind : {join_kind::inner, join_kind::left}) {
    check<std::uint8_t>(random_keys<std::uint8_t>(300, 80, 1),
                        random_keys<std::uint8_t>(5000, 90, 2), kind);
    check<std::int8_t>(random_keys<std::int8_t>(50, 200, 3), random_keys<std::int8_t>(70, 250, 4),
                       kind);
    check<std::int16_t>(random_keys<std::int16_t>(4000, 3000, 5),
                        random_keys<std::int16_t>(3000, 3000, 6), kind);
    check<double>(random_keys<double>(5000, 400, 7), random_keys<double>(3000, 400, 8), kind);
  }
}

TEST_P(JoinTest, NanMatchesNothingAndSignedZerosMatch) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> build = {nan, -0.0f, 1.0f, 0.0f, -nan};
  const std::vector<float> probe = {0.0f, nan, -0.0f, 2.0f};
  EXPECT_EQ(reference(build, probe, false), (rows{{0, 1}, {0, 3}, {2, 1}, {2, 3}}));
  EXPECT_EQ(reference(build, probe, true),
            (rows{{0, 1}, {0, 3}, {1, none}, {2, 1}, {2, 3}, {3, none}}));
  check(build, probe, join_kind::inner);
  check(build, probe, join_kind::left);
  const std::vector<double> all_nan(100, std::nan(""));
  check(all_nan, all_nan, join_kind::inner);
  check(all_nan, all_nan, join_kind::left);
}

// One key matching every row on both sides: n * m rows, their build rows in input order.
TEST_P(JoinTest, AllEqualKeysGiveEveryPair) {
  const std::uint64_t nb = size_for(300, 3000), np = size_for(200, 2000);
  check(std::vector<std::int32_t>(nb, -4), std::vector<std::int32_t>(np, -4), join_kind::inner);
  std::vector<std::int32_t> probe(np, -4);
  probe[np / 2] = 5;  // one unmatched row in the middle
  check(std::vector<std::int32_t>(nb, -4), probe, join_kind::left);
  check(std::vector<std::int32_t>(nb, -4), probe, join_kind::inner);
}

TEST_P(JoinTest, NoMatches) {
  std::vector<std::uint32_t> build(5000), probe(7000);
  for (std::uint32_t i = 0; i < build.size(); ++i) build[i] = 2 * i;
  for (std::uint32_t i = 0; i < probe.size(); ++i) probe[i] = 2 * i + 1;
  check(build, probe, join_kind::inner);
  check(build, probe, join_kind::left);
}

TEST_P(JoinTest, OutputsAllocatedWhenNotGivenOrTooSmall) {
  const auto build = random_keys<std::int64_t>(2000, 300, 11);
  const auto probe = random_keys<std::int64_t>(3000, 300, 12);
  check(build, probe, join_kind::inner, true);
  check(build, probe, join_kind::left, true);
  check(std::vector<std::int64_t>{}, probe, join_kind::left, true);
  check(build, std::vector<std::int64_t>{}, join_kind::left, true);
  // Caller outputs with room for one row: the join allocates instead.
  kiln::buffer<std::int64_t> bk(dev(), build), pk(dev(), probe);
  kiln::buffer<std::uint64_t> small(dev(), 1), small2(dev(), 1);
  join_args a;
  a.key_type = scalar_type::i64;
  a.build_n = build.size();
  a.build_keys = {bk.view().memory(), 0};
  a.probe_n = probe.size();
  a.probe_keys = {pk.view().memory(), 0};
  a.probe_out = {small.view().memory(), 0};
  a.build_out = {small2.view().memory(), 0};
  const join_result r = join_keys(dev().default_queue(), a);
  const rows want = reference(build, probe, false);
  ASSERT_EQ(r.count, want.size());
  EXPECT_NE(r.probe_index, small.view().memory());
  const auto gp = kiln::buffer_view<std::uint64_t>(r.probe_index, 0, r.count).to_vector();
  const auto gb = kiln::buffer_view<std::uint64_t>(r.build_index, 0, r.count).to_vector();
  rows got;
  for (std::uint64_t i = 0; i < r.count; ++i) got.emplace_back(gp[i], gb[i]);
  EXPECT_EQ(got, want);
}

// (2^20 + 1)^2 rows, more than 2^40: refused with the count, before any output is allocated.
TEST_P(JoinTest, MoreThanTwoToThe40RowsRefused) {
  const std::uint64_t n = (std::uint64_t(1) << 20) + 1;
  kiln::buffer<std::uint8_t> keys(dev(), n);
  keys.fill(7);
  join_args a;
  a.key_type = scalar_type::u8;
  a.build_n = a.probe_n = n;
  a.build_keys = a.probe_keys = {keys.view().memory(), 0};
  try {
    join_keys(dev().default_queue(), a);
    ADD_FAILURE() << "no error";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr(std::to_string(n * n)));
  }
}

TEST_P(JoinTest, BadInputIsRefusedClearly) {
  kiln::queue& q = dev().default_queue();
  kiln::buffer<std::uint32_t> k(dev(), 10), out(dev(), 10);
  join_args a;
  a.build_n = a.probe_n = 10;
  a.build_keys = a.probe_keys = {k.view().memory(), 0};
  for (scalar_type t : {scalar_type::f16, scalar_type::bf16}) {
    a.key_type = t;
    try {
      join_keys(q, a);
      ADD_FAILURE() << "no error for " << kiln::type_name(t);
    } catch (const kiln::unsupported& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(kiln::type_name(t)));
    }
  }
  a.key_type = scalar_type::u32;
  a.kind = static_cast<join_kind>(7);
  EXPECT_THROW(join_keys(q, a), kiln::invalid_argument);
  a.kind = join_kind::left;
  a.probe_n = 11;  // more keys than the buffer holds
  EXPECT_THROW(join_keys(q, a), kiln::invalid_argument);
  a.probe_n = 10;
  a.build_keys.offset = 1;
  EXPECT_THROW(join_keys(q, a), kiln::invalid_argument);
  a.build_keys = {};
  EXPECT_THROW(join_keys(q, a), kiln::invalid_argument);
  a.build_keys = {k.view().memory(), 0};
  a.key_type = scalar_type::u64;  // 10 u32 are 5 u64
  EXPECT_THROW(join_keys(q, a), kiln::invalid_argument);
  a.key_type = scalar_type::u32;
  a.probe_out = a.build_out = {out.view().memory(), 0};
  EXPECT_THROW(join_keys(q, a), kiln::invalid_argument);
  a.probe_out = a.build_out = {};
  if (auto o = other()) {
    kiln::buffer<std::uint32_t> elsewhere(*o, 10);
    a.probe_keys = {elsewhere.view().memory(), 0};
    EXPECT_THROW(join_keys(q, a), kiln::device_mismatch);
  }
}

// The CUDA dialect of the kernel text compiles (NVRTC, compile-only where there is no GPU).
TEST(JoinCompile, CudaDialectOfTheTexts) {
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::join_source(1, 4)));
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::join_source(8, 8)));
}

KILN_INSTANTIATE_PER_DEVICE(JoinTest);

}  // namespace
