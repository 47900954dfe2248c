// f16 and bf16 tensors on every device against host references: conversions bit-exact with
// round-to-nearest-even, fused chains computed in float and rounded once at the store,
// reductions accumulated in float, PyTorch's promotion rules, matmul (cuBLAS on CUDA, the
// portable kernels elsewhere), safetensors, the kernel language's half/bfloat16, clear errors.
#include <bit>
#include <cmath>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <kiln/tensor/conv.hpp>
#include <kiln/tensor/safetensors.hpp>
#include <limits>
#include <random>

#include "tensor/promote.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::bfloat16;
using kiln::half;
using kiln::scalar_type;

// The representable neighbours of a 16-bit float's bits, in value order (positive values
// ascend with the bits, negative ones descend).
template <class H>
float neighbour(std::uint16_t bits, int step) {
  const bool neg = bits & 0x8000u;
  const int mag = int(bits & 0x7fffu) + (neg ? -step : step);
  if (mag < 0) return -float(H::from_bits(std::uint16_t(0x8000u | -mag)));  // crosses zero
  return float(H::from_bits(std::uint16_t((neg ? 0x8000u : 0u) | unsigned(mag))));
}

// h is x rounded to nearest, ties to even: no neighbour is closer, and a tie keeps the even one.
template <class H>
::testing::AssertionResult rounds_to_nearest_even(float x, H h) {
  const double v = float(h), d = std::abs(double(x) - v);
  for (int step : {-1, 1}) {
    const float n = neighbour<H>(h.bits, step);
    if (std::isinf(v) || std::isinf(n)) continue;
    const double dn = std::abs(double(x) - double(n));
    if (dn < d || (dn == d && (h.bits & 1u)))
      return ::testing::AssertionFailure()
             << x << " became " << v << " (bits " << h.bits << "), but " << n << " is nearer";
  }
  return ::testing::AssertionSuccess();
}

TEST(ReducedPrecisionHost, ConversionsRoundToNearestEvenAndWidenExactly) {
  // Every 16-bit pattern widens to float and narrows back to itself (NaNs stay NaN).
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const half h = half::from_bits(std::uint16_t(b));
    const bfloat16 g = bfloat16::from_bits(std::uint16_t(b));
    if (std::isnan(float(h)))
      EXPECT_TRUE(std::isnan(float(half(float(h)))));
    else
      ASSERT_EQ(half(float(h)).bits, b);
    if (std::isnan(float(g)))
      EXPECT_TRUE(std::isnan(float(bfloat16(float(g)))));
    else
      ASSERT_EQ(bfloat16(float(g)).bits, b);
  }
  // Random floats over every binade that rounds to a finite value, and the exact ties.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> ex(-26, 15);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mant(rng), ex(rng)) * (i % 2 ? -1.f : 1.f);
    ASSERT_TRUE(rounds_to_nearest_even(x, half(x)));
    ASSERT_TRUE(rounds_to_nearest_even(x, bfloat16(x)));
  }
  EXPECT_EQ(half(1.f + 1.f / 2048).bits, half(1.f).bits);  // tie: even (1.0)
  EXPECT_EQ(half(1.f + 3.f / 2048).bits, half(1.f + 1.f / 512).bits);
  EXPECT_TRUE(std::isinf(float(half(65520.f))));  // rounds past 65504
  EXPECT_EQ(float(half(65519.f)), 65504.f);
  EXPECT_EQ(float(half(std::ldexp(1.f, -24))), std::ldexp(1.f, -24));  // least subnormal
  EXPECT_EQ(float(half(std::ldexp(1.f, -25))), 0.f);                   // tie to even: zero
  EXPECT_EQ(float(bfloat16(1.f + 1.f / 256)), 1.f);                    // tie: even
  EXPECT_EQ(float(bfloat16(1.f + 3.f / 256)), 1.f + 1.f / 64);
  EXPECT_TRUE(std::isinf(float(bfloat16(std::numeric_limits<float>::max()))));
}

