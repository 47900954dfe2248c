// topk and multinomial (kiln/tensor/sampling.hpp) on every device against host references:
// topk on random rows with duplicates and NaN (ties by lower index, NaN largest), k = 1, 64 and
// the whole row, rows of several chunks (two passes), dims other than the last, 16-bit and
// integer dtypes, its gradient, empty results and errors; multinomial with and without
// replacement: samples equal to a host inverse-CDF over tensor::rand's uniforms (so equal on
// every backend), in range, zero weights never drawn, distinct without replacement, frequencies
// by a loose chi-square, and the errors bad weights get.
#include <algorithm>
#include <cmath>
#include <kiln/tensor/sampling.hpp>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "tensor/sampling_kernels.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::scalar_type;
using kiln::tensor;

class TensorSamplingTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorSamplingTest);

// Host topk along the last dim of [rows, n] doubles: positions ordered best first (NaN largest,
// ties by lower index).
std::vector<std::int64_t> host_topk(const std::vector<double>& x, std::int64_t rows, std::int64_t n,
                                    std::int64_t k, bool largest) {
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < rows; ++r) {
    std::vector<std::int64_t> p(static_cast<std::size_t>(n));
    std::iota(p.begin(), p.end(), 0);
    const double* v = x.data() + r * n;
    auto before = [&](std::int64_t a, std::int64_t b) {
      const bool na = std::isnan(v[a]), nb = std::isnan(v[b]);
      if (na || nb) return na && nb ? false : (largest ? na : nb);
      return largest ? v[a] > v[b] : v[a] < v[b];
    };
    std::stable_sort(p.begin(), p.end(), before);
    out.insert(out.end(), p.begin(), p.begin() + k);
  }
  return out;
}

// Values with many duplicates (a few levels, exact in 16 bits) and, when nan, some NaN.
std::vector<double> levels(std::size_t n, std::uint64_t seed, bool nan) {
  std::mt19937_64 rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) {
    x = double(std::int64_t(rng() % 41) - 20) * 0.5;
    if (nan && rng() % 50 == 0) x = std::numeric_limits<double>::quiet_NaN();
  }
  return v;
}

std::vector<double> read(const tensor& t) { return t.to(scalar_type::f64).to_vector<double>(); }
std::vector<std::int64_t> ids(const tensor& t) { return t.to_vector<std::int64_t>(); }

// x [rows, n] of dtype t (from doubles): topk's indices equal the host's, values x's at them.
void check_last_dim(const kiln::device& dev, scalar_type t, std::int64_t rows, std::int64_t n,
                    std::int64_t k, bool largest, bool nan, std::uint64_t seed) {
  SCOPED_TRACE(std::string(kiln::type_name(t)) + " [" + std::to_string(rows) + ", " +
               std::to_string(n) + "] k " + std::to_string(k) +
               (largest ? " largest" : " smallest"));
  const std::vector<double> h = levels(std::size_t(rows * n), seed, nan);
  const tensor x = tensor::from(dev, h, {rows, n}).to(t);
  const auto r = kiln::topk(x, k, -1, largest);
  ASSERT_EQ(r.indices.dtype(), scalar_type::i64);
  ASSERT_EQ(r.values.dtype(), t);
  ASSERT_EQ(r.indices.shape(), (shape_t{rows, k}));
  const auto want = host_topk(read(x), rows, n, k, largest);
  ASSERT_EQ(ids(r.indices), want);
  const std::vector<double> xv = read(x), got = read(r.values);
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double w = xv[std::size_t(std::int64_t(i) / k * n + want[i])];
    ASSERT_TRUE(std::isnan(w) ? std::isnan(got[i]) : got[i] == w) << "at " << i;
  }
}

TEST_P(TensorSamplingTest, TopkMatchesHostWithDuplicatesAndNaN) {
  for (bool largest : {true, false}) {
    check_last_dim(dev(), scalar_type::f32, 3, 100, 1, largest, true, 1);
    check_last_dim(dev(), scalar_type::f32, 3, 100, 100, largest, true, 2);
    // Rows of several 1024-entry chunks: a second pass merges the chunks' candidates.
    check_last_dim(dev(), scalar_type::f32, 4, 5000, 64, largest, true, 3);
    check_last_dim(dev(), scalar_type::f32, 2, 3000, 7, largest, false, 4);
  }
}

