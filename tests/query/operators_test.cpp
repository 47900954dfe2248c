// Every stage and terminal of kiln::query, for every element type it applies to, at sizes from
// empty to odd multi-block ones, on every device, against std:: references on the host.
// Integers compare exactly; floating-point sums and scans within sum_tolerance (fixture).
#include <numeric>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

class OperatorsTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(OperatorsTest);

// One seed per (test, element type, size): a failure reproduces on its own.
template <class T>
std::uint64_t seed(int test, std::uint64_t n) {
  return (static_cast<std::uint64_t>(test) << 40) ^
         (static_cast<std::uint64_t>(kiln::scalar_type_of<T>) << 32) ^ n;
}

template <class T>
T pick(const std::vector<T>& x, std::uint64_t salt) {
  return x.empty() ? T(0) : T(x[(salt * 2654435761u) % x.size()]);
}

TEST_P(OperatorsTest, TransformAndIdentity) {
  for_each_type(all_types{}, [&]<class T>() {
    const T a = T(3), b = T(7);
    using R = decltype(a / a + b);  // the same C++ expression's type: int for small types
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(1, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      if (type_in<T>(types_a{})) {
        EXPECT_TRUE(elements_equal(xs | kiln::to_vector(), x));
      }
      std::vector<R> want(n);
      for (std::uint64_t i = 0; i < n; ++i) want[i] = T(x[i]) / a + b;
      const std::vector<R> got = xs | kiln::transform(_1 / a + b) | kiln::to_vector();
      EXPECT_TRUE(elements_equal(got, want));
    }
  });
}

// Order-preserving filter, through to_vector and to_buffer, with thresholds letting about half,
// almost all and none of the elements through.
TEST_P(OperatorsTest, Filter) {
  for_each_type(all_types{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(2, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      for (T t : {pick(x, n), std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max()}) {
        SCOPED_TRACE("filter(_1 > " + show(t) + ")");
        std::vector<T> want;
        std::copy_if(x.begin(), x.end(), std::back_inserter(want), [&](T v) { return v > t; });
        EXPECT_TRUE(elements_equal(xs | kiln::filter(_1 > t) | kiln::to_vector(), want));
        const kiln::buffer<T> out = xs | kiln::filter(_1 > t) | kiln::to_buffer();
        EXPECT_EQ(out.size(), want.size());
        EXPECT_TRUE(elements_equal(out.to_vector(), want));
        if (!out.empty()) {
          EXPECT_TRUE(out.get_device() == dev());
        }
      }
    }
  });
}

// skip(s) | take(k) with counts of 0, inside and beyond the sequence (std::views semantics).
TEST_P(OperatorsTest, SkipTake) {
  const std::uint64_t big = std::uint64_t{1} << 40;
  const std::pair<std::uint64_t, std::uint64_t> cases[] = {
      {0, 0}, {1, 100}, {300, big}, {big, 1}, {3, 4096}};
  for_each_type(types_a{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(3, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      for (auto [s, k] : cases) {
        SCOPED_TRACE("skip(" + std::to_string(s) + ") | take(" + std::to_string(k) + ")");
        const std::uint64_t first = std::min(s, n), last = first + std::min(k, n - first);
        const std::vector<T> want(x.begin() + first, x.begin() + last);
        EXPECT_TRUE(elements_equal(xs | kiln::skip(s) | kiln::take(k) | kiln::to_vector(), want));
      }
    }
  });
}

// enumerate() prepends the int64 position as _1.
TEST_P(OperatorsTest, Enumerate) {
  for_each_type(types_b{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(4, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      const std::int64_t m = 3, r = 1;
      const T t = pick(x, n);
      std::vector<T> every_third;
      std::vector<std::int64_t> signed_pos(n);
      for (std::uint64_t i = 0; i < n; ++i) {
        if (std::int64_t(i) % m == r) every_third.push_back(x[i]);
        signed_pos[i] = T(x[i]) > t ? std::int64_t(i) : -std::int64_t(i);
      }
      auto q = xs | kiln::enumerate() | kiln::filter(_1 % m == r) | kiln::transform(_2);
      EXPECT_TRUE(elements_equal(std::move(q) | kiln::to_vector(), every_third));
      const std::vector<std::int64_t> got = xs | kiln::enumerate() |
                                            kiln::transform(kiln::select(_2 > t, _1, -_1)) |
                                            kiln::to_vector();
      EXPECT_TRUE(elements_equal(got, signed_pos));
    }
  });
}

