// Lazy elementwise arithmetic against a host reference: every broadcasting pattern, mixed
// dtypes (C++ promotion), non-contiguous operands, unary functions, comparisons, where, clamp.
#include <numbers>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class ElementwiseTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ElementwiseTest);

// Pairs of shapes covering every broadcasting case: equal, missing leading dims, size-1 dims
// on either side and on both, rank 0, size 0, rank 4.
const std::vector<std::pair<shape_t, shape_t>> patterns = {
    {{2, 3}, {2, 3}},          {{2, 3}, {3}},    {{2, 3}, {2, 1}}, {{1, 3}, {2, 1}},
    {{4, 1, 3}, {2, 1}},       {{}, {2, 3}},     {{0, 3}, {3}},    {{1}, {5}},
    {{3, 1, 1, 2}, {1, 4, 1}}, {{2, 0}, {1, 1}}, {{5, 7}, {}},
};

// (a + b) * (a - b) / b in C++'s promoted type: every arithmetic operator in one fused kernel
// (bool has no divisor: + b instead).
template <class A, class B>
void check_arith(const kiln::device& dev, const shape_t& sa, const shape_t& sb,
                 std::uint64_t seed) {
  SCOPED_TRACE(kiln::to_string(sa) + " with " + kiln::to_string(sb) + ", " + name_of<A>() +
               " and " + name_of<B>());
  using R = decltype(A() + B());
  constexpr bool divides = !std::is_same_v<B, bool>;
  const host<A> ha = random_host<A>(sa, seed);
  const host<B> hb = random_host<B>(sb, seed + 1);
  const kiln::tensor a = upload(dev, ha), b = upload(dev, hb);
  const kiln::tensor r = divides ? (a + b) * (a - b) / b : (a + b) * (a - b) + b;
  EXPECT_TRUE(r.is_lazy());
  const host<R> want = map2<R>(ha, hb, [](A x, B y) {
    using W = std::conditional_t<std::is_floating_point_v<R>, double, R>;
    const W u = static_cast<W>(static_cast<R>(x)), v = static_cast<W>(static_cast<R>(y));
    return divides ? (u + v) * (u - v) / v : (u + v) * (u - v) + v;
  });
  EXPECT_TRUE(matches(r, want));
  EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, numel(want.shape) ? 1u : 0u);
}

TEST_P(ElementwiseTest, ArithmeticBroadcastsEveryPattern) {
  std::uint64_t seed = 100;
  for (const auto& [sa, sb] : patterns) {
    check_arith<float, float>(dev(), sa, sb, seed++);
    check_arith<std::int32_t, std::int64_t>(dev(), sb, sa, seed++);
  }
}

TEST_P(ElementwiseTest, ArithmeticPromotesMixedTypes) {
  const shape_t a{3, 4}, b{4};
  check_arith<double, float>(dev(), a, b, 1);
  check_arith<std::int64_t, double>(dev(), a, b, 2);
  check_arith<std::uint8_t, std::uint8_t>(dev(), a, b, 3);  // int32
  check_arith<bool, bool>(dev(), a, b, 4);                  // int32
  check_arith<std::int32_t, std::uint8_t>(dev(), a, b, 5);
  check_arith<std::uint8_t, std::int64_t>(dev(), b, a, 6);
  check_arith<std::int8_t, float>(dev(), a, b, 7);
  check_arith<std::uint32_t, std::int32_t>(dev(), a, b, 8);  // uint32, wrapping as C++
}

TEST_P(ElementwiseTest, RandomShapesBroadcast) {
  std::mt19937_64 rng(2024);
  for (int round = 0; round < 8; ++round) {
    shape_t out(rng() % 5);
    for (auto& d : out) d = static_cast<std::int64_t>(rng() % 4) + 1;
    const auto operand = [&] {
      shape_t s(out.begin() + static_cast<std::ptrdiff_t>(rng() % (out.size() + 1)), out.end());
      for (auto& d : s)
        if (rng() % 3 == 0) d = 1;
      return s;
    };
    check_arith<float, double>(dev(), operand(), operand(), 300 + round);
  }
}