// Both chunk layouts (contiguous: CPUs; interleaved: GPUs) on every device, with chunks of 40
// entries so that rows take four passes (3000 -> 375 -> 50 -> 10 -> 5 candidates).
TEST_P(TensorSamplingTest, TopkBothChunkLayoutsAgree) {
  const std::int64_t rows = 3, n = 3000, k = 5;
  const std::vector<double> h = levels(std::size_t(rows * n), 8, true);
  const tensor x = tensor::from(dev(), h, {rows, n}).to(scalar_type::f32);
  for (bool largest : {true, false}) {
    const auto want = host_topk(read(x), rows, n, k, largest);
    for (bool interleaved : {false, true})
      EXPECT_EQ(ids(kiln::detail::topk_rows(x, k, largest, interleaved, 16, 1000)), want)
          << (interleaved ? "interleaved" : "contiguous") << (largest ? " largest" : " smallest");
  }
}

// The work-group radix select (GPUs' path) on every device with barriers (PoCL in CI): every
// dtype, NaN and -0 / +0, ties across tiles, k up to the whole row and to its limit.
TEST_P(TensorSamplingTest, TopkWorkGroupRadixSelect) {
  if (!kiln::detail::topk_group_fits(dev(), 1, 1)) GTEST_SKIP() << "no barriers or local atomics";
  // One dtype per key mapping: 32- and 16-bit floats, signed and unsigned integers (f64 too).
  std::vector<scalar_type> ts{scalar_type::f32, scalar_type::bf16, scalar_type::i64,
                              scalar_type::u8};
  if (has_f64()) ts.push_back(scalar_type::f64);
  for (scalar_type t : ts)
    for (bool largest : {true, false})
      for (std::int64_t k : {1, 7, 300}) {
        SCOPED_TRACE(std::string(kiln::type_name(t)) + " k " + std::to_string(k) +
                     (largest ? " largest" : " smallest"));
        const std::int64_t rows = 3, n = 1000;
        std::vector<double> h =
            levels(std::size_t(rows * n), 9, kiln::is_reduced_float(t) || t == scalar_type::f32);
        if (t == scalar_type::u8)
          for (auto& v : h) v = std::abs(v) * 2;
        if (t == scalar_type::f32) h[5] = -0.0;  // equal to +0 (ties by index)
        const tensor x = tensor::from(dev(), h, {rows, n}).to(t).eval();
        const auto want = host_topk(read(x), rows, n, k, largest);
        ASSERT_EQ(ids(kiln::detail::topk_rows_group(x, k, largest)), want);
      }
  const tensor big = tensor::from(dev(), levels(3000, 10, true), {3000});
  EXPECT_EQ(ids(kiln::detail::topk_rows_group(big, 1024, true)),
            host_topk(read(big), 1, 3000, 1024, true));
  EXPECT_EQ(ids(kiln::detail::topk_rows_group(big, 1024, false)),
            host_topk(read(big), 1, 3000, 1024, false));
  EXPECT_THROW((void)kiln::detail::topk_rows_group(big, 1025, true), kiln::unsupported);
}

TEST_P(TensorSamplingTest, TopkEveryOrderedDtype) {
  std::vector<scalar_type> ts{scalar_type::f16, scalar_type::bf16, scalar_type::i32,
                              scalar_type::i64, scalar_type::i8,   scalar_type::i16};
  if (has_f64()) ts.push_back(scalar_type::f64);
  for (scalar_type t : ts)
    check_last_dim(dev(), t, 3, 1500, 10, true, kiln::is_reduced_float(t), 5);
  // Unsigned and bool (from non-negative data).
  const tensor u = tensor::from(dev(), std::vector<std::int64_t>{3, 9, 0, 9, 200, 3}, {6});
  const auto a = kiln::topk(u.to(scalar_type::u8), 3);
  EXPECT_EQ(ids(a.indices), (std::vector<std::int64_t>{4, 1, 3}));
  EXPECT_EQ(read(a.values), (std::vector<double>{200, 9, 9}));
  const auto b = kiln::topk(u.to(scalar_type::boolean), 6, 0, false);
  EXPECT_EQ(ids(b.indices), (std::vector<std::int64_t>{2, 0, 1, 3, 4, 5}));
}

