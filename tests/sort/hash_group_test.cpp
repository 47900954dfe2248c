// Device hash group-by (src/sort/hash_group.hpp) against a host reference (std::map by the
// canonical key) on every device: every key type with 1, 7, 1000 and ~50K distinct keys in
// random and in sorted order, float keys with NaNs of several payloads, +-0.0 and +-inf,
// 64-bit keys equal to the table's "empty" word, every exact aggregate at once, keys only,
// empty input, giving up above max_groups, bad input.
#include "sort/hash_group.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "conformance/backends.hpp"

namespace {

using kiln::scalar_type;
using kiln::detail::hash_group;
using kiln::detail::hash_group_args;
using kiln::detail::hash_group_exact;
using kiln::detail::hash_group_result;
using kiln::detail::run_op;
using kiln::detail::run_value;
using kiln::detail::sort_operand;

template <class K>
using stored = std::conditional_t<std::is_same_v<K, bool>, std::uint8_t, K>;

template <class T>
sort_operand operand(const kiln::buffer<T>& b) {
  return {b.view().memory(), 0};
}

template <class T>
std::vector<T> read(kiln::queue& q, const std::shared_ptr<kiln::detail::memory_impl>& m,
                    std::uint64_t n) {
  std::vector<T> out(n);
  if (n) kiln::detail::copy_d2h(*q.impl(), out.data(), *m, 0, n * sizeof(T));
  q.finish();
  return out;
}

// The grouping order: floats by value with -0.0 == +0.0, every NaN one key, last.
template <class K>
struct order {
  bool operator()(K a, K b) const {
    if constexpr (std::is_floating_point_v<K>) {
      if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
    }
    return a < b;
  }
};

struct values {
  std::vector<std::int32_t> vi;
  std::vector<float> vf;
  std::vector<double> vd;
  std::vector<std::int64_t> vl;
  std::vector<std::uint64_t> vu;
  std::vector<std::uint8_t> vb;
};

// The reference of one group.
template <class K>
struct group {
  stored<K> key{};
  bool key_set = false;
  std::uint64_t count = 0;
  std::int64_t isum = 0, bsum = 0;
  std::uint32_t isum32 = 0;
  float fmin = 0, fmax = 0;
  double dmin = 0, dmax = 0;
  std::int32_t imax = 0, imin = 0;
  std::int64_t lmin = 0;
  std::uint64_t umax = 0;
  std::uint64_t first = 0;
};

template <class F>
F fmin_nan(F a, F b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<F>::quiet_NaN() : std::min(a, b);
}
template <class F>
F fmax_nan(F a, F b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<F>::quiet_NaN() : std::max(a, b);
}

// The columns, in this order.
std::vector<run_value> columns(const std::vector<sort_operand>& in) {
  const auto i32 = scalar_type::i32, f32 = scalar_type::f32, f64 = scalar_type::f64;
  return {{{}, f32, run_op::count, scalar_type::u64},
          {in[0], i32, run_op::sum, scalar_type::i64},
          {in[0], i32, run_op::sum, i32},
          {in[5], scalar_type::boolean, run_op::sum, scalar_type::i64},
          {in[1], f32, run_op::min, f32},
          {in[1], f32, run_op::max, f64},
          {in[2], f64, run_op::min, f64},
          {in[2], f64, run_op::max, f32},
          {in[0], i32, run_op::max, i32},
          {in[0], i32, run_op::min, f64},
          {in[3], scalar_type::i64, run_op::min, scalar_type::i64},
          {in[4], scalar_type::u64, run_op::max, scalar_type::u64},
          {in[0], i32, run_op::first, i32},
          {in[1], f32, run_op::first, f64},
          {in[5], scalar_type::boolean, run_op::first, scalar_type::boolean}};
}

class HashGroupTest : public conformance::DeviceTest {
 protected:
  kiln::detail::radix_path path_ = kiln::detail::radix_path::automatic;