TEST(ReducedPrecisionHost, PromotionFollowsPyTorch) {
  using kiln::detail::promote;
  EXPECT_EQ(promote(scalar_type::f16, scalar_type::bf16), scalar_type::f32);
  EXPECT_EQ(promote(scalar_type::f16, scalar_type::f32), scalar_type::f32);
  EXPECT_EQ(promote(scalar_type::bf16, scalar_type::f64), scalar_type::f64);
  EXPECT_EQ(promote(scalar_type::i64, scalar_type::f16), scalar_type::f16);
  EXPECT_EQ(promote(scalar_type::bf16, scalar_type::boolean), scalar_type::bf16);
  EXPECT_EQ(promote(scalar_type::f16, scalar_type::f16), scalar_type::f16);
  EXPECT_EQ(kiln::detail::math_type(scalar_type::bf16), scalar_type::bf16);
  static_assert(kiln::scalar_type_of<half> == scalar_type::f16);
  EXPECT_EQ(kiln::size_of(scalar_type::bf16), 2u);
  EXPECT_STREQ(kiln::type_name(scalar_type::f16), "half");
}

class ReducedPrecisionTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ReducedPrecisionTest);

template <class H>
std::vector<H> random_reduced(std::size_t n, std::uint64_t seed, float lo = -4.f, float hi = 4.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<H> v(n);
  for (auto& x : v) {
    float f = d(rng);
    if (f == 0.f) f = 0.5f;
    x = H(f);
  }
  return v;
}

// |got - want| within `ulps` units in the last place of H at want's magnitude.
template <class H>
bool close(float got, double want, double ulps) {
  const int mant = std::is_same_v<H, half> ? 10 : 7;
  const double unit = std::ldexp(1.0, std::ilogb(std::max(std::abs(want), 1e-4)) - mant);
  return std::abs(double(got) - want) <= ulps * unit;
}

template <class H>
void check_to_round_trip(const kiln::device& dev, scalar_type t) {
  // Values in every binade a 16-bit float holds, ties, overflow, NaN, signed zero.
  std::vector<float> x = {0.f,
                          -0.f,
                          1.f + 1.f / 2048,
                          65519.f,
                          65520.f,
                          -1e6f,
                          3.0e38f,
                          std::numeric_limits<float>::quiet_NaN(),
                          std::ldexp(1.f, -25),
                          std::ldexp(1.f, -24),
                          1.f / 3};
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> mant(1.f, 2.f);
  std::uniform_int_distribution<int> ex(-30, 20);
  for (int i = 0; i < 5000; ++i) x.push_back(std::ldexp(mant(rng), ex(rng)) * (i % 3 ? 1 : -1));
  const kiln::tensor f = kiln::tensor::from(dev, x);
  const kiln::tensor r = f.to(t);
  ASSERT_EQ(r.dtype(), t);
  const std::vector<H> got = r.to_vector<H>();
  ASSERT_EQ(got.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(float(got[i])));
      continue;
    }
    ASSERT_EQ(got[i].bits, H(x[i]).bits) << "element " << i << " = " << x[i];
  }
  // Widening back is exact.
  const std::vector<float> back = r.to(scalar_type::f32).to_vector<float>();
  for (std::size_t i = 0; i < x.size(); ++i)
    if (!std::isnan(x[i])) {
      ASSERT_EQ(back[i], float(H(x[i]))) << "element " << i;
    }
}

TEST_P(ReducedPrecisionTest, ToRoundsToNearestEvenBitExactly) {
  check_to_round_trip<half>(dev(), scalar_type::f16);
  check_to_round_trip<bfloat16>(dev(), scalar_type::bf16);
}