TEST_P(TensorSamplingTest, TopkAlongOtherDims) {
  const std::int64_t A = 5, B = 300, C = 3;
  const std::vector<double> h = levels(std::size_t(A * B * C), 7, true);
  const tensor x = tensor::from(dev(), h, {A, B, C});
  for (int dim : {0, 1, -2}) {
    SCOPED_TRACE("dim " + std::to_string(dim));
    const int d = dim < 0 ? dim + 3 : dim;
    const std::int64_t n = x.size(d), k = d == 0 ? 2 : 17;
    // The host reference on x moved so that dim is last.
    const tensor moved = x.transpose(d, 2).contiguous();
    const std::int64_t rows = x.numel() / n;
    const auto want = host_topk(read(moved), rows, n, k, true);
    const auto r = kiln::topk(x, k, dim);
    shape_t s = x.shape();
    s[std::size_t(d)] = k;
    ASSERT_EQ(r.indices.shape(), s);
    ASSERT_EQ(ids(r.indices.transpose(d, 2).contiguous()), want);
    const std::vector<double> mv = read(moved), got = read(r.values.transpose(d, 2).contiguous());
    for (std::size_t i = 0; i < want.size(); ++i) {
      const double w = mv[std::size_t(std::int64_t(i) / k * n + want[i])];
      ASSERT_TRUE(std::isnan(w) ? std::isnan(got[i]) : got[i] == w);
    }
  }
}

TEST_P(TensorSamplingTest, TopkGradientScattersToTheChosen) {
  const host<float> hx = random_host<float>({4, 50}, 11), hg = random_host<float>({4, 6}, 12);
  tensor x = upload(dev(), hx);
  x.requires_grad_();
  const auto r = kiln::topk(x * 2.f, 6, 1, false);
  r.values.backward(upload(dev(), hg));
  const auto idx = ids(r.indices);
  std::vector<float> want(200, 0.f);
  for (std::size_t i = 0; i < idx.size(); ++i)
    want[i / 6 * 50 + std::size_t(idx[i])] += 2.f * hg.v[i];
  EXPECT_EQ(x.grad().to_vector<float>(), want);
  // Central differences through a sum of the top values (x has no ties: distinct random floats).
  tensor y = upload(dev(), hx);
  y.requires_grad_();
  kiln::topk(y, 3, 0).values.sum().backward();
  const std::vector<float> g = y.grad().to_vector<float>();
  for (std::size_t at : {std::size_t(0), std::size_t(77), std::size_t(199)}) {
    auto f = [&](float delta) {
      std::vector<float> v = hx.v;
      v[at] += delta;
      return kiln::topk(tensor::from(dev(), v, {4, 50}), 3, 0).values.sum().item<float>();
    };
    EXPECT_NEAR((f(1e-2f) - f(-1e-2f)) / 2e-2f, g[at], 1e-2) << "at " << at;
  }
}

TEST_P(TensorSamplingTest, TopkEmptyScalarAndErrors) {
  const tensor x = tensor::from(dev(), std::vector<float>{3, 1, 2, 5, 4, 0}, {2, 3});
  const auto z = kiln::topk(x, 0);
  EXPECT_EQ(z.values.shape(), (shape_t{2, 0}));
  EXPECT_EQ(z.indices.shape(), (shape_t{2, 0}));
  const auto s = kiln::topk(tensor::from(dev(), std::vector<float>{7}, {}), 1);
  EXPECT_EQ(s.values.shape(), shape_t{});
  EXPECT_EQ(s.values.item<float>(), 7.f);
  EXPECT_EQ(ids(kiln::topk(x, 3).indices), (std::vector<std::int64_t>{0, 2, 1, 0, 1, 2}));
  try {
    (void)kiln::topk(x, 4);
    FAIL() << "k > size accepted";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("k = 4"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("size 3"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)kiln::topk(x, -1), kiln::invalid_argument);
  EXPECT_THROW((void)kiln::topk(x, 1, 2), kiln::error);
}

// The samples multinomial must give with replacement: inverse CDF over tensor::rand's
// uniforms (the same bits on every backend), with running sums in multinomial's order (sums of
// chunks of multinomial_chunk weights added in order, then the weights of one chunk).
std::vector<std::int64_t> host_draws(const kiln::device& dev, const std::vector<double>& w,
                                     std::int64_t rows, std::int64_t n, std::int64_t s,
                                     std::uint64_t seed, scalar_type ut) {
  const std::vector<double> u = read(tensor::rand(dev, {rows, s}, seed, ut));
  const std::int64_t B = kiln::detail::multinomial_chunk, chunks = (n + B - 1) / B;
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double* row = w.data() + r * n;
    std::vector<double> start(static_cast<std::size_t>(chunks + 1), 0.0);
    for (std::int64_t c = 0; c < chunks; ++c) {
      double sum = 0;
      for (std::int64_t j = c * B; j < std::min(n, (c + 1) * B); ++j) sum += row[j];
      start[std::size_t(c + 1)] = start[std::size_t(c)] + sum;
    }
    const double total = start.back();
    for (std::int64_t i = 0; i < s; ++i) {
      const double t = u[std::size_t(r * s + i)] * total;
      std::int64_t c = 0, pick = -1;
      while (c + 1 < chunks && !(start[std::size_t(c + 1)] > t)) ++c;
      double acc = start[std::size_t(c)];
      for (std::int64_t j = c * B; j < std::min(n, (c + 1) * B) && pick < 0; ++j)
        if ((acc += row[j]) > t) pick = j;
      EXPECT_GE(pick, 0) << "u * total rounded to total: not expected in this test";
      out.push_back(pick);
    }
  }
  return out;
}

