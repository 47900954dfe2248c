// Seeded random numbers: a host Philox4x32-10 checked against Random123's published known-answer
// vectors; rand bit-identical to it on every device; randn within the math libraries' error of
// a double-precision Box-Muller of the same bits; reproducibility, prefixes, seeds, statistics,
// and a random tensor feeding a fused expression.
#include <array>
#include <cmath>
#include <numbers>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using words = std::array<std::uint32_t, 4>;

// Philox4x32-10 (Salmon et al., SC'11; Random123's philox4x32_10), written from the paper.
words philox(words c, std::array<std::uint32_t, 2> k) {
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k[0] += 0x9E3779B9u;
      k[1] += 0xBB67AE85u;
    }
    const std::uint64_t p0 = std::uint64_t{0xD2511F53u} * c[0];
    const std::uint64_t p1 = std::uint64_t{0xCD9E8D57u} * c[2];
    c = {static_cast<std::uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<std::uint32_t>(p1),
         static_cast<std::uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<std::uint32_t>(p0)};
  }
  return c;
}

// Element i of seed: counter (i lo, i hi, 0, 0), key (seed lo, seed hi).
words element(std::uint64_t seed, std::uint64_t i) {
  return philox({static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), 0, 0},
                {static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32)});
}

// The documented mapping from bits to values.
template <class T>
T uniform_ref(std::uint64_t seed, std::uint64_t i) {
  const words w = element(seed, i);
  if constexpr (std::is_same_v<T, float>) return static_cast<float>(w[0] >> 8) * 0x1p-24f;
  const std::uint64_t lo = w[0] | std::uint64_t{w[1]} << 32;
  return static_cast<double>(lo >> 11) * 0x1p-53;
}

// Box-Muller in double from the same uniforms the device computes (u1 in (0, 1]).
template <class T>
double normal_ref(std::uint64_t seed, std::uint64_t i) {
  const words w = element(seed, i);
  double u1, u2;
  if constexpr (std::is_same_v<T, float>) {
    u1 = static_cast<float>((w[0] >> 8) + 1) * 0x1p-24f;
    u2 = static_cast<float>(w[1] >> 8) * 0x1p-24f;
  } else {
    const std::uint64_t lo = w[0] | std::uint64_t{w[1]} << 32,
                        hi = w[2] | std::uint64_t{w[3]} << 32;
    u1 = static_cast<double>((lo >> 11) + 1) * 0x1p-53;
    u2 = static_cast<double>(hi >> 11) * 0x1p-53;
  }
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2);
}

