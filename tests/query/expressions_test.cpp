// Element expressions: operators, comparisons, logic, shifts, select, cast, math, captured
// constants and _i. Result types are those of the same C++ expression (static_asserts, and a
// static_assert in check() against the host reference's own type); values are compared with
// that host expression element by element: exactly for integers and single IEEE operations,
// within 1e-5 (float) / 1e-13 (double) relative for transcendental math (a GPU's expf, sinf
// ... are a few ulps off the host's).
#include <tuple>

#include "query/query_fixture.hpp"

// The host references deliberately use C++'s conversions (int32 < uint32 compares unsigned).
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wbool-operation"
#pragma GCC diagnostic ignored "-Wint-in-bool-context"

namespace query_test {
namespace {

using namespace kiln::placeholders;

// The element type of query<In...> | transform(E).
template <class E, class... In>
using result_of =
    std::tuple_element_t<0, typename decltype(std::declval<kiln::query<In...>>() |
                                              kiln::transform(std::declval<const E&>()))::element>;
#define EXPECT_TYPE(expr, R, ...) \
  static_assert(std::is_same_v<result_of<decltype(expr), __VA_ARGS__>, R>, #expr " -> " #R)

EXPECT_TYPE(_1 + _2, int, std::int8_t, std::int8_t);
EXPECT_TYPE(_1 + _2, std::uint32_t, std::int32_t, std::uint32_t);
EXPECT_TYPE(_1 - _2, int, bool, bool);
EXPECT_TYPE(_1 * 2.0, double, float);
EXPECT_TYPE(_1 * 2.f, float, float);
EXPECT_TYPE(_1 + 1u, unsigned, std::int16_t);
EXPECT_TYPE(_1 % _2, std::uint64_t, std::uint64_t, std::int64_t);
EXPECT_TYPE(_1 < _2, bool, float, int);
EXPECT_TYPE(_1&& _2, bool, double, std::int8_t);
EXPECT_TYPE(_1 << _2, int, std::uint8_t, std::int64_t);
EXPECT_TYPE(_1 >> _2, std::int64_t, std::int64_t, std::uint8_t);
EXPECT_TYPE(-_1, int, bool);
EXPECT_TYPE(-_1, std::uint32_t, std::uint32_t);
EXPECT_TYPE(!_1, bool, double);
EXPECT_TYPE(~_1, int, std::uint16_t);
EXPECT_TYPE(kiln::select(_1, _2, _3), float, bool, std::int8_t, float);
EXPECT_TYPE(kiln::select(_1 > 0, _1, 7), int, std::int8_t);
EXPECT_TYPE(kiln::cast<std::int8_t>(_1), std::int8_t, double);
EXPECT_TYPE(kiln::sqrt(_1), double, std::int32_t);
EXPECT_TYPE(kiln::sqrt(_1), float, float);
EXPECT_TYPE(kiln::pow(_1, 2), double, float);  // like std::pow(float, int)
EXPECT_TYPE(kiln::fma(_1, _2, _3), float, float, float, float);
EXPECT_TYPE(kiln::abs(_1), int, std::int8_t);
EXPECT_TYPE(kiln::abs(_1), double, double);
// min/max/clamp: the common type of the promoted operands (std::min itself needs one type).
EXPECT_TYPE(kiln::min(_1, _2), int, std::int8_t, std::int8_t);
EXPECT_TYPE(kiln::max(_1, _2), std::uint32_t, std::int32_t, std::uint32_t);
EXPECT_TYPE(kiln::clamp(_1, 0.f, 1.f), float, float);
EXPECT_TYPE(_i, std::int64_t, float);
EXPECT_TYPE(_i + _1, std::uint64_t, std::uint64_t);

class ExpressionsTest : public QueryTest {
 protected:
  std::size_t n() const { return size_for(1000, 100003); }
};
KILN_INSTANTIATE_QUERY_PER_DEVICE(ExpressionsTest);

template <class T>
std::vector<T> vals(std::size_t n, std::uint64_t seed, T lo, T hi, std::vector<T> edges = {}) {
  std::vector<T> v = conformance::random_values<T>(n, seed, lo, hi);
  for (std::size_t i = 0; i < edges.size() && i < n; ++i) v[i] = edges[i];
  return v;
}
template <class T>
std::vector<T> full(std::size_t n, std::uint64_t seed, std::vector<T> edges = {}) {
  return vals<T>(n, seed, std::numeric_limits<T>::lowest(), std::numeric_limits<T>::max(), edges);
}

// Equal bits (any NaN matches any NaN), or for rel > 0 |got - want| <= rel * max(1, |want|).
template <class R>
::testing::AssertionResult values_match(const std::vector<R>& got, const std::vector<R>& want,
                                        double rel) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  return conformance::all_indices(
      got.size(),
      [&](std::uint64_t i) {
        if constexpr (std::is_floating_point_v<R>) {
          if (std::isnan(got[i]) || std::isnan(want[i]))
            return std::isnan(got[i]) && std::isnan(want[i]);
          if (rel == 0) return std::memcmp(&got[i], &want[i], sizeof(R)) == 0;
          if (std::isinf(want[i])) return got[i] == want[i];
          return std::fabs(double(got[i]) - double(want[i])) <=
                 rel * std::max(1.0, std::fabs(double(want[i])));
        } else {
          return got[i] == want[i];
        }
      },
      [&](std::uint64_t i) { return "got " + show(R(got[i])) + ", expected " + show(R(want[i])); });
}

// zip(columns...) | transform(e) against host(column values...) element by element; the
// device result type must be the host expression's type.
template <class E, class F, class... T>
void check(const kiln::device& dev, const std::string& what, const E& e, F host, double rel,
           const std::vector<T>&... cols) {
  std::ostringstream trace;
  trace << what << " on (";
  const char* sep = "";
  ((trace << sep << name_of<T>(), sep = ", "), ...);
  trace << ")";
  SCOPED_TRACE(trace.str());
  const std::size_t n = std::get<0>(std::forward_as_tuple(cols...)).size();
  auto bufs = std::make_tuple(upload(dev, cols)...);
  auto got = std::apply(
      [&](const auto&... b) { return kiln::zip(b...) | kiln::transform(e) | kiln::to_vector(); },
      bufs);
  using R = typename decltype(got)::value_type;
  static_assert(std::is_same_v<R, decltype(host(std::declval<T>()...))>,
                "the device result type differs from the same C++ expression's");
  std::vector<R> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = host(T(cols[i])...);
  EXPECT_TRUE(values_match(got, want, rel));
}

#define CHECK_BINARY(OP, a, b) \
  check(                       \
      dev(), "_1 " #OP " _2", _1 OP _2, [](auto x, auto y) { return x OP y; }, 0, a, b)

TEST_P(ExpressionsTest, ArithmeticPromotes) {
  const std::size_t n = this->n();
  const auto i8a = full<std::int8_t>(n, 1, {-128, 127, -128, 127, -1});
  const auto i8b = full<std::int8_t>(n, 2, {-1, 127, 127, -128, -128});
  CHECK_BINARY(+, i8a, i8b);
  CHECK_BINARY(-, i8a, i8b);
  CHECK_BINARY(*, i8a, i8b);  // int: -128 * -1 = 128, no wrap
  CHECK_BINARY(/, i8a, i8b);
  CHECK_BINARY(%, i8a, i8b);
  // int32 operands convert to unsigned: -1 + 1u wraps, -7 / 2u is huge.
  const auto u32 = full<std::uint32_t>(n, 3, {1, 2, 0xffffffffu, 3});
  const auto i32 = full<std::int32_t>(n, 4, {-1, -7, -1, std::numeric_limits<int>::lowest()});
  CHECK_BINARY(+, u32, i32);
  CHECK_BINARY(-, u32, i32);
  CHECK_BINARY(*, u32, i32);
  CHECK_BINARY(/, u32, i32);
  CHECK_BINARY(%, u32, i32);
  const auto f = vals<float>(n, 5, -1e6f, 1e6f, {0.1f, -3.f, 1e-30f});
  const auto i32s = vals<std::int32_t>(n, 6, -(1 << 30), 1 << 30, {3, 16777217, -7});
  CHECK_BINARY(+, f, i32s);  // float: the int rounds to float first
  CHECK_BINARY(/, f, i32s);
  const auto d = vals<double>(n, 7, -1e3, 1e3, {0.1, 1e300});
  const auto f2 = vals<float>(n, 8, -1e3f, 1e3f, {0.1f, 1e30f});
  CHECK_BINARY(-, d, f2);  // double
  CHECK_BINARY(*, d, f2);
  std::vector<bool> ba(n), bb(n);
  for (std::size_t i = 0; i < n; ++i) ba[i] = i % 2, bb[i] = i % 3 == 0;
  CHECK_BINARY(-, ba, bb);  // int: false - true = -1
  const auto u64 = full<std::uint64_t>(n, 9, {5, 5});
  const auto i64 = full<std::int64_t>(n, 10, {-1, 2});
  CHECK_BINARY(/, u64, i64);  // unsigned 64-bit: 5 / (uint64)-1 = 0
  CHECK_BINARY(%, u64, i64);
}

TEST_P(ExpressionsTest, ComparisonsAndLogic) {
  const std::size_t n = this->n();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  CHECK_BINARY(<, full<std::int32_t>(n, 11, {-1, 5}), full<std::uint32_t>(n, 12, {1, 5}));
  const auto fa = vals<float>(n, 13, -4.f, 4.f, {nan, 1.f, nan, -0.f, 2.f});
  auto fb = vals<float>(n, 14, -4.f, 4.f, {1.f, nan, nan, 0.f, 2.f});
  for (std::size_t i = 5; i < n; i += 7) fb[i] = fa[i];  // some equal pairs
  CHECK_BINARY(<, fa, fb);
  CHECK_BINARY(==, fa, fb);  // NaN == NaN is false, -0 == 0 true
  CHECK_BINARY(!=, fa, fb);
  CHECK_BINARY(>=, full<std::int8_t>(n, 15, {3, -3}), vals<double>(n, 16, -130, 130, {3.0, -2.5}));
  const auto f_or_zero = vals<float>(n, 17, -1.f, 1.f, {0.f, -0.f, nan, 0.5f});
  const auto i_or_zero = vals<std::int32_t>(n, 18, -3, 3, {5, 5, 0, 0});
  CHECK_BINARY(&&, f_or_zero, i_or_zero);
  std::vector<bool> flags(n);
  for (std::size_t i = 0; i < n; ++i) flags[i] = i % 4 == 1;
  CHECK_BINARY(||, vals<std::int8_t>(n, 19, -2, 2), flags);
}

TEST_P(ExpressionsTest, BitwiseAndShifts) {
  const std::size_t n = this->n();
  const auto i16 = full<std::int16_t>(n, 20, {-1, std::numeric_limits<std::int16_t>::lowest()});
  const auto u8 = full<std::uint8_t>(n, 21, {0xff, 0x80});
  CHECK_BINARY(&, i16, u8);
  CHECK_BINARY(|, i16, u8);
  CHECK_BINARY(^, i16, u8);
  // Shift counts below the promoted left operand's width; no negative left operand of <<.
  CHECK_BINARY(<<, vals<std::int8_t>(n, 22, 1, 127, {127}), vals<std::uint8_t>(n, 23, 1, 23, {23}));
  CHECK_BINARY(<<, full<std::uint64_t>(n, 24), vals<std::int32_t>(n, 25, 1, 63, {63}));
  CHECK_BINARY(>>, full<std::int64_t>(n, 26, {-1, std::numeric_limits<std::int64_t>::lowest()}),
               vals<std::uint8_t>(n, 27, 1, 63, {63, 63}));
}

TEST_P(ExpressionsTest, UnarySelectCast) {
  const std::size_t n = this->n();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  check(
      dev(), "-_1", -_1, [](auto x) { return -x; }, 0, full<std::uint8_t>(n, 30));  // int
  check(
      dev(), "-_1", -_1, [](auto x) { return -x; }, 0, full<std::uint32_t>(n, 31));  // wraps
  check(
      dev(), "!_1", !_1, [](auto x) { return !x; }, 0,
      vals<float>(n, 32, -1.f, 1.f, {0.f, -0.f, nan}));
  check(
      dev(), "~_1", ~_1, [](auto x) { return ~x; }, 0, full<std::int16_t>(n, 33, {-1, 0}));
  check(
      dev(), "select(_1 > 0, _1, _2)", kiln::select(_1 > 0, _1, _2),
      [](auto x, auto y) { return x > 0 ? x : y; }, 0, full<std::int8_t>(n, 34),
      vals<float>(n, 35, -10.f, 10.f));
  std::vector<bool> c(n);
  for (std::size_t i = 0; i < n; ++i) c[i] = i % 3 != 0;
  check(
      dev(), "select(_3, _1, _2)", kiln::select(_3, _1, _2),
      [](auto x, auto y, bool z) { return z ? x : y; }, 0, full<std::int32_t>(n, 36, {-1}),
      full<std::uint32_t>(n, 37), c);  // unsigned: -1 becomes 0xffffffff
  check(
      dev(), "cast<int8_t>", kiln::cast<std::int8_t>(_1),
      [](auto x) { return static_cast<std::int8_t>(x); }, 0,
      full<std::int32_t>(n, 38, {300, -129}));
  check(
      dev(), "cast<bool>", kiln::cast<bool>(_1), [](auto x) { return static_cast<bool>(x); }, 0,
      vals<float>(n, 39, -2.f, 2.f, {0.25f, -0.f, nan, 0.f}));
  check(
      dev(), "cast<int32_t>", kiln::cast<std::int32_t>(_1),
      [](auto x) { return static_cast<std::int32_t>(x); }, 0,
      vals<float>(n, 40, -1e9f, 1e9f, {-3.7f, 3.7f, -0.5f}));  // truncation toward zero
  check(
      dev(), "cast<float>", kiln::cast<float>(_1), [](auto x) { return static_cast<float>(x); }, 0,
      full<std::int64_t>(n, 41, {(std::int64_t{1} << 53) + 1}));
}

template <class X>
auto host_rsqrt(X x) {
  return 1 / std::sqrt(x);
}

#define CHECK_MATH1(fn, std_fn, rel, col) \
  check(                                  \
      dev(), #fn, kiln::fn(_1), [](auto x) { return std_fn(x); }, rel, col)

// Float math: <cmath> on the host; floor/ceil/abs/min/max/clamp exact, with std:: semantics
// for NaN and signed zeros (std::min(a, b) is b < a ? b : a).
TEST_P(ExpressionsTest, FloatMath) {
  const std::size_t n = this->n();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const auto pos = vals<float>(n, 50, 0.01f, 100.f, {1.f, 4.f, 0.25f});
  const auto any = vals<float>(n, 51, -10.f, 10.f, {0.f, -0.5f, 0.5f, -2.f});
  const auto exps = vals<float>(n, 52, -20.f, 20.f);
  CHECK_MATH1(sqrt, std::sqrt, 1e-5, pos);
  CHECK_MATH1(rsqrt, host_rsqrt, 1e-5, pos);
  CHECK_MATH1(exp, std::exp, 1e-5, exps);
  CHECK_MATH1(log, std::log, 1e-5, pos);
  CHECK_MATH1(sin, std::sin, 1e-5, any);
  CHECK_MATH1(cos, std::cos, 1e-5, any);
  CHECK_MATH1(tanh, std::tanh, 1e-5, any);
  CHECK_MATH1(floor, std::floor, 0, any);
  CHECK_MATH1(ceil, std::ceil, 0, any);  // ceil(-0.5f) is -0.0f
  const auto edge = vals<float>(n, 53, -10.f, 10.f, {nan, 1.f, -0.f, 0.f, nan, -3.f});
  const auto edge2 = vals<float>(n, 54, -10.f, 10.f, {1.f, nan, 0.f, -0.f, nan, -3.f});
  CHECK_MATH1(abs, std::abs, 0, edge);
  check(
      dev(), "pow", kiln::pow(_1, _2), [](auto x, auto y) { return std::pow(x, y); }, 1e-5, pos,
      vals<float>(n, 55, -3.f, 3.f, {0.5f, 2.f}));
  check(
      dev(), "fma", kiln::fma(_1, _2, _3), [](auto x, auto y, auto z) { return std::fma(x, y, z); },
      1e-5, any, exps, pos);
  check(
      dev(), "min", kiln::min(_1, _2), [](float x, float y) { return std::min(x, y); }, 0, edge,
      edge2);
  check(
      dev(), "max", kiln::max(_1, _2), [](float x, float y) { return std::max(x, y); }, 0, edge,
      edge2);
  check(
      dev(), "clamp(_1, -1, 2)", kiln::clamp(_1, -1.f, 2.f),
      [](float x) { return std::clamp(x, -1.f, 2.f); }, 0, any);
}

TEST_P(ExpressionsTest, DoubleAndIntegerMath) {
  if (!dev().supports(kiln::feature::fp64))
    GTEST_SKIP() << dev().id() << " lacks kiln::feature::fp64: double math and integer math "
                 << "(which computes in double) need it";
  const std::size_t n = this->n();
  const auto pos = vals<double>(n, 60, 0.01, 100.0, {1.0, 2.0});
  const auto any = vals<double>(n, 61, -10.0, 10.0);
  CHECK_MATH1(sqrt, std::sqrt, 1e-13, pos);
  CHECK_MATH1(exp, std::exp, 1e-13, any);
  CHECK_MATH1(log, std::log, 1e-13, pos);
  CHECK_MATH1(sin, std::sin, 1e-13, any);
  CHECK_MATH1(tanh, std::tanh, 1e-13, any);
  check(
      dev(), "pow", kiln::pow(_1, _2), [](auto x, auto y) { return std::pow(x, y); }, 1e-13, pos,
      any);
  // Integers: math in double, abs/min/max/clamp in the promoted common type.
  CHECK_MATH1(sqrt, std::sqrt, 1e-13, vals<std::int32_t>(n, 62, 1, 1 << 30, {4, 2}));
  check(
      dev(), "pow", kiln::pow(_1, _2), [](auto x, auto y) { return std::pow(x, y); }, 1e-13,
      vals<std::int32_t>(n, 63, -20, 20), vals<std::int32_t>(n, 64, -5, 5));
  CHECK_MATH1(abs, std::abs, 0, full<std::int8_t>(n, 65, {-128, 127}));  // int: abs(-128) = 128
  check(
      dev(), "min", kiln::min(_1, _2), [](auto x, auto y) { return std::min<int>(x, y); }, 0,
      full<std::int8_t>(n, 66), full<std::uint8_t>(n, 67));
  check(
      dev(), "max", kiln::max(_1, _2), [](auto x, auto y) { return std::max<unsigned>(x, y); }, 0,
      full<std::int32_t>(n, 68, {-1}), full<std::uint32_t>(n, 69, {5}));  // -1 is huge
  check(
      dev(), "clamp(_1, -100, 100)", kiln::clamp(_1, -100, 100),
      [](auto x) { return std::clamp<int>(x, -100, 100); }, 0, full<std::int16_t>(n, 70));
}

TEST_P(ExpressionsTest, CapturedConstantsPromote) {
  const std::size_t n = this->n();
  check(
      dev(), "_1 * 2.0", _1 * 2.0, [](auto x) { return x * 2.0; }, 0,
      vals<float>(n, 80, -1e3f, 1e3f));
  check(
      dev(), "_1 + 1u", _1 + 1u, [](auto x) { return x + 1u; }, 0,
      full<std::int32_t>(n, 81, {-1, -2}));
  check(
      dev(), "_1 - 300", _1 - 300, [](auto x) { return x - 300; }, 0, full<std::uint8_t>(n, 82));
}

// _i: the position in the sequence as the stage sees it (after skip: from the skip; after a
// filter: among the survivors).
TEST_P(ExpressionsTest, ElementIndex) {
  for (std::uint64_t n : sizes()) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = full<std::int32_t>(n, 90 + n);
    const kiln::buffer<std::int32_t> xs = upload(dev(), x);
    std::vector<std::int64_t> iota(n), shifted(n > 5 ? n - 5 : 0);
    std::vector<std::int32_t> thirds;
    for (std::uint64_t i = 0; i < n; ++i) {
      iota[i] = std::int64_t(i);
      if (i >= 5) shifted[i - 5] = x[i] + std::int64_t(i - 5);
      if (i % 3 == 0) thirds.push_back(x[i]);
    }
    EXPECT_TRUE(elements_equal(xs | kiln::transform(_i) | kiln::to_vector(), iota));
    EXPECT_TRUE(
        elements_equal(xs | kiln::skip(5) | kiln::transform(_1 + _i) | kiln::to_vector(), shifted));
    EXPECT_TRUE(elements_equal(xs | kiln::filter(_i % 3 == 0) | kiln::to_vector(), thirds));
  }
}

}  // namespace
}  // namespace query_test