TEST_P(ElementwiseTest, ScalarsOnEitherSideAndNewValuesReuseTheKernel) {
  const host<float> h = random_host<float>({3, 5}, 9);
  const kiln::tensor x = upload(dev(), h);
  for (float s : {1.5f, -3.25f}) {
    const auto want = map2<float>(h, host<float>{{}, {s}},
                                  [](float a, float b) { return (2.f - a) * b + a / b; });
    EXPECT_TRUE(matches((2.f - x) * s + x / s, want));
  }
  EXPECT_EQ(stats().programs_compiled, 0u);  // the second value: same kernel
  // An int scalar keeps a float tensor float; a double scalar makes it double (C++'s rule).
  EXPECT_EQ((x * 2).dtype(), kiln::scalar_type::f32);
  EXPECT_EQ((x * 2.0).dtype(), kiln::scalar_type::f64);
  EXPECT_EQ((2 + upload(dev(), random_host<std::int8_t>({2}, 3))).dtype(), kiln::scalar_type::i32);
}

TEST_P(ElementwiseTest, NonContiguousOperands) {
  const host<float> base = random_host<float>({6, 4}, 21);
  const host<double> row = random_host<double>({5}, 22);
  const kiln::tensor tb = upload(dev(), base), tr = upload(dev(), row);
  // a: [4, 3], the transpose of every second row; b: row[1:4] expanded to [4, 3].
  const kiln::tensor a = tb.slice(0, 0, 6, 2).t();
  const kiln::tensor b = tr.slice(0, 1, 4).unsqueeze(0).expand({4, 3});
  const host<float> ha = remap<float>(base, {4, 3}, [](shape_t c) {
    return shape_t{c[1] * 2, c[0]};
  });
  const host<double> hb = remap<double>(row, {4, 3}, [](shape_t c) { return shape_t{c[1] + 1}; });
  EXPECT_TRUE(
      matches(a * b - a, map2<double>(ha, hb, [](float x, double y) { return x * y - x; })));
  // Permuted integer operands against a contiguous one.
  const host<std::int64_t> hi = random_host<std::int64_t>({2, 3, 4}, 23);
  const kiln::tensor ti = upload(dev(), hi);
  const host<std::int64_t> hp = remap<std::int64_t>(hi, {4, 2, 3}, [](shape_t c) {
    return shape_t{c[1], c[2], c[0]};
  });
  const host<std::int32_t> hc = random_host<std::int32_t>({4, 2, 3}, 24);
  EXPECT_TRUE(
      matches(ti.permute({2, 0, 1}) * upload(dev(), hc),
              map2<std::int64_t>(hp, hc, [](std::int64_t x, std::int32_t y) { return x * y; })));
}

template <class T>
host<T> ties(const shape_t& s, std::uint64_t seed) {
  host<T> h{s, {}};
  std::mt19937_64 rng(seed);
  for (std::int64_t i = 0; i < numel(s); ++i) h.v.push_back(static_cast<T>(rng() % 3 + 1));
  return h;
}

TEST_P(ElementwiseTest, ComparisonsGiveBool) {
  const host<float> ha = ties<float>({4, 3}, 31);
  const host<std::int32_t> hb = ties<std::int32_t>({3}, 32);
  const kiln::tensor a = upload(dev(), ha), b = upload(dev(), hb);
  const auto check = [&](const kiln::tensor& got, auto f) {
    EXPECT_TRUE(matches(got, map2<bool>(ha, hb, f)));
  };
  check(a < b, [](float x, int y) { return x < y; });
  check(a <= b, [](float x, int y) { return x <= y; });
  check(a > b, [](float x, int y) { return x > y; });
  check(a >= b, [](float x, int y) { return x >= y; });
  check(a == b, [](float x, int y) { return x == y; });
  check(a != b, [](float x, int y) { return x != y; });
  EXPECT_TRUE(
      matches(2 < a, map2<bool>(ha, host<int>{{}, {2}}, [](float x, int y) { return y < x; })));
}