// Every 16-bit pattern widens exactly, and every float halfway between two neighbouring finite
// values (and one float ulp either side of it) narrows as the host's round-to-nearest-even does:
// each tie of each binade, subnormals included. The CPU backend converts half with the CPU's
// own instructions (F16C) where its kernels are compiled for them, the GPUs with theirs.
template <class H>
void check_every_pattern(const kiln::device& dev, scalar_type t) {
  std::vector<H> all(1u << 16);
  for (std::uint32_t b = 0; b < all.size(); ++b) all[b] = H::from_bits(std::uint16_t(b));
  const std::vector<float> wide =
      kiln::tensor::from(dev, all).to(scalar_type::f32).template to_vector<float>();
  std::vector<float> ties;
  for (std::uint32_t b = 0; b < all.size(); ++b) {
    const float v = float(all[b]);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(wide[b])) << "bits " << b;
      continue;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(wide[b]), std::bit_cast<std::uint32_t>(v))
        << "bits " << b << " = " << v;
    if (std::isinf(v) || (b & 0x7fffu) == 0x7fffu) continue;
    const float up = neighbour<H>(std::uint16_t(b), 1);
    if (std::isinf(up) || std::isnan(up)) continue;
    const float mid = float((double(v) + double(up)) / 2);  // exact: fewer than 24 bits
    ties.insert(ties.end(), {mid, std::nextafter(mid, v), std::nextafter(mid, up)});
  }
  const std::vector<H> got = kiln::tensor::from(dev, ties).to(t).template to_vector<H>();
  for (std::size_t i = 0; i < ties.size(); ++i)
    ASSERT_EQ(got[i].bits, H(ties[i]).bits) << "element " << i << " = " << ties[i];
}

TEST_P(ReducedPrecisionTest, EveryPatternWidensExactlyAndEveryTieRoundsToEven) {
  check_every_pattern<half>(dev(), scalar_type::f16);
  check_every_pattern<bfloat16>(dev(), scalar_type::bf16);
}

template <class H>
void check_chain(const kiln::device& dev) {
  const std::size_t n = 3001;
  const auto a = random_reduced<H>(n, 21), b = random_reduced<H>(n, 22);
  const kiln::tensor ta = kiln::tensor::from(dev, a), tb = kiln::tensor::from(dev, b);
  // One fused kernel, computed in float, rounded once where it stores.
  const kiln::tensor r = kiln::sqrt(kiln::abs(ta * tb + ta)) - tb / 3;
  EXPECT_EQ(r.dtype(), kiln::scalar_type_of<H>);
  const std::vector<H> got = r.to_vector<H>();
  EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 1u);
  for (std::size_t i = 0; i < n; ++i) {
    const double x = float(a[i]), y = float(b[i]);
    const double want = double(float(H(float(std::sqrt(std::abs(x * y + x)) - y / 3))));
    ASSERT_TRUE(close<H>(float(got[i]), want, 1)) << i << ": " << float(got[i]) << " vs " << want;
  }
  // An explicit cast inside a chain rounds there: (x / 3).to(H).to(f32) * 3 is not x.
  const kiln::tensor c = (ta.to(scalar_type::f32) / 3).to(kiln::scalar_type_of<H>);
  const std::vector<float> third = (c.to(scalar_type::f32) * 3.f).to_vector<float>();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(third[i], float(H(float(a[i]) / 3.f)) * 3.f) << i;
}

// Chains over a million elements (GPUs move 16-bit arrays as 4-, 8- or 16-byte words, the
// lanes set by where each input starts): views starting 0, 1, 2 or 4 elements in, a ragged
// end, f32 operands mixed in, results of every width. Each element against the host.
template <class H>
void check_word_lanes(const kiln::device& dev, std::initializer_list<std::int64_t> offsets) {
  const std::size_t n = (std::size_t(1) << 20) + 13;
  const auto a = random_reduced<H>(n + 8, 51), b = random_reduced<H>(n + 8, 52);
  const kiln::tensor ta = kiln::tensor::from(dev, a), tb = kiln::tensor::from(dev, b);
  std::vector<float> f(n);
  for (std::size_t i = 0; i < n; ++i) f[i] = float(i % 1000) / 256.f - 2.f;
  const kiln::tensor tf = kiln::tensor::from(dev, f);
  for (std::int64_t off : offsets) {
    const std::int64_t boff = (8 - off) % 8;  // both on one word boundary, or not
    const auto at = std::size_t(off), bt = std::size_t(boff);
    const kiln::tensor x = ta.slice(0, off, off + std::int64_t(n));
    const kiln::tensor y = tb.slice(0, boff, boff + std::int64_t(n));
    const std::vector<H> chain = kiln::relu(x * y + x).template to_vector<H>();
    for (std::size_t i = 0; i < n; ++i) {
      const float u = float(a[i + at]), v = float(b[i + bt]);
      ASSERT_EQ(chain[i].bits, H(std::max(u * v + u, 0.f)).bits) << "offset " << off << ", " << i;
    }
    if (off % 4 == 1) continue;  // (each distinct kernel compiles once more on PoCL)
    const std::vector<float> mixed = (x * tf - y).template to_vector<float>();
    const std::vector<bool> less = (x < y).template to_vector<bool>();
    for (std::size_t i = 0; i < n; ++i) {
      const float u = float(a[i + at]), v = float(b[i + bt]);
      ASSERT_EQ(mixed[i], u * f[i] - v) << "offset " << off << ", " << i;
      ASSERT_EQ(less[i], u < v) << "offset " << off << ", " << i;
    }
  }
  // f32 in, 16-bit words out.
  const std::vector<H> narrowed = (tf / 3.f).to(kiln::scalar_type_of<H>).template to_vector<H>();
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(narrowed[i].bits, H(f[i] / 3.f).bits) << i;
}