TEST_P(OperatorsTest, InclusiveScans) {
  for_each_type(all_types{}, [&]<class T>() {
    using S = sum_type<T>;
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(5, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      const std::vector<S> sums = xs | kiln::inclusive_scan() | kiln::to_vector();
      if constexpr (std::is_floating_point_v<T>) {
        std::vector<double> want(n);
        std::inclusive_scan(x.begin(), x.end(), want.begin(), std::plus<double>(), 0.0);
        EXPECT_TRUE(scan_near(sums, want, max_abs_of(x)));
      } else {
        std::vector<S> want(n);
        std::uint64_t acc = 0;  // wrapping, like a 64-bit device accumulator
        for (std::uint64_t i = 0; i < n; ++i) want[i] = S(acc += std::uint64_t(S(x[i])));
        EXPECT_TRUE(elements_equal(sums, want));
      }
      if constexpr (type_in<T>(types_a{})) {  // an operation of _1, _2 in the element type
        const std::vector<T> maxima =
            xs | kiln::inclusive_scan(kiln::max(_1, _2)) | kiln::to_vector();
        std::vector<T> want(n);
        for (std::uint64_t i = 0; i < n; ++i) want[i] = i ? std::max<T>(want[i - 1], x[i]) : x[i];
        EXPECT_TRUE(elements_equal(maxima, want));
      }
    }
  });
}

// exclusive_scan(init) scans in init's type: int64 for signed and bool, uint64 for unsigned,
// double for float (so float elements are summed in double).
TEST_P(OperatorsTest, ExclusiveScans) {
  for_each_type(types_b{}, [&]<class T>() {
    using I = std::conditional_t<std::is_floating_point_v<T>, double, sum_type<T>>;
    const I init = std::is_floating_point_v<T> ? I(0.5) : std::is_signed_v<I> ? I(-3) : I(3);
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(6, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      const std::vector<I> sums = xs | kiln::exclusive_scan(init) | kiln::to_vector();
      if constexpr (std::is_floating_point_v<T>) {
        std::vector<double> want(n);
        std::exclusive_scan(x.begin(), x.end(), want.begin(), 0.5, std::plus<double>());
        EXPECT_TRUE(scan_near(sums, want, max_abs_of(x)));
      } else {
        std::vector<I> want(n);
        std::uint64_t acc = std::uint64_t(init);
        for (std::uint64_t i = 0; i < n; ++i) {
          want[i] = I(acc);
          acc += std::uint64_t(I(x[i]));
        }
        EXPECT_TRUE(elements_equal(sums, want));
      }
      const T start = pick(x, n + 1);
      const std::vector<T> minima =
          xs | kiln::exclusive_scan(start, kiln::min(_1, _2)) | kiln::to_vector();
      std::vector<T> want(n);
      for (std::uint64_t i = 0; i < n; ++i)
        want[i] = i ? std::min<T>(want[i - 1], x[i - 1]) : start;
      EXPECT_TRUE(elements_equal(minima, want));
    }
  });
}

TEST_P(OperatorsTest, Count) {
  for_each_type(types_a{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(7, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      static_assert(std::is_same_v<decltype(xs | kiln::count()), std::uint64_t>);
      EXPECT_EQ(xs | kiln::count(), n);
      for (T t : {pick(x, n), std::numeric_limits<T>::max()}) {
        const auto want = std::count_if(x.begin(), x.end(), [&](T v) { return v > t; });
        EXPECT_EQ(xs | kiln::filter(_1 > t) | kiln::count(), std::uint64_t(want)) << show(t);
      }
    }
  });
}

// Values for products that cannot overflow a signed 64-bit product: ones, with at most 30
// entries of magnitude 2 (-1 and the maximum for unsigned types, which wrap by definition);
// floating point in [0.99, 1.01].
template <class T>
std::vector<T> product_data(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> out(n, T(1));
  if constexpr (std::is_floating_point_v<T>) {
    for (std::size_t i = 0; i < n; ++i)
      out[i] = static_cast<T>(std::uniform_real_distribution<double>(0.99, 1.01)(rng));
  } else {
    const T special[] = {T(2), static_cast<T>(-1), static_cast<T>(-2)};
    for (int k = 0; k < 30 && n; ++k) out[rng() % n] = special[rng() % 3];
  }
  return out;
}

// Sums in the sum type; floating-point sums give the same bits on every run.
TEST_P(OperatorsTest, Sum) {
  for_each_type(all_types{}, [&]<class T>() {
    using S = sum_type<T>;
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(8, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      static_assert(std::is_same_v<decltype(xs | kiln::sum()), S>);
      const S sum = xs | kiln::sum();
      if constexpr (std::is_floating_point_v<T>) {
        const double want = ref_fsum(x);
        EXPECT_NEAR(sum, want, sum_tolerance<T>(n, max_abs_of(x), want));
        const S again = xs | kiln::sum();
        EXPECT_EQ(std::memcmp(&sum, &again, sizeof sum), 0) << show(sum) << " then " << show(again);
      } else {
        EXPECT_EQ(sum, ref_sum(x));
      }
    }
  });
}