// Weights with zeros at every third category.
std::vector<double> weights(std::int64_t rows, std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> w(std::size_t(rows * n));
  for (std::size_t i = 0; i < w.size(); ++i)
    w[i] = (i % std::size_t(n)) % 3 == 1 ? 0.0 : double(rng() % 1000 + 1) / 7.0;
  return w;
}

TEST_P(TensorSamplingTest, MultinomialWithReplacementIsTheHostInverseCdf) {
  if (!has_f64()) GTEST_SKIP() << "the reference uses double uniforms";
  const std::int64_t rows = 3, n = 2000, s = 500;
  const std::vector<double> w = weights(rows, n, 21);
  const tensor p = tensor::from(dev(), w, {rows, n}).to(scalar_type::f32);
  const std::vector<double> wf = read(p);
  const tensor a = kiln::multinomial(p, s, true, 5);
  ASSERT_EQ(a.shape(), (shape_t{rows, s}));
  ASSERT_EQ(a.dtype(), scalar_type::i64);
  const auto got = ids(a);
  EXPECT_EQ(got, host_draws(dev(), wf, rows, n, s, 5, scalar_type::f64));
  EXPECT_EQ(got, ids(kiln::multinomial(p, s, true, 5)));
  EXPECT_NE(got, ids(kiln::multinomial(p, s, true, 6)));
  for (std::int64_t v : got) {
    ASSERT_TRUE(v >= 0 && v < n);
    ASSERT_NE(v % 3, 1) << "a zero-weight category was drawn";
  }
  // 1-D probs give [s].
  EXPECT_EQ(kiln::multinomial(p.slice(0, 1, 2).reshape({n}), 4, true, 1).shape(), shape_t{4});
}

// A loose chi-square of counts against expected frequencies (dof < 10: 40 is far in the tail).
double chi_square(const std::vector<std::int64_t>& count, const std::vector<double>& p,
                  std::int64_t total) {
  double c = 0, sum = std::accumulate(p.begin(), p.end(), 0.0);
  for (std::size_t j = 0; j < p.size(); ++j) {
    if (p[j] == 0) {
      EXPECT_EQ(count[j], 0) << "category " << j;
      continue;
    }
    const double e = double(total) * p[j] / sum;
    c += (double(count[j]) - e) * (double(count[j]) - e) / e;
  }
  return c;
}

TEST_P(TensorSamplingTest, MultinomialFrequencies) {
  const std::vector<double> p{0.1, 0, 0.2, 0.3, 0.05, 0, 0.35};
  const std::int64_t n = 7, s = 20000;
  for (scalar_type t : {scalar_type::f32, scalar_type::bf16}) {
    const tensor w = tensor::from(dev(), p, {n}).to(t);
    const std::vector<double> pw = read(w);
    std::vector<std::int64_t> count(std::size_t(n), 0);
    for (std::int64_t v : ids(kiln::multinomial(w, s, true, 9))) count[std::size_t(v)]++;
    EXPECT_LT(chi_square(count, pw, s), 40.0) << kiln::type_name(t);
    // Without replacement, one sample per row: the first draw of the race follows w.
    const std::int64_t rows = 4000;
    const tensor many = w.reshape({1, n}).expand({rows, n});
    std::vector<std::int64_t> first(std::size_t(n), 0);
    for (std::int64_t v : ids(kiln::multinomial(many, 1, false, 3))) first[std::size_t(v)]++;
    EXPECT_LT(chi_square(first, pw, rows), 40.0) << kiln::type_name(t);
  }
}