TEST_P(ReducedPrecisionTest, LongChainsGiveEveryElementWhereverTheInputsStart) {
  check_word_lanes<half>(dev(), {0});
  check_word_lanes<bfloat16>(dev(), {0, 1, 2, 4});
}

TEST_P(ReducedPrecisionTest, FusedChainsComputeInFloatAndRoundOnce) {
  check_chain<half>(dev());
  check_chain<bfloat16>(dev());
}

TEST_P(ReducedPrecisionTest, MixedOperandsPromoteAsPyTorch) {
  const auto a = random_reduced<half>(64, 31);
  const auto b = random_reduced<bfloat16>(64, 32);
  const kiln::tensor h = kiln::tensor::from(dev(), a), g = kiln::tensor::from(dev(), b);
  const kiln::tensor sum = h + g;
  EXPECT_EQ(sum.dtype(), scalar_type::f32);
  EXPECT_EQ((h * 2).dtype(), scalar_type::f16);
  EXPECT_EQ((g + std::int64_t{1}).dtype(), scalar_type::bf16);
  EXPECT_EQ((h * 2.f).dtype(), scalar_type::f32);
  EXPECT_EQ((h < g).dtype(), scalar_type::boolean);
  const std::vector<float> got = sum.to_vector<float>();
  for (std::size_t i = 0; i < a.size(); ++i) ASSERT_EQ(got[i], float(a[i]) + float(b[i]));
}

template <class H>
void check_reductions(const kiln::device& dev) {
  const std::int64_t rows = 37, cols = 1025;
  const auto v = random_reduced<H>(std::size_t(rows * cols), 41);
  const kiln::tensor x = kiln::tensor::from(dev, v, {rows, cols});
  const std::vector<H> s = x.sum(1).template to_vector<H>();
  const std::vector<H> m = x.max(1).template to_vector<H>();
  const std::vector<H> all = x.sum().template to_vector<H>();
  const std::vector<H> sm = x.softmax(1).template to_vector<H>();
  double total = 0;
  for (std::int64_t r = 0; r < rows; ++r) {
    double acc = 0, mx = -1e30;
    for (std::int64_t c = 0; c < cols; ++c) {
      const double e = float(v[std::size_t(r * cols + c)]);
      acc += e;
      mx = std::max(mx, e);
    }
    total += acc;
    // Accumulated in float (a float's error over 1025 terms is far below a half ulp).
    ASSERT_TRUE(close<H>(float(s[std::size_t(r)]), acc, 1)) << r;
    ASSERT_EQ(float(m[std::size_t(r)]), float(mx)) << r;
    double z = 0;
    for (std::int64_t c = 0; c < cols; ++c) z += std::exp(float(v[std::size_t(r * cols + c)]) - mx);
    for (std::int64_t c = 0; c < cols; c += 97) {
      const double want = std::exp(float(v[std::size_t(r * cols + c)]) - mx) / z;
      ASSERT_TRUE(close<H>(float(sm[std::size_t(r * cols + c)]), want, 2)) << r << "," << c;
    }
  }
  ASSERT_EQ(all.size(), 1u);
  EXPECT_TRUE(close<H>(float(all[0]), total, 1)) << float(all[0]) << " vs " << total;
}

TEST_P(ReducedPrecisionTest, ReductionsAccumulateInFloat) {
  check_reductions<half>(dev());
  check_reductions<bfloat16>(dev());
}