  // `distinct` keys of type K (fewer where the type has fewer), specials included.
  template <class K>
  static std::vector<stored<K>> pool(std::uint64_t distinct, std::mt19937_64& rng) {
    std::vector<stored<K>> p;
    if constexpr (std::is_same_v<K, bool>) {
      p = {0, 1};
    } else if constexpr (std::is_floating_point_v<K>) {
      using U = std::conditional_t<sizeof(K) == 4, std::uint32_t, std::uint64_t>;
      const K nan = std::numeric_limits<K>::quiet_NaN();
      const K inf = std::numeric_limits<K>::infinity();
      const K specials[] = {nan,
                            -inf,
                            inf,
                            K(0),
                            K(-0.0),
                            -nan,
                            std::bit_cast<K>(std::bit_cast<U>(nan) | 3),
                            std::bit_cast<K>(~U(0))};
      std::map<K, int, order<K>> seen;  // distinct as groups
      for (K s : specials)
        if (seen.size() < distinct) {
          if (!seen.count(s)) seen[s] = 1;
          p.push_back(s);  // NaNs and zeros of several bits: one group each
        }
      while (seen.size() < distinct) {
        const K k = K(std::int64_t(rng() % 4000001) - 2000000) / K(8);
        if (!seen.count(k)) {
          seen[k] = 1;
          p.push_back(k);
        }
      }
    } else {
      std::map<K, int> seen;
      const std::uint64_t range = sizeof(K) < 4 ? std::uint64_t(1) << (8 * sizeof(K)) : ~0ull;
      distinct = std::min(distinct, range);
      if constexpr (sizeof(K) == 8) {  // the table's "empty" word, and its neighbours
        for (K k : {K(~0ull), K(~1ull), K(0)}) {
          seen[k] = 1;
          p.push_back(k);
        }
      }
      while (seen.size() < distinct) {
        const K k = static_cast<K>(rng());
        if (!seen.count(k)) {
          seen[k] = 1;
          p.push_back(k);
        }
      }
      p.resize(std::min<std::size_t>(p.size(), distinct));
    }
    return p;
  }

  static values values_of(std::uint64_t n, std::mt19937_64& rng) {
    values v;
    v.vi.resize(n);
    v.vf.resize(n);
    v.vd.resize(n);
    v.vl.resize(n);
    v.vu.resize(n);
    v.vb.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      v.vi[i] = static_cast<std::int32_t>(rng());  // sums wrap in 32 bits
      v.vf[i] = float(std::int64_t(rng() % 80001) - 40000) / 400.0f;
      v.vd[i] = double(std::int64_t(rng() % 2000001) - 1000000) / 3.0;
      v.vl[i] = static_cast<std::int64_t>(rng());
      v.vu[i] = rng();
      v.vb[i] = rng() % 2;
      if (rng() % 211 == 0) v.vf[i] = rng() % 2 ? std::numeric_limits<float>::quiet_NaN() : -0.0f;
      if (rng() % 307 == 0) v.vd[i] = rng() % 2 ? -0.0 : std::numeric_limits<double>::infinity();
    }
    return v;
  }