TEST_P(ElementwiseTest, UnaryFunctions) {
  const host<float> hf = random_host<float>({5, 3}, 41);
  const host<double> hd = random_host<double>({7}, 42);
  const kiln::tensor f = upload(dev(), hf), d = upload(dev(), hd);
  const auto check_f = [&](const kiln::tensor& got, auto fn) {
    host<float> w{hf.shape, {}};
    for (float x : hf.v) w.v.push_back(static_cast<float>(fn(double(x))));
    EXPECT_TRUE(matches(got, w, 4e-6));
  };
  check_f(-f, [](double x) { return -x; });
  check_f(kiln::abs(f), [](double x) { return std::fabs(x); });
  check_f(kiln::sqrt(kiln::abs(f)), [](double x) { return std::sqrt(std::fabs(x)); });
  check_f(kiln::exp(f), [](double x) { return std::exp(x); });
  check_f(kiln::log(kiln::abs(f)), [](double x) { return std::log(std::fabs(x)); });
  check_f(kiln::sin(f), [](double x) { return std::sin(x); });
  check_f(kiln::cos(f), [](double x) { return std::cos(x); });
  check_f(kiln::tanh(f), [](double x) { return std::tanh(x); });
  check_f(kiln::relu(f), [](double x) { return x > 0 ? x : 0; });
  check_f(kiln::sigmoid(f), [](double x) { return 1 / (1 + std::exp(-x)); });
  host<double> w{hd.shape, {}};
  for (double x : hd.v)
    w.v.push_back(std::tanh(x) + 1 / (1 + std::exp(-x)) - std::sqrt(std::fabs(x)));
  EXPECT_TRUE(matches(kiln::tanh(d) + kiln::sigmoid(d) - kiln::sqrt(kiln::abs(d)), w, 1e-12));
}

TEST_P(ElementwiseTest, UnaryOnIntegersPromotesAsCpp) {
  const host<std::int8_t> h8 = random_host<std::int8_t>({6}, 51);
  const host<std::uint8_t> hu = random_host<std::uint8_t>({6}, 52);
  const host<bool> hb = random_host<bool>({6}, 53);
  const host<std::int64_t> hl = random_host<std::int64_t>({6}, 54);
  const auto each = [](const auto& h, auto fn) {
    using R = decltype(fn(h.v[0]));
    host<R> w{h.shape, {}};
    for (auto x : h.v) w.v.push_back(fn(x));
    return w;
  };
  EXPECT_TRUE(matches(-upload(dev(), h8), each(h8, [](std::int8_t x) { return -x; })));  // int32
  EXPECT_TRUE(
      matches(kiln::abs(upload(dev(), h8)), each(h8, [](std::int8_t x) { return std::abs(x); })));
  EXPECT_TRUE(matches(-upload(dev(), hb), each(hb, [](bool x) { return -x; })));
  EXPECT_TRUE(matches(kiln::relu(upload(dev(), hl)),
                      each(hl, [](std::int64_t x) { return x > 0 ? x : std::int64_t(0); })));
  EXPECT_TRUE(matches(kiln::sqrt(upload(dev(), hu)),
                      each(hu, [](std::uint8_t x) { return std::sqrt(double(x)); })));
  EXPECT_TRUE(matches(kiln::relu(upload(dev(), hu)), hu));
}

TEST_P(ElementwiseTest, WhereAndClamp) {
  const host<float> ha = random_host<float>({3, 4}, 61);
  const host<std::int32_t> hb = random_host<std::int32_t>({4}, 62);
  const kiln::tensor a = upload(dev(), ha), b = upload(dev(), hb);
  EXPECT_TRUE(matches(kiln::where(a > 0.f, a, b),
                      map2<float>(ha, hb, [](float x, int y) { return x > 0 ? x : float(y); })));
  EXPECT_TRUE(matches(kiln::where(a > 0.f, a, 0.f),
                      map2<float>(ha, hb, [](float x, int) { return x > 0 ? x : 0.f; })));
  EXPECT_TRUE(matches(kiln::where(b < 0, -1, b),
                      map2<std::int32_t>(hb, hb, [](int, int y) { return y < 0 ? -1 : y; })));
  host<float> wc{ha.shape, {}};
  for (float x : ha.v) wc.v.push_back(std::clamp(x, -1.5f, 2.f));
  EXPECT_TRUE(matches(kiln::clamp(a, -1.5, 2.0), wc));  // bounds converted to float
  host<std::int32_t> wi{hb.shape, {}};
  for (int y : hb.v) wi.v.push_back(std::clamp(y, -10, 10));
  EXPECT_TRUE(matches(kiln::clamp(b, -10, 10), wi));
}

TEST_P(ElementwiseTest, ToConvertsAsStaticCast) {
  const host<double> h = random_host<double>({9}, 71);
  host<std::int32_t> w{h.shape, {}};
  for (double x : h.v) w.v.push_back(static_cast<std::int32_t>(x * 10));
  EXPECT_TRUE(matches((upload(dev(), h) * 10).to(kiln::scalar_type::i32), w));
}