template <class H>
void check_matmul(const kiln::device& dev, std::int64_t batch, std::int64_t m, std::int64_t k,
                  std::int64_t n) {
  SCOPED_TRACE(std::to_string(batch) + " x " + std::to_string(m) + "x" + std::to_string(k) + "x" +
               std::to_string(n));
  const auto a = random_reduced<H>(std::size_t(batch * m * k), 51, -1.f, 1.f);
  const auto b = random_reduced<H>(std::size_t(batch * k * n), 52, -1.f, 1.f);
  const kiln::tensor ta = kiln::tensor::from(dev, a, {batch, m, k});
  const kiln::tensor tb = kiln::tensor::from(dev, b, {batch, k, n});
  const kiln::tensor c = kiln::matmul(ta, tb);
  EXPECT_EQ(c.dtype(), kiln::scalar_type_of<H>);
  const std::vector<H> got = c.template to_vector<H>();
  for (std::int64_t z = 0; z < batch; ++z)
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double want = 0, magnitude = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double t = double(float(a[std::size_t((z * m + i) * k + p)])) *
                           double(float(b[std::size_t((z * k + p) * n + j)]));
          want += t;
          magnitude += std::abs(t);
        }
        // f32 accumulation's error (k terms of `magnitude`; large under cancellation), then
        // one rounding to H.
        const float g = float(got[std::size_t((z * m + i) * n + j)]);
        const double f32_error = double(k) * std::ldexp(magnitude, -24);
        ASSERT_TRUE(close<H>(g, want, 1.5) || close<H>(g, want + f32_error, 1.5) ||
                    close<H>(g, want - f32_error, 1.5) || std::abs(g - want) <= f32_error)
            << z << "," << i << "," << j << ": " << g << " vs " << want;
      }
}

// Row kernels over 16-bit rows of 256, 512 and 1024 elements (on warp32 GPUs a lane's elements
// come as 16-byte words of 8 consecutive ones), a 16-bit weight along the row, and a view
// starting off a word: softmax and a normalisation chain against the host, in double.
template <class H>
void check_word_rows(const kiln::device& dev) {
  for (std::int64_t cols : {256, 512, 1024}) {
    const std::int64_t rows = 19;
    const auto v = random_reduced<H>(std::size_t(rows * cols + 4), std::uint64_t(60 + cols));
    const auto w = random_reduced<H>(std::size_t(cols), 61, 0.5f, 2.f);
    const kiln::tensor all = kiln::tensor::from(dev, v);
    const kiln::tensor tw = kiln::tensor::from(dev, w);
    for (std::int64_t off : {0, 4}) {
      SCOPED_TRACE("rows of " + std::to_string(cols) + ", offset " + std::to_string(off));
      const kiln::tensor x = all.slice(0, off, off + rows * cols).reshape({rows, cols});
      const std::vector<H> sm = x.softmax(1).template to_vector<H>();
      const std::vector<H> nm = ((x - x.mean(1, true)) * tw).template to_vector<H>();
      for (std::int64_t r = 0; r < rows; ++r) {
        double mx = -1e30, sum = 0;
        const auto at = [&](std::int64_t c) {
          return double(float(v[std::size_t(off + r * cols + c)]));
        };
        for (std::int64_t c = 0; c < cols; ++c) mx = std::max(mx, at(c)), sum += at(c);
        double z = 0;
        for (std::int64_t c = 0; c < cols; ++c) z += std::exp(at(c) - mx);
        const double mean = sum / double(cols);
        for (std::int64_t c = 0; c < cols; ++c) {
          const std::size_t i = std::size_t(r * cols + c);
          ASSERT_TRUE(close<H>(float(sm[i]), std::exp(at(c) - mx) / z, 2)) << r << "," << c;
          // computed in float, rounded once at the store (bf16: 8 bits), the mean in float
          const double want = (at(c) - mean) * double(float(w[std::size_t(c)]));
          ASSERT_NEAR(float(nm[i]), want, 4 * std::abs(want) / 128 + 1e-2) << r << "," << c;
        }
      }
    }
  }
}

TEST_P(ReducedPrecisionTest, RowKernelsOverSixteenBitRows) {
  check_word_rows<half>(dev());
  check_word_rows<bfloat16>(dev());
}