  // Groups keys (and the values, unless keys_only) on the device and checks every group.
  template <class K>
  void check(const std::vector<stored<K>>& keys, const values& v, bool keys_only = false) {
    using S = stored<K>;
    const std::uint64_t n = keys.size();
    SCOPED_TRACE(::testing::Message() << kiln::type_name(kiln::scalar_type_of<K>) << " n " << n
                                      << (keys_only ? " keys only" : ""));
    kiln::queue& q = dev().default_queue();
    const std::uint64_t cap = std::max<std::uint64_t>(n, 1);
    kiln::buffer<S> kb(dev(), cap);
    kiln::buffer<std::int32_t> bi(dev(), cap);
    kiln::buffer<float> bf(dev(), cap);
    kiln::buffer<double> bd(dev(), cap);
    kiln::buffer<std::int64_t> bl(dev(), cap);
    kiln::buffer<std::uint64_t> bu(dev(), cap);
    kiln::buffer<std::uint8_t> bb(dev(), cap);
    if (n) kb.view().subview(0, n).copy_from(keys);
    if (n && !keys_only) {
      bi.view().subview(0, n).copy_from(v.vi);
      bf.view().subview(0, n).copy_from(v.vf);
      bd.view().subview(0, n).copy_from(v.vd);
      bl.view().subview(0, n).copy_from(v.vl);
      bu.view().subview(0, n).copy_from(v.vu);
      bb.view().subview(0, n).copy_from(v.vb);
    }
    hash_group_args a;
    a.key_type = kiln::scalar_type_of<K>;
    a.n = n;
    a.keys = operand(kb);
    a.path = path_;
    if (!keys_only)
      a.values =
          columns({operand(bi), operand(bf), operand(bd), operand(bl), operand(bu), operand(bb)});
    const hash_group_result r = hash_group(q, a);
    ASSERT_TRUE(r.done);

    std::map<K, group<K>, order<K>> ref;
    for (std::uint64_t i = 0; i < n; ++i) {
      const K key = K(keys[i]);
      group<K>& g = ref[key];
      // The sort path's key: -0.0 when one occurs (it sorts first), else the first row's.
      if (!g.key_set || (key == 0 && std::signbit(key) && !std::signbit(K(g.key)))) g.key = keys[i];
      g.key_set = true;
      if (keys_only) continue;
      if (g.count++ == 0) {
        g.first = i;
        g.fmin = g.fmax = v.vf[i];
        g.dmin = g.dmax = v.vd[i];
        g.imax = g.imin = v.vi[i];
        g.lmin = v.vl[i];
        g.umax = v.vu[i];
      }
      g.isum += v.vi[i];
      g.isum32 += std::uint32_t(v.vi[i]);
      g.bsum += v.vb[i];
      g.fmin = fmin_nan(g.fmin, v.vf[i]);
      g.fmax = fmax_nan(g.fmax, v.vf[i]);
      g.dmin = fmin_nan(g.dmin, v.vd[i]);
      g.dmax = fmax_nan(g.dmax, v.vd[i]);
      g.imax = std::max(g.imax, v.vi[i]);
      g.imin = std::min(g.imin, v.vi[i]);
      g.lmin = std::min(g.lmin, v.vl[i]);
      g.umax = std::max(g.umax, v.vu[i]);
    }
    ASSERT_EQ(r.groups.runs, ref.size());
    ASSERT_EQ(r.groups.values.size(), a.values.size());
    const std::uint64_t m = ref.size();
    const std::vector<S> gk = read<S>(q, r.groups.keys, m);
    std::vector<std::vector<char>> col(a.values.size());
    for (std::size_t j = 0; j < a.values.size(); ++j)
      col[j] = read<char>(q, r.groups.values[j], m * kiln::size_of(a.values[j].out_type));
    auto at = [&](std::size_t j, std::uint64_t g, auto type) {
      decltype(type) x;
      std::memcpy(&x, col[j].data() + g * sizeof x, sizeof x);
      return x;
    };
    auto same = [](double got, double want) {
      return std::isnan(want) ? std::isnan(got) : got == want;
    };
    std::uint64_t g = 0, bad = 0;
    for (const auto& [key, w] : ref) {
      std::ostringstream why;
      if (std::memcmp(&gk[g], &w.key, sizeof(S)) != 0)
        why << " key " << +gk[g] << " want " << +w.key << ";";
      if (!keys_only) {
        if (at(0, g, std::uint64_t()) != w.count) why << " count " << at(0, g, std::uint64_t());
        if (at(1, g, std::int64_t()) != w.isum) why << " i64 sum " << at(1, g, std::int64_t());
        if (std::uint32_t(at(2, g, std::int32_t())) != w.isum32) why << " i32 sum;";
        if (at(3, g, std::int64_t()) != w.bsum) why << " bool sum;";
        if (!same(at(4, g, float()), w.fmin)) why << " f32 min " << at(4, g, float()) << ";";
        if (!same(at(5, g, double()), w.fmax)) why << " f32 max " << at(5, g, double()) << ";";
        if (!same(at(6, g, double()), w.dmin)) why << " f64 min " << at(6, g, double()) << ";";
        if (!same(at(7, g, float()), float(w.dmax))) why << " f64 max " << at(7, g, float()) << ";";
        if (at(8, g, std::int32_t()) != w.imax) why << " i32 max;";
        if (at(9, g, double()) != double(w.imin)) why << " i32 min;";
        if (at(10, g, std::int64_t()) != w.lmin) why << " i64 min;";
        if (at(11, g, std::uint64_t()) != w.umax) why << " u64 max;";
        if (at(12, g, std::int32_t()) != v.vi[w.first]) why << " i32 first;";
        if (!same(at(13, g, double()), v.vf[w.first])) why << " f32 first;";
        if (at(14, g, std::uint8_t()) != std::uint8_t(v.vb[w.first] != 0)) why << " bool first;";
      }
      if (!why.str().empty() && bad++ < 5) ADD_FAILURE() << "group " << g << ":" << why.str();
      ++g;
    }
  }