// tan, rsqrt, square, floor, ceil and both gelus on f32, and on a transposed f64 view.
TEST_P(ElementwiseTest, MoreUnaryFunctions) {
  const host<float> hf = random_host<float>({5, 3}, 81);
  const host<double> hd = random_host<double>({4, 6}, 82);
  const kiln::tensor f = upload(dev(), hf), d = upload(dev(), hd).t();  // [6, 4], strided
  const auto gelu = [](double x) { return x * 0.5 * (1 + std::erf(x / std::sqrt(2.0))); };
  const auto gelu_tanh = [](double x) {
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
  };
  const std::vector<std::pair<kiln::tensor (*)(const kiln::tensor&), double (*)(double)>> fns = {
      {[](const kiln::tensor& x) { return kiln::tan(x); }, [](double x) { return std::tan(x); }},
      {[](const kiln::tensor& x) { return kiln::rsqrt(kiln::abs(x)); },
       [](double x) { return 1 / std::sqrt(std::fabs(x)); }},
      {[](const kiln::tensor& x) { return kiln::square(x); }, [](double x) { return x * x; }},
      {[](const kiln::tensor& x) { return kiln::floor(x); },
       [](double x) { return std::floor(x); }},
      {[](const kiln::tensor& x) { return kiln::ceil(x); }, [](double x) { return std::ceil(x); }},
      {[](const kiln::tensor& x) { return kiln::gelu(x); }, +gelu},
      {[](const kiln::tensor& x) { return kiln::gelu(x, "tanh"); }, +gelu_tanh},
  };
  for (std::size_t k = 0; k < fns.size(); ++k) {
    SCOPED_TRACE("function " + std::to_string(k));
    host<float> wf{hf.shape, {}};
    for (float x : hf.v) wf.v.push_back(static_cast<float>(fns[k].second(x)));
    // tan near its poles amplifies the argument's rounding: relative tolerance there.
    EXPECT_TRUE(matches(fns[k].first(f), wf, k == 0 ? 2e-5 : 4e-6));
    const host<double> hdt = remap(hd, {6, 4}, [](shape_t c) { return shape_t{c[1], c[0]}; });
    host<double> wd{hdt.shape, {}};
    for (double x : hdt.v) wd.v.push_back(fns[k].second(x));
    EXPECT_TRUE(matches(fns[k].first(d), wd, 1e-12));
  }
  EXPECT_THROW(kiln::gelu(f, "erf"), kiln::invalid_argument);
}

TEST_P(ElementwiseTest, MoreUnaryFunctionsOnIntegers) {
  const host<std::int8_t> h8 = random_host<std::int8_t>({6}, 91);
  const host<std::int32_t> hi = random_host<std::int32_t>({2, 3}, 92);
  const kiln::tensor a = upload(dev(), h8), b = upload(dev(), hi);
  const auto each = [](const auto& h, auto fn) {
    using R = decltype(fn(h.v[0]));
    host<R> w{h.shape, {}};
    for (auto x : h.v) w.v.push_back(fn(x));
    return w;
  };
  EXPECT_TRUE(matches(kiln::square(a), each(h8, [](std::int8_t x) { return x * x; })));  // int32
  EXPECT_TRUE(matches(kiln::floor(b), hi));  // integers keep their dtype and values
  EXPECT_TRUE(matches(kiln::ceil(b), hi));
  EXPECT_TRUE(matches(kiln::tan(b), each(hi, [](int x) { return std::tan(double(x)); })));
  EXPECT_TRUE(matches(kiln::gelu(a), each(h8, [](std::int8_t x) {
                        return x * 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
                      })));
}