TEST_P(ReducedPrecisionTest, MatmulAccumulatesInFloat) {
  check_matmul<half>(dev(), 1, 67, 129, 45);
  check_matmul<bfloat16>(dev(), 1, 67, 129, 45);
  check_matmul<half>(dev(), 3, 16, 40, 24);
}

TEST_P(ReducedPrecisionTest, SafetensorsKeepsTheBits) {
  const auto a = random_reduced<half>(24, 61);
  const auto b = random_reduced<bfloat16>(6, 62);
  const std::string path = ::testing::TempDir() + "kiln_reduced_" + dev().id() + ".safetensors";
  std::string file = path;
  for (char& ch : file)
    if (ch == ':') ch = '_';
  kiln::save_safetensors(file, {{"h", kiln::tensor::from(dev(), a, {4, 6})},
                                {"g", kiln::tensor::from(dev(), b, {6})}});
  const kiln::safetensors_file f = kiln::load_safetensors(file, dev());
  EXPECT_EQ(f.at("h").dtype(), scalar_type::f16);
  EXPECT_EQ(f.at("g").dtype(), scalar_type::bf16);
  const auto h = f.at("h").to_vector<half>();
  const auto g = f.at("g").to_vector<bfloat16>();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(h[i].bits, a[i].bits);
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(g[i].bits, b[i].bits);
  std::remove(file.c_str());
}

constexpr const char* kernel_source = R"(
KILN_KERNEL void axpy_mixed(KILN_GLOBAL const half* x, KILN_GLOBAL bfloat16* y, half a) {
  const uint64_t i = kiln_global_id(0);
  y[i] = kiln_float_to_bfloat16(kiln_half_to_float(a) * kiln_half_to_float(x[i]) +
                                kiln_bfloat16_to_float(y[i]));
}
)";

TEST_P(ReducedPrecisionTest, KernelLanguageHasHalfAndBfloat16) {
  const std::size_t n = 1000;
  const auto x = random_reduced<half>(n, 71);
  const auto y = random_reduced<bfloat16>(n, 72);
  kiln::buffer<half> xb(dev(), x);
  kiln::buffer<bfloat16> yb(dev(), y);
  const kiln::kernel k = compile(kernel_source).get_kernel("axpy_mixed");
  k.launch(dev().default_queue(), kiln::range(n), xb, yb, half(1.5f));
  const std::vector<bfloat16> got = yb.to_vector();
  for (std::size_t i = 0; i < n; ++i) {
    const float want = 1.5f * float(x[i]) + float(y[i]);
    ASSERT_EQ(got[i].bits, bfloat16(want).bits) << i;
  }
  // A float where the kernel takes a half is refused with the types named.
  try {
    k.launch(dev().default_queue(), kiln::range(n), xb, yb, 1.5f);
    ADD_FAILURE() << "a float argument for a half parameter was accepted";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("half"), std::string::npos) << e.what();
  }
}

TEST_P(ReducedPrecisionTest, MixedDtypesAreRefusedNamingBoth) {
  const kiln::tensor x =
      kiln::tensor::from(dev(), random_reduced<half>(2 * 3 * 8 * 8, 81), {2, 3, 8, 8});
  const kiln::tensor w =
      kiln::tensor::from(dev(), random_reduced<half>(4 * 3 * 3 * 3, 82), {4, 3, 3, 3});
  // conv2d takes half (TensorConvTest.SixteenBit*), but not half with float.
  try {
    (void)kiln::conv2d(x, w.to(kiln::scalar_type::f32));
    ADD_FAILURE() << "conv2d of half and float was accepted";
  } catch (const kiln::dtype_error& e) {
    EXPECT_NE(std::string(e.what()).find("half"), std::string::npos) << e.what();
  }
  const kiln::tensor f = kiln::tensor::from(dev(), std::vector<float>(12, 1.f), {3, 4});
  const kiln::tensor h = kiln::tensor::from(dev(), random_reduced<half>(4 * 5, 83), {4, 5});
  try {
    (void)kiln::matmul(f, h);
    ADD_FAILURE() << "matmul of float and half was accepted";
  } catch (const kiln::dtype_error& e) {
    EXPECT_NE(std::string(e.what()).find("different dtypes"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tensor_test