TEST_P(OperatorsTest, Product) {
  for_each_type(types_b{}, [&]<class T>() {
    using S = sum_type<T>;
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> p = product_data<T>(n, seed<T>(9, n));
      const kiln::buffer<T> ps = upload(dev(), p);
      static_assert(std::is_same_v<decltype(ps | kiln::product()), S>);
      const S prod = ps | kiln::product();
      if constexpr (std::is_floating_point_v<T>) {
        long double want = 1;
        for (T v : p) want *= v;
        // A product's relative error grows like a sum's absolute error of terms of size 1.
        EXPECT_NEAR(prod / double(want), 1.0, 4 * sum_tolerance<T>(n, 1.0));
      } else {
        std::uint64_t want = 1;
        for (T v : p) want *= std::uint64_t(S(v));
        EXPECT_EQ(prod, S(want));
      }
    }
  });
}

// min/max (values) and argmin/argmax (first position on ties), on random data and on data
// full of ties; nullopt when empty.
TEST_P(OperatorsTest, MinMaxArgMinArgMax) {
  for_each_type(types_ab{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      for (const std::vector<T>& x : {data<T>(n, seed<T>(10, n)), tie_data<T>(n, seed<T>(11, n))}) {
        const kiln::buffer<T> xs = upload(dev(), x);
        const std::optional<T> mn = xs | kiln::min(), mx = xs | kiln::max();
        const auto lo = std::min_element(x.begin(), x.end());
        const auto hi = std::max_element(x.begin(), x.end());  // the first largest, too
        EXPECT_EQ(mn, n ? std::optional<T>(*lo) : std::nullopt);
        EXPECT_EQ(mx, n ? std::optional<T>(*hi) : std::nullopt);
        if constexpr (type_in<T>(types_a{})) {
          using pos = std::optional<std::uint64_t>;
          EXPECT_EQ(xs | kiln::argmin(), n ? pos(lo - x.begin()) : std::nullopt);
          EXPECT_EQ(xs | kiln::argmax(), n ? pos(hi - x.begin()) : std::nullopt);
        }
      }
    }
  });
}

TEST_P(OperatorsTest, Average) {
  for_each_type(types_a{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(12, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      const std::optional<double> avg = xs | kiln::average();
      if (n == 0) {
        EXPECT_FALSE(avg.has_value());
        continue;
      }
      ASSERT_TRUE(avg.has_value());
      long double s = 0;
      for (T v : x) s += static_cast<long double>(v);
      // Accumulated in double: relative error far below 1e-12 of the largest term.
      EXPECT_NEAR(*avg, double(s / n), 1e-12 * std::max(1.0, max_abs_of(x)));
    }
  });
}

// any/all convert each element to bool: -0.0 is false, NaN is true.
TEST_P(OperatorsTest, AnyAll) {
  for_each_type(type_list<bool, std::int8_t, std::uint64_t, float, double>{}, [&]<class T>() {
    const T zero = std::is_floating_point_v<T> ? T(-0.0) : T(0);
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      std::vector<T> nonzero(n, T(1)), one_zero = data<T>(n, seed<T>(13, n)), zeros(n, zero);
      if constexpr (!std::is_same_v<T, bool>) nonzero = data<T>(n, seed<T>(14, n));
      if constexpr (std::is_floating_point_v<T>)
        if (n) nonzero[n / 3] = std::numeric_limits<T>::quiet_NaN();
      if (n) one_zero[(n * 7) / 9] = zero;
      const bool want_any[] = {
          n > 0,
          std::any_of(one_zero.begin(), one_zero.end(), [](T v) { return static_cast<bool>(v); }),
          false};
      const bool want_all[] = {true, n == 0, n == 0};
      int k = 0;
      for (const std::vector<T>* x : {&nonzero, &one_zero, &zeros}) {
        SCOPED_TRACE(k == 0 ? "no zero" : k == 1 ? "one zero" : "all zero");
        const kiln::buffer<T> xs = upload(dev(), *x);
        static_assert(std::is_same_v<decltype(xs | kiln::any()), bool>);
        EXPECT_EQ(xs | kiln::any(), want_any[k]);
        EXPECT_EQ(xs | kiln::all(), want_all[k]);
        ++k;
      }
    }
  });
}