// pow: tensor/tensor with broadcasting, tensor/scalar both ways; promotion as the math functions.
TEST_P(ElementwiseTest, PowPromotesAndBroadcasts) {
  const host<float> hb = random_host<float>({3, 4}, 101);
  const host<std::int32_t> he = random_host<std::int32_t>({4}, 102);
  host<float> base{hb.shape, {}};  // positive bases in [0.5, 4.5]
  for (float x : hb.v) base.v.push_back(std::fabs(x) + 0.5f);
  host<float> ex{{3, 1}, {1.5f, -0.75f, 2.25f}};
  const kiln::tensor b = upload(dev(), base), e = upload(dev(), ex), n = upload(dev(), he);
  EXPECT_TRUE(matches(
      kiln::pow(b, e),
      map2<float>(base, ex, [](float x, float y) { return std::pow(double(x), double(y)); }),
      4e-6));
  host<std::int32_t> small{{4}, {}};
  for (int y : he.v) small.v.push_back(y % 4);
  const kiln::tensor s = upload(dev(), small);
  EXPECT_TRUE(matches(kiln::pow(b, s), map2<float>(base, small, [](float x, int y) {
                        return std::pow(double(x), double(y));
                      })));
  EXPECT_TRUE(matches(kiln::pow(s, s), map2<double>(small, small, [](int x, int y) {
                        return std::pow(double(x), double(y));
                      })));  // int32 ** int32 gives double
  const host<double> one{{}, {2.0}};
  EXPECT_TRUE(matches(kiln::pow(b, 2.f), map2<float>(base, one, [](float x, double) {
                        return double(x) * x;
                      })));  // f32 ** float: f32
  EXPECT_TRUE(matches(kiln::pow(b, 0.5), map2<double>(base, one, [](float x, double) {
                        return std::sqrt(double(x));
                      })));  // f32 ** double: f64
  EXPECT_TRUE(matches(kiln::pow(2.f, b.t()),
                      remap(map2<float>(base, one, [](float x, double) { return std::exp2(x); }),
                            {4, 3}, [](shape_t c) {
                              return shape_t{c[1], c[0]};
                            })));
  EXPECT_TRUE(matches(kiln::pow(n.slice(0, 0, 4, 2), 2),
                      map2<double>(host<std::int32_t>{{2}, {he.v[0], he.v[2]}}, one,
                                   [](int x, double) { return double(x) * x; })));
}

TEST_P(ElementwiseTest, MinimumAndMaximum) {
  const host<float> ha = random_host<float>({3, 4}, 111);
  const host<std::int32_t> hb = random_host<std::int32_t>({4}, 112);
  const kiln::tensor a = upload(dev(), ha), b = upload(dev(), hb) / 10;
  host<std::int32_t> hb10{hb.shape, {}};
  for (int y : hb.v) hb10.v.push_back(y / 10);
  EXPECT_TRUE(matches(kiln::minimum(a, b),
                      map2<float>(ha, hb10, [](float x, int y) { return std::min(x, float(y)); })));
  EXPECT_TRUE(matches(kiln::maximum(b, a),
                      map2<float>(hb10, ha, [](int y, float x) { return std::max(float(y), x); })));
  const host<float> zero{{}, {0.5f}};
  EXPECT_TRUE(matches(kiln::maximum(a.t(), 0.5f),
                      remap(map2<float>(ha, zero, [](float x, float c) { return std::max(x, c); }),
                            {4, 3}, [](shape_t c) {
                              return shape_t{c[1], c[0]};
                            })));
  EXPECT_TRUE(matches(kiln::minimum(0.5f, a),
                      map2<float>(zero, ha, [](float c, float x) { return std::min(c, x); })));
  host<std::int32_t> wi{hb.shape, {}};
  for (int y : hb.v) wi.v.push_back(std::max(y, 7));
  EXPECT_TRUE(matches(kiln::maximum(upload(dev(), hb), 7), wi));
}

TEST_P(ElementwiseTest, NewOperationsFuseIntoOneLaunch) {
  const host<float> ha = random_host<float>({4, 5}, 121), hb = random_host<float>({5}, 122);
  const kiln::tensor a = upload(dev(), ha), b = upload(dev(), hb);
  const kiln::tensor r = kiln::maximum(kiln::gelu(a) + kiln::square(b), kiln::floor(a)) -
                         kiln::pow(kiln::abs(b) + 1.f, 1.5f) * kiln::tan(a * 0.1f);
  host<float> want = map2<float>(ha, hb, [](float x, float y) {
    const double g = x * 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
    return std::max(g + double(y) * y, std::floor(double(x))) -
           std::pow(std::fabs(double(y)) + 1, 1.5) * std::tan(x * 0.1);
  });
  EXPECT_TRUE(matches(r, want, 1e-5));
  EXPECT_EQ(stats().kernel_launches, 1u);
}

}  // namespace
}  // namespace tensor_test