  // n rows drawing from `distinct` keys at random (sorted: in ascending order).
  template <class K>
  void check_draws(std::uint64_t n, std::uint64_t distinct, bool sorted, std::uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << distinct << " distinct" << (sorted ? " sorted" : ""));
    std::mt19937_64 rng(seed);
    const std::vector<stored<K>> p = pool<K>(distinct, rng);
    std::vector<stored<K>> keys(n);
    for (auto& k : keys) k = p[rng() % p.size()];
    if (sorted)
      std::stable_sort(keys.begin(), keys.end(),
                       [](stored<K> a, stored<K> b) { return order<K>()(K(a), K(b)); });
    check<K>(keys, values_of(n, rng));
  }

  template <class K>
  void every_count() {
    const std::uint64_t n = size_for(40000, 2000003);
    std::uint64_t seed = 1;
    for (std::uint64_t d : {1, 7, 1000, 50000})
      check_draws<K>(d == 50000 ? 2 * n : n, d, false, seed++);
    check_draws<K>(n, 7, true, seed++);
  }
};

TEST_P(HashGroupTest, IntegerKeysOfEveryWidth) {
  every_count<bool>();
  every_count<std::int8_t>();
  every_count<std::uint8_t>();
  every_count<std::int16_t>();
  every_count<std::uint16_t>();
  every_count<std::int32_t>();
  every_count<std::uint32_t>();
  every_count<std::int64_t>();
  every_count<std::uint64_t>();
}

// NaNs of several payloads and signs are one group (its key the first NaN's bits), -0.0 and
// +0.0 one group (-0.0 when one occurs), +-inf; all-ones f64 bits (a NaN) too.
TEST_P(HashGroupTest, FloatKeysWithNanZerosAndInfinities) {
  every_count<float>();
  every_count<double>();
  std::mt19937_64 rng(3);
  const std::vector<float> zeros = {0.0f, -0.0f, 0.0f, -0.0f};
  check<float>(zeros, values_of(zeros.size(), rng));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> nans = {-nan, nan, std::bit_cast<float>(0x7F800001u), 1.0f};
  check<float>(nans, values_of(nans.size(), rng));
}

// The local-memory kernel (GPUs by default; PoCL here): groups that fit the work-group's table,
// and more than fit it (runs that find no local entry go to the global table).
TEST_P(HashGroupTest, TiledKernelWhereBarriersExist) {
  KILN_REQUIRE_FEATURE(dev(), barrier, "the tiled kernel uses local memory and barriers");
  path_ = kiln::detail::radix_path::tiled;
  const std::uint64_t n = size_for(30000, 2000003);
  std::uint64_t seed = 10;
  for (std::uint64_t d : {1, 7, 1000, 5000}) {
    check_draws<std::int32_t>(n, d, false, seed++);
    check_draws<double>(n, d, d == 7, seed++);
  }
  check_draws<std::uint64_t>(n, 300, false, seed++);
  check_draws<bool>(n, 2, true, seed++);
}

// The global-table kernel alone (GPUs without barriers; CPU devices take private tables).
TEST_P(HashGroupTest, GlobalTableKernel) {
  path_ = kiln::detail::radix_path::chunked;
  check_draws<std::int64_t>(size_for(20000, 2000003), 7, false, 21);
  check_draws<float>(size_for(20000, 2000003), 1000, false, 22);
}

TEST_P(HashGroupTest, KeysOnlyAndEmpty) {
  std::mt19937_64 rng(4);
  const std::vector<std::uint32_t> p = pool<std::uint32_t>(1000, rng);
  std::vector<std::uint32_t> keys(30011);
  for (auto& k : keys) k = p[rng() % p.size()];
  check<std::uint32_t>(keys, values{}, true);
  check<double>({}, values{});
  check<std::int8_t>({}, values{}, true);
}

TEST_P(HashGroupTest, GivesUpAboveMaxGroups) {
  kiln::queue& q = dev().default_queue();
  std::vector<kiln::detail::radix_path> paths = {kiln::detail::radix_path::automatic,
                                                 kiln::detail::radix_path::chunked};
  if (dev().supports(kiln::feature::barrier)) paths.push_back(kiln::detail::radix_path::tiled);
  for (kiln::detail::radix_path path : paths)
    for (std::uint64_t distinct : {100, 101, 5000}) {
      std::vector<std::uint64_t> keys(20000);
      for (std::size_t i = 0; i < keys.size(); ++i)
        keys[i] = (i % distinct) * 0x9E3779B97F4A7C15ull;
      kiln::buffer<std::uint64_t> kb(dev(), keys.size());
      kb.copy_from(keys);
      kiln::buffer<std::int32_t> vi(dev(), keys.size());
      vi.fill(1);
      hash_group_args a;
      a.key_type = scalar_type::u64;
      a.n = keys.size();
      a.keys = operand(kb);
      a.values = {{operand(vi), scalar_type::i32, run_op::sum, scalar_type::i64}};
      a.max_groups = 100;
      a.path = path;
      const hash_group_result r = hash_group(q, a);
      EXPECT_EQ(r.done, distinct <= 100) << distinct << " distinct, path " << int(path);
      if (r.done) {
        EXPECT_EQ(r.groups.runs, distinct);
        const auto sums = read<std::int64_t>(q, r.groups.values[0], distinct);
        EXPECT_EQ(sums[0], 200);
      }
    }
}