TEST_P(TensorSamplingTest, MultinomialWithoutReplacementDistinct) {
  const std::int64_t rows = 5, n = 300, s = 200;  // 200 positive weights per row
  const tensor p = tensor::from(dev(), weights(rows, n, 31), {rows, n}).to(scalar_type::f32);
  const tensor a = kiln::multinomial(p, s, false, 17);
  ASSERT_EQ(a.shape(), (shape_t{rows, s}));
  const auto got = ids(a);
  EXPECT_EQ(got, ids(kiln::multinomial(p, s, false, 17)));
  for (std::int64_t r = 0; r < rows; ++r) {
    std::set<std::int64_t> seen;
    for (std::int64_t i = 0; i < s; ++i) {
      const std::int64_t v = got[std::size_t(r * s + i)];
      ASSERT_TRUE(v >= 0 && v < n);
      ASSERT_NE(v % 3, 1) << "a zero-weight category was drawn";
      seen.insert(v);
    }
    EXPECT_EQ(std::int64_t(seen.size()), s) << "row " << r;
  }
  try {
    (void)kiln::multinomial(p, 201, false, 1);
    FAIL() << "more samples than positive weights accepted";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("only 200"), std::string::npos) << e.what();
  }
}

TEST_P(TensorSamplingTest, MultinomialBadInput) {
  auto probs = [&](std::vector<float> v) {
    return tensor::from(dev(), v, {2, std::int64_t(v.size() / 2)});
  };
  const float inf = std::numeric_limits<float>::infinity(),
              nan = std::numeric_limits<float>::quiet_NaN();
  for (const auto& v : {std::vector<float>{1, -1, 1, 1}, std::vector<float>{1, inf, 1, 1},
                        std::vector<float>{1, nan, 1, 1}, std::vector<float>{0, 0, 1, 1}})
    for (bool rep : {true, false})
      EXPECT_THROW((void)kiln::multinomial(probs(v), 1, rep), kiln::invalid_argument);
  const tensor ok = probs({1, 2, 3, 4});
  EXPECT_THROW((void)kiln::multinomial(ok, 0, true), kiln::invalid_argument);
  EXPECT_THROW((void)kiln::multinomial(ok, 3, false), kiln::invalid_argument);
  EXPECT_NO_THROW((void)kiln::multinomial(ok, 3, true));
  EXPECT_THROW((void)kiln::multinomial(ok.to(scalar_type::i32), 1, true), kiln::dtype_error);
  EXPECT_THROW((void)kiln::multinomial(ok.reshape({1, 2, 2}), 1, true), kiln::shape_error);
}

// The kernels compile for CUDA too (NVRTC, where the backend is compile-only).
TEST_P(TensorSamplingTest, SourcesCompileEverywhere) {
  using k = kiln::detail::sampling_kernel_kind;
  for (const auto t : {scalar_type::f32, scalar_type::bf16, scalar_type::f64, scalar_type::i8,
                       scalar_type::u64, scalar_type::boolean})
    for (bool first : {true, false})
      for (bool largest : {true, false})
        EXPECT_NO_THROW(conformance::compile_everywhere(
            kiln::detail::sampling_source(k::topk, t, t, first, largest)));
  for (const auto t : {scalar_type::f32, scalar_type::f16, scalar_type::f64, scalar_type::i8})
    for (bool largest : {true, false})
      EXPECT_NO_THROW(conformance::compile_everywhere(
          kiln::detail::sampling_source(k::topk_group, t, t, false, largest)));
  for (const auto w : {scalar_type::f32, scalar_type::f16})
    for (const auto c : {scalar_type::f32, scalar_type::f64})
      for (const k kind : {k::chunk_sum, k::chunk_scan, k::draw})
        EXPECT_NO_THROW(conformance::compile_everywhere(
            kiln::detail::sampling_source(kind, w, c, false, false)));
}

}  // namespace
}  // namespace tensor_test