TEST(TensorRandom, HostPhiloxMatchesPublishedKnownAnswers) {
  // Random123 1.14, examples/kat_vectors: philox4x32 10 ctr[4] key[2] -> out[4].
  EXPECT_EQ(philox({0, 0, 0, 0}, {0, 0}), (words{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (words{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (words{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

class RandomTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(RandomTest);

// Seeds whose key words are both non-zero and an index beyond 2^32 exercise the high words.
constexpr std::uint64_t seeds[] = {0, 42, 0x0123456789abcdefull};

TEST_P(RandomTest, RandIsTheHostPhiloxStreamBitForBit) {
  for_each_type(type_list<float, double>{}, [&]<class T>() {
    for (std::uint64_t seed : seeds) {
      const kiln::tensor r = kiln::tensor::rand(dev(), {3, 37}, seed, kiln::scalar_type_of<T>);
      EXPECT_EQ(stats().kernel_launches, 1u);  // evaluated at creation
      EXPECT_FALSE(r.is_lazy());
      host<T> want{{3, 37}, {}};
      for (std::uint64_t i = 0; i < 111; ++i) want.v.push_back(uniform_ref<T>(seed, i));
      EXPECT_TRUE(conformance::elements_equal(r.to_vector<T>(), want.v)) << "seed " << seed;
    }
  });
}

TEST_P(RandomTest, RandnIsBoxMullerOfTheSameBits) {
  for_each_type(type_list<float, double>{}, [&]<class T>() {
    for (std::uint64_t seed : seeds) {
      const kiln::tensor r = kiln::tensor::randn(dev(), {5, 41}, seed, kiln::scalar_type_of<T>);
      host<T> want{{5, 41}, {}};
      for (std::uint64_t i = 0; i < 205; ++i)
        want.v.push_back(static_cast<T>(normal_ref<T>(seed, i)));
      // Within a few ulp of max(1, |z|): the device's log, cos and sqrt and its rounded 2 pi.
      EXPECT_TRUE(matches(r, want, std::is_same_v<T, float> ? 4e-6 : 1e-14)) << "seed " << seed;
      // Across backends (here against the CPU's): within 8 ulp of max(1, |z|) (measured: at
      // most 2 between the CPU and PoCL).
      const std::vector<T> got = r.template to_vector<T>();
      const std::vector<T> cpu =
          kiln::tensor::randn(kiln::device::get("cpu"), {5, 41}, seed, kiln::scalar_type_of<T>)
              .template to_vector<T>();
      std::vector<double> cpu_d(cpu.begin(), cpu.end());
      EXPECT_TRUE(conformance::elements_near(got, cpu_d, [&](std::uint64_t i) {
        return 8 * std::numeric_limits<T>::epsilon() * std::max(1.0, std::fabs(cpu_d[i]));
      }));
    }
  });
}

TEST_P(RandomTest, SameSeedSameValuesAndPrefixesAgree) {
  for (bool normal : {false, true}) {
    const auto make = [&](const shape_t& s, std::uint64_t seed) {
      return normal ? kiln::tensor::randn(dev(), s, seed) : kiln::tensor::rand(dev(), s, seed);
    };
    const std::vector<float> a = make({4, 5}, 7).to_vector<float>();
    EXPECT_EQ(make({4, 5}, 7).to_vector<float>(), a);
    const std::vector<float> b = make({20}, 7).to_vector<float>(),
                             c = make({9}, 7).to_vector<float>();
    EXPECT_EQ(b, a);  // element i depends on (seed, i) only
    EXPECT_TRUE(std::equal(c.begin(), c.end(), a.begin()));
    const std::vector<float> d = make({4, 5}, 8).to_vector<float>();
    int same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += a[i] == d[i];
    EXPECT_EQ(same, 0) << "seeds 7 and 8 share values";
  }
  // Another seed gives another kernel argument, not another kernel.
  kiln::tensor::rand(dev(), {3}, 1).eval();
  kiln::tensor::rand(dev(), {3}, 99);
  EXPECT_EQ(stats().programs_compiled, 0u);
}

template <class T>
void moments(const std::vector<T>& v, double& mean, double& var) {
  mean = 0;
  for (T x : v) mean += x;
  mean /= double(v.size());
  var = 0;
  for (T x : v) var += (x - mean) * (x - mean);
  var /= double(v.size() - 1);
}

TEST_P(RandomTest, MomentsAreSane) {
  for_each_type(type_list<float, double>{}, [&]<class T>() {
    constexpr std::int64_t n = 1 << 13;
    const auto u =
        kiln::tensor::rand(dev(), {n}, 2024, kiln::scalar_type_of<T>).template to_vector<T>();
    double mean, var;
    moments(u, mean, var);
    // Standard errors: mean 0.0032, variance 0.0009 (n = 8192): bounds of more than 9 sigma.
    EXPECT_NEAR(mean, 0.5, 0.03);
    EXPECT_NEAR(var, 1.0 / 12, 0.01);
    EXPECT_TRUE(std::all_of(u.begin(), u.end(), [](T x) { return x >= 0 && x < 1; }));
    const auto z =
        kiln::tensor::randn(dev(), {n}, 2025, kiln::scalar_type_of<T>).template to_vector<T>();
    moments(z, mean, var);
    EXPECT_NEAR(mean, 0, 0.1);  // standard errors 0.011 and 0.016
    EXPECT_NEAR(var, 1, 0.15);
    EXPECT_TRUE(std::all_of(z.begin(), z.end(), [](T x) { return std::isfinite(x); }));
  });
}

TEST_P(RandomTest, OnlyFloatingDtypesAndEmptyShapes) {
  EXPECT_THROW(kiln::tensor::rand(dev(), {3}, 1, kiln::scalar_type::i32), kiln::dtype_error);
  EXPECT_THROW(kiln::tensor::randn(dev(), {3}, 1, kiln::scalar_type::u64), kiln::dtype_error);
  EXPECT_THROW(kiln::tensor::rand(dev(), {-1}, 1), kiln::shape_error);
  const kiln::tensor e = kiln::tensor::randn(dev(), {0, 4}, 1);
  EXPECT_EQ(e.shape(), (shape_t{0, 4}));
  EXPECT_TRUE(e.to_vector<float>().empty());
  EXPECT_EQ(kiln::tensor::rand(dev(), {}, 5).item<float>(), uniform_ref<float>(5, 0));
}

TEST_P(RandomTest, RandomTensorFeedsAFusedExpression) {
  const host<float> hx = random_host<float>({3, 1}, 31);
  const kiln::tensor x = upload(dev(), hx);
  const kiln::tensor z = kiln::tensor::randn(dev(), {3, 4}, 11);  // one launch, now
  EXPECT_FALSE(z.is_lazy());
  const kiln::tensor r = kiln::relu(z * 2.f + x);
  EXPECT_TRUE(r.is_lazy());
  const std::vector<float> zv = z.to_vector<float>();
  host<float> want{{3, 4}, {}};
  for (std::size_t i = 0; i < 12; ++i) want.v.push_back(std::max(zv[i] * 2.f + hx.v[i / 4], 0.f));
  EXPECT_TRUE(matches(r, want));
  EXPECT_EQ(stats().kernel_launches, 1u);
  // A random view (transposed, non-contiguous) reads with its strides.
  const kiln::tensor u = kiln::tensor::rand(dev(), {4, 3}, 12, kiln::scalar_type::f64);
  const std::vector<double> uv = u.to_vector<double>();
  host<double> wt{{3, 4}, {}};
  for (std::size_t i = 0; i < 12; ++i) wt.v.push_back(uv[(i % 4) * 3 + i / 4] - 0.5);
  EXPECT_TRUE(matches(u.t() - 0.5, wt));
}

}  // namespace
}  // namespace tensor_test