TEST_P(HashGroupTest, BadInputIsRefusedClearly) {
  kiln::queue& q = dev().default_queue();
  kiln::buffer<std::uint32_t> keys(dev(), 10);
  kiln::buffer<float> vals(dev(), 10);
  keys.fill(1);
  vals.fill(1);
  hash_group_args a;
  a.n = 10;
  a.keys = operand(keys);
  a.values = {{operand(vals), scalar_type::f32, run_op::max, scalar_type::f32}};
  EXPECT_NO_THROW(hash_group(q, a));
  auto expect = [&](auto&& change, auto exception) {
    hash_group_args b = a;
    change(b);
    EXPECT_THROW(hash_group(q, b), decltype(exception));
  };
  expect([](auto& b) { b.values[0].op = run_op::sum; }, kiln::invalid_argument(""));  // float sum
  expect([](auto& b) { b.values[0].op = run_op::mean; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.values[0].op = run_op(17); }, kiln::invalid_argument(""));
  expect([](auto& b) { b.values[0].out_type = scalar_type::boolean; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.key_type = scalar_type::f16; }, kiln::unsupported(""));
  expect([](auto& b) { b.values[0].type = scalar_type::bf16; }, kiln::unsupported(""));
  expect([](auto& b) { b.keys = {}; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.values[0].in = {}; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.n = 11; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.max_groups = (std::uint64_t(1) << 30) + 1; }, kiln::invalid_argument(""));
  if (auto o = other()) {
    kiln::buffer<float> elsewhere(*o, 10);
    expect([&](auto& b) { b.values[0].in = operand(elsewhere); }, kiln::device_mismatch(""));
  }
}

TEST(HashGroupExact, OnlyOrderIndependentAggregates) {
  const auto i32 = scalar_type::i32, f32 = scalar_type::f32, f64 = scalar_type::f64;
  EXPECT_TRUE(hash_group_exact({{}, f32, run_op::count, scalar_type::u64}));
  EXPECT_TRUE(hash_group_exact({{}, i32, run_op::sum, scalar_type::i64}));
  EXPECT_TRUE(hash_group_exact({{}, scalar_type::boolean, run_op::sum, scalar_type::u32}));
  EXPECT_TRUE(hash_group_exact({{}, f32, run_op::min, f64}));
  EXPECT_TRUE(hash_group_exact({{}, f64, run_op::max, f64}));
  EXPECT_TRUE(hash_group_exact({{}, f32, run_op::first, f32}));
  EXPECT_FALSE(hash_group_exact({{}, f32, run_op::sum, f64}));
  EXPECT_FALSE(hash_group_exact({{}, i32, run_op::sum, f64}));  // rounds in row order
  EXPECT_FALSE(hash_group_exact({{}, i32, run_op::mean, f64}));
}

// The CUDA dialect of the texts compiles (NVRTC, compile-only where there is no GPU).
TEST(HashGroupCompile, CudaDialectOfTheTexts) {
  std::vector<sort_operand> none(6);
  for (std::uint32_t kb : {1u, 2u, 4u, 8u})
    EXPECT_NO_THROW(
        conformance::compile_everywhere(kiln::detail::hash_group_source(kb, columns(none))));
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::hash_group_source(4, {})));
  // The local-memory kernel: 15 columns in 256 entries, one column in 2048.
  EXPECT_NO_THROW(
      conformance::compile_everywhere(kiln::detail::hash_group_source(4, columns(none), 256)));
  EXPECT_NO_THROW(conformance::compile_everywhere(
      kiln::detail::hash_group_source(8, {columns(none)[0]}, 2048)));
}

KILN_INSTANTIATE_PER_DEVICE(HashGroupTest);

}  // namespace