// reduce(init, op): std::reduce's contract (init folded in once, op associative and
// commutative). Exact ops: xor for integers and bool, max for floating point.
TEST_P(OperatorsTest, CustomReduce) {
  for_each_type(types_a{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(15, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      if constexpr (std::is_floating_point_v<T>) {
        const T init = n % 2 ? T(-1000) : T(50);
        T want = init;
        for (T v : x) want = std::max(want, v);
        EXPECT_EQ(xs | kiln::reduce(init, kiln::max(_1, _2)), want);
      } else {
        const T init = static_cast<T>(0x5b);
        T want = init;
        for (T v : x) want = static_cast<T>(want ^ v);
        static_assert(std::is_same_v<decltype(xs | kiln::reduce(init, _1 ^ _2)), T>);
        EXPECT_EQ(xs | kiln::reduce(init, _1 ^ _2), want);
      }
    }
  });
}

// The accumulator has init's type: int16 elements summed in int64, float elements in double.
TEST_P(OperatorsTest, ReduceAccumulatesInInitType) {
  for (std::uint64_t n : sizes()) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = data<std::int16_t>(n, n + 16);
    const auto f = data<float>(n, n + 17);
    const kiln::buffer<std::int16_t> xs = upload(dev(), x);
    const kiln::buffer<float> fs = upload(dev(), f);
    const std::int64_t got = xs | kiln::reduce(std::int64_t{100}, _1 + _2);
    EXPECT_EQ(got, 100 + ref_sum(x));
    const double fsum = fs | kiln::reduce(0.25, _1 + _2);
    EXPECT_NEAR(fsum, 0.25 + ref_fsum(f), sum_tolerance<double>(n, 100));
  }
}

// Positions after a filter count the survivors (std::views semantics): take, skip, enumerate,
// _i, argmin and scans after a filter. These chains materialise the filtered prefix first.
TEST_P(OperatorsTest, PositionsAfterFilterCountSurvivors) {
  for_each_type(type_list<std::int32_t, float>{}, [&]<class T>() {
    for (std::uint64_t n : sizes()) {
      SCOPED_TRACE("n = " + std::to_string(n));
      const std::vector<T> x = data<T>(n, seed<T>(18, n));
      const kiln::buffer<T> xs = upload(dev(), x);
      const T t = pick(x, n);
      std::vector<T> kept;
      std::copy_if(x.begin(), x.end(), std::back_inserter(kept), [&](T v) { return v > t; });
      const std::uint64_t m = kept.size(), k = m / 2 + 1;
      auto check_launches = [&] {
        // With no survivors the work after the materialised prefix is empty and not launched.
        if (m > 0) {
          EXPECT_GE(stats().kernel_launches, 2u) << "positions after a filter";
        }
      };
      const std::vector<T> head = xs | kiln::filter(_1 > t) | kiln::take(k) | kiln::to_vector();
      check_launches();
      EXPECT_TRUE(
          elements_equal(head, std::vector<T>(kept.begin(), kept.begin() + std::min(k, m))));
      const std::vector<T> tail = xs | kiln::filter(_1 > t) | kiln::skip(k) | kiln::to_vector();
      EXPECT_TRUE(elements_equal(tail, std::vector<T>(kept.begin() + std::min(k, m), kept.end())));
      std::vector<double> want_en(m), want_i(m);
      for (std::uint64_t i = 0; i < m; ++i) {
        want_en[i] = 2.0 * double(kept[i]) + double(i);
        want_i[i] = double(kept[i]) - double(i);
      }
      const std::vector<double> en =
          xs | kiln::filter(_1 > t) | kiln::enumerate() |
          kiln::transform(2.0 * kiln::cast<double>(_2) + kiln::cast<double>(_1)) |
          kiln::to_vector();
      check_launches();
      EXPECT_TRUE(elements_equal(en, want_en));
      const std::vector<double> idx =
          xs | kiln::filter(_1 > t) |
          kiln::transform(kiln::cast<double>(_1) - kiln::cast<double>(_i)) | kiln::to_vector();
      EXPECT_TRUE(elements_equal(idx, want_i));
      const std::optional<std::uint64_t> amn = xs | kiln::filter(_1 > t) | kiln::argmin();
      check_launches();
      EXPECT_EQ(amn, m ? std::optional<std::uint64_t>(std::min_element(kept.begin(), kept.end()) -
                                                      kept.begin())
                       : std::nullopt);
      const std::vector<T> run_max =
          xs | kiln::filter(_1 > t) | kiln::inclusive_scan(kiln::max(_1, _2)) | kiln::to_vector();
      check_launches();
      std::vector<T> want_max(m);
      for (std::uint64_t i = 0; i < m; ++i)
        want_max[i] = i ? std::max<T>(want_max[i - 1], kept[i]) : kept[i];
      EXPECT_TRUE(elements_equal(run_max, want_max));
    }
  });
}

}  // namespace
}  // namespace query_test
