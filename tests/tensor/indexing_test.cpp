// Indexing, concatenation and masking (kiln/tensor/indexing.hpp) on every device against host
// references on random data: embedding / index_select / gather / scatter_add with duplicate
// indices (backwards bit-identical run to run; skewed indices against a double reference for
// 1-, 2- and 4-byte sort keys), the range check (at once on the host device, reported by a later
// call elsewhere, with no corruption meanwhile and no host read), masked_fill and tril / triu fused
// into one kernel, cat / stack / split with gradients, 16-bit and integer dtypes, empty tensors,
// negative dims, nn::embedding, and the errors bad input gets.
#include <cmath>
#include <kiln/nn/embedding.hpp>
#include <kiln/tensor/indexing.hpp>
#include <kiln/tensor/inplace.hpp>
#include <random>
#include <tuple>

#include "tensor/indexing_kernels.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::scalar_type;
using kiln::tensor;

class TensorIndexingTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorIndexingTest);

// n indices in [0, bound), seeded, with duplicates whenever n > bound.
std::vector<std::int64_t> indices(std::size_t n, std::int64_t bound, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = std::int64_t(rng() % std::uint64_t(bound));
  return v;
}

tensor index_tensor(const kiln::device& dev, const std::vector<std::int64_t>& v,
                    const shape_t& shape, scalar_type t) {
  return tensor::from(dev, v, shape).to(t).eval();
}

// n indices in [0, bound), about half of them `hot`, the rest uniform: a character vocabulary's
// space (one row's run then covers many whole chunks of the backward's sorted positions).
std::vector<std::int64_t> skewed(std::size_t n, std::int64_t bound, std::int64_t hot,
                                 std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = rng() % 2 ? hot : std::int64_t(rng() % std::uint64_t(bound));
  return v;
}

bool on_host(const kiln::device& d) { return d == kiln::device::host(); }

// The bits of a gradient, for run-to-run comparisons.
std::vector<double> read(const tensor& t) { return t.to(scalar_type::f64).to_vector<double>(); }
std::vector<float> read32(const tensor& t) { return t.to(scalar_type::f32).to_vector<float>(); }

TEST_P(TensorIndexingTest, EmbeddingForwardAndDeterministicBackward) {
  const std::int64_t V = 11, D = 5;
  const shape_t is{3, 8};  // 24 ids over 11 rows: duplicates
  const auto ids = indices(24, V, 3);
  for (scalar_type it : {scalar_type::i64, scalar_type::i32}) {
    const tensor idx = index_tensor(dev(), ids, is, it);
    const host<float> w = random_host<float>({V, D}, 5), g = random_host<float>({3, 8, D}, 6);
    std::vector<float> first;
    for (int run = 0; run < 2; ++run) {
      tensor weight = upload(dev(), w);
      weight.requires_grad_();
      const tensor e = kiln::embedding(weight, idx);
      host<float> want{{3, 8, D}, {}};
      for (auto id : ids)
        for (std::int64_t d = 0; d < D; ++d) want.v.push_back(w.v[std::size_t(id * D + d)]);
      ASSERT_TRUE(matches(e, want));
      e.backward(upload(dev(), g));
      host<float> dw{{V, D}, std::vector<float>(std::size_t(V * D), 0.f)};
      for (std::size_t k = 0; k < ids.size(); ++k)  // in position order, as the kernel sums
        for (std::int64_t d = 0; d < D; ++d)
          dw.v[std::size_t(ids[k] * D + d)] += g.v[k * std::size_t(D) + std::size_t(d)];
      ASSERT_TRUE(matches(weight.grad(), dw));
      const std::vector<float> bits = weight.grad().to_vector<float>();
      if (run == 0) {
        first = bits;
      } else {
        EXPECT_EQ(0, std::memcmp(first.data(), bits.data(), bits.size() * sizeof(float)));
      }
    }
  }
}

// A few rows read thousands of times (a character vocabulary): their sums run in chunks.
TEST_P(TensorIndexingTest, EmbeddingBackwardOfFrequentRowsIsChunkedAndDeterministic) {
  const std::int64_t V = 4, D = 3, N = 3000;
  auto ids = indices(std::size_t(N), V - 1, 13);  // row V - 1 never read: its gradient is 0
  const tensor idx = index_tensor(dev(), ids, {N}, scalar_type::i32);
  const host<float> g = random_host<float>({N, D}, 14);
  std::vector<double> want(std::size_t(V * D), 0.0);
  for (std::size_t k = 0; k < ids.size(); ++k)
    for (std::size_t d = 0; d < std::size_t(D); ++d)
      want[std::size_t(ids[k]) * D + d] += g.v[k * D + d];
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    tensor w = upload(dev(), random_host<float>({V, D}, 15));
    w.requires_grad_();
    kiln::embedding(w, idx).backward(upload(dev(), g));
    const std::vector<float> dw = w.grad().to_vector<float>();
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(dw[i], want[i], 1e-4 * std::max(1.0, std::fabs(want[i]))) << i;
    if (run == 0) {
      first = dw;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), dw.data(), dw.size() * sizeof(float)));
    }
  }
}

TEST_P(TensorIndexingTest, EmbeddingSixteenBitAndDouble) {
  const std::int64_t V = 7, D = 6;
  const auto ids = indices(10, V, 9);
  const tensor idx = index_tensor(dev(), ids, {10}, scalar_type::i64);
  std::vector<scalar_type> types{scalar_type::bf16, scalar_type::f16};
  if (has_f64()) types.push_back(scalar_type::f64);
  for (scalar_type t : types) {
    SCOPED_TRACE(kiln::type_name(t));
    tensor w = upload(dev(), random_host<float>({V, D}, 11)).to(t).eval();
    w.requires_grad_();
    const std::vector<float> wv = read32(w);
    const tensor e = kiln::embedding(w, idx);
    ASSERT_EQ(e.dtype(), t);
    const std::vector<float> ev = read32(e);
    for (std::size_t k = 0; k < ids.size(); ++k)
      for (std::size_t d = 0; d < std::size_t(D); ++d)
        ASSERT_EQ(ev[k * D + d], wv[std::size_t(ids[k]) * D + d]);  // a copy: the same bits
    const tensor g = upload(dev(), random_host<float>({10, D}, 12)).to(t).eval();
    e.backward(g);
    const std::vector<float> gv = read32(g), dw = read32(w.grad());
    std::vector<float> want(std::size_t(V * D), 0.f);  // accumulated in float, rounded once
    for (std::size_t k = 0; k < ids.size(); ++k)
      for (std::size_t d = 0; d < std::size_t(D); ++d)
        want[std::size_t(ids[k]) * D + d] += gv[k * D + d];
    for (std::size_t i = 0; i < want.size(); ++i)
      EXPECT_NEAR(dw[i], want[i], 1e-2 * std::max(1.f, std::fabs(want[i]))) << i;
  }
}

// Heavy duplicates (one row takes half the positions) against a double reference, f32 and bf16
// weights, vocabularies whose sort keys take 1, 2 and 4 bytes; the backward's bits equal run to
// run.
TEST_P(TensorIndexingTest, EmbeddingSkewedDuplicatesMatchDoubleReference) {
  const std::int64_t D = 3, N = 2000;  // chunks of 45 sorted positions: the hot row spans ~22
  for (const std::int64_t V : {37, 300, 70000}) {
    const auto ids = skewed(std::size_t(N), V, V / 3, std::uint64_t(V));
    const tensor idx =
        index_tensor(dev(), ids, {40, 50}, V == 300 ? scalar_type::i32 : scalar_type::i64);
    for (const scalar_type t : {scalar_type::f32, scalar_type::bf16}) {
      SCOPED_TRACE(std::to_string(V) + " rows, " + kiln::type_name(t));
      const tensor w0 = upload(dev(), random_host<float>({V, D}, 61)).to(t).eval();
      const tensor g = upload(dev(), random_host<float>({40, 50, D}, 62)).to(t).eval();
      const std::vector<float> wv = read32(w0), gv = read32(g);
      std::vector<double> want(std::size_t(V * D), 0.0), mass(want.size(), 0.0);
      for (std::size_t k = 0; k < ids.size(); ++k)
        for (std::size_t d = 0; d < std::size_t(D); ++d) {
          want[std::size_t(ids[k]) * D + d] += gv[k * D + d];
          mass[std::size_t(ids[k]) * D + d] += std::fabs(gv[k * D + d]);
        }
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        tensor w = w0.detach();
        w.requires_grad_();
        const tensor e = kiln::embedding(w, idx);
        ASSERT_EQ(e.dtype(), t);
        const std::vector<float> ev = read32(e);
        for (std::size_t k = 0; k < ids.size(); ++k)
          for (std::size_t d = 0; d < std::size_t(D); ++d)
            ASSERT_EQ(ev[k * D + d], wv[std::size_t(ids[k]) * D + d]) << k;
        e.backward(g);
        const std::vector<float> dw = read32(w.grad());
        const double rel = t == scalar_type::f32 ? 0.0 : 1.0 / 128;  // bf16: rounded once
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(dw[i], want[i], rel * std::fabs(want[i]) + 1e-6 * mass[i] + 1e-30) << i;
        if (run == 0) {
          first = dw;
        } else {
          EXPECT_EQ(0, std::memcmp(first.data(), dw.data(), dw.size() * sizeof(float)));
        }
      }
    }
  }
  // index_select along a middle dim (outer 3, inner 4): the chunk partials per outer slice.
  const auto ids = skewed(700, 20, 7, 63);
  const host<float> x = random_host<float>({3, 20, 4}, 64), g = random_host<float>({3, 700, 4}, 65);
  tensor xt = upload(dev(), x);
  xt.requires_grad_();
  kiln::index_select(xt, 1, index_tensor(dev(), ids, {700}, scalar_type::i64))
      .backward(upload(dev(), g));
  std::vector<double> want(x.v.size(), 0.0);
  for (std::size_t o = 0; o < 3; ++o)
    for (std::size_t k = 0; k < ids.size(); ++k)
      for (std::size_t r = 0; r < 4; ++r)
        want[(o * 20 + std::size_t(ids[k])) * 4 + r] += g.v[(o * 700 + k) * 4 + r];
  const std::vector<float> dx = xt.grad().to_vector<float>();
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(dx[i], want[i], 2e-4) << i;
}

// The backward sums by the indices the forward read, even when the index tensor is overwritten
// in between (the forward keeps them as sort keys on the device).
TEST_P(TensorIndexingTest, BackwardUsesTheForwardsIndices) {
  const tensor idx = index_tensor(dev(), {2, 0, 2}, {3}, scalar_type::i64);
  tensor w = upload(dev(), random_host<float>({4, 2}, 71));
  w.requires_grad_();
  const tensor e = kiln::embedding(w, idx);
  kiln::copy_(idx, index_tensor(dev(), {1, 1, 3}, {3}, scalar_type::i64));
  e.backward(tensor::ones(dev(), {3, 2}));
  EXPECT_TRUE(matches(w.grad(), host<float>{{4, 2}, {1, 1, 0, 0, 2, 2, 0, 0}}));
}

// An index outside the table: at once on the host device; elsewhere the call runs (bad rows
// gather zeros, their gradients add nothing) and one of the next two checked calls on the
// device reports it, with no read-back of indices or counts on the way.
TEST_P(TensorIndexingTest, OutOfRangeIndicesAreReportedLaterWithoutCorruption) {
  const host<float> wh = random_host<float>({5, 3}, 91);
  const tensor good = index_tensor(dev(), {0, 4, 2}, {3}, scalar_type::i64);
  const tensor bad = index_tensor(dev(), {1, 5, -3, 2}, {4}, scalar_type::i32);
  tensor w = upload(dev(), wh);
  w.requires_grad_();
  const std::uint64_t reads = kiln::detail::index_check_reads();
  if (on_host(dev())) {
    EXPECT_THROW(kiln::embedding(w, bad), kiln::invalid_argument);
    EXPECT_EQ(kiln::detail::index_check_reads(), reads + 1);
    return;
  }
  const tensor e = kiln::embedding(w, bad);
  e.backward(tensor::ones(dev(), {4, 3}));
  const std::vector<float> ev = e.to_vector<float>(), dw = w.grad().to_vector<float>();
  for (std::size_t d = 0; d < 3; ++d) {
    EXPECT_EQ(ev[d], wh.v[3 + d]);
    EXPECT_EQ(ev[3 + d], 0.f);
    EXPECT_EQ(ev[6 + d], 0.f);
    EXPECT_EQ(ev[9 + d], wh.v[6 + d]);
    for (std::size_t v = 0; v < 5; ++v) EXPECT_EQ(dw[v * 3 + d], v == 1 || v == 2 ? 1.f : 0.f);
  }
  // Reported by the first or second later call, naming the operation and the count.
  const auto reported_later = [&](auto&& bad_call, const char* text) {
    bad_call();
    for (int call = 1; call <= 2; ++call) {
      try {
        kiln::embedding(w, good);
      } catch (const kiln::invalid_argument& x) {
        EXPECT_NE(std::string(x.what()).find(text), std::string::npos) << x.what();
        return;
      }
    }
    ADD_FAILURE() << "not reported within two calls: " << text;
  };
  reported_later([] {}, "kiln::embedding: 2 index(es) out of range [0, 5) in an earlier call on");
  reported_later([&] { kiln::index_select(w, 0, bad); }, "kiln::index_select: 2 index(es)");
  reported_later(
      [&] {
        const tensor gi = index_tensor(dev(), {0, 3, 1, 1, 2, 0}, {2, 3}, scalar_type::i64);
        const std::vector<float> gv = kiln::gather(w.detach(), 1, gi).to_vector<float>();
        EXPECT_EQ(gv[1], 0.f);  // the bad index gathers zeros
        EXPECT_EQ(gv[0], wh.v[0]);
      },
      "kiln::gather: 1 index(es) out of range [0, 3)");
  reported_later(
      [&] {
        const tensor si = index_tensor(dev(), {7, 0}, {2, 1}, scalar_type::i64);
        const std::vector<float> sv =
            kiln::scatter_add(w.detach(), 0, si, tensor::ones(dev(), {2, 1})).to_vector<float>();
        EXPECT_EQ(sv[0], wh.v[0] + 1.f);  // the good index (row 0) adds; the bad one nothing
        EXPECT_EQ(sv[3], wh.v[3]);
      },
      "kiln::scatter_add: 1 index(es) out of range [0, 5)");
  // The steady state: good calls, forward and backward, never throw and never read back.
  for (int i = 0; i < 4; ++i) {
    tensor wi = upload(dev(), wh);
    wi.requires_grad_();
    EXPECT_NO_THROW(kiln::embedding(wi, good).sum().backward());
  }
  EXPECT_EQ(kiln::detail::index_check_reads(), reads);
}

TEST_P(TensorIndexingTest, IndexSelectNegativeDimStridedAndEmpty) {
  const host<float> x = random_host<float>({4, 6, 5}, 21);
  const auto ids = indices(9, 6, 22);
  const tensor idx = index_tensor(dev(), ids, {9}, scalar_type::i32);
  tensor xt = upload(dev(), x);
  xt.requires_grad_();
  const tensor y = kiln::index_select(xt, -2, idx);
  const host<float> want = remap<float>(x, {4, 9, 5}, [&](shape_t c) {
    c[1] = ids[std::size_t(c[1])];
    return c;
  });
  ASSERT_TRUE(matches(y, want));
  const host<float> g = random_host<float>({4, 9, 5}, 23);
  y.backward(upload(dev(), g));
  host<float> dx{x.shape, std::vector<float>(x.v.size(), 0.f)};
  for (std::int64_t i = 0; i < numel(g.shape); ++i) {
    shape_t c = coords(g.shape, i);
    c[1] = ids[std::size_t(c[1])];
    dx.v[std::size_t(flat(x.shape, c))] += g.v[std::size_t(i)];
  }
  ASSERT_TRUE(matches(xt.grad(), dx));
  // A transposed (strided) input: x^T [5, 6, 4] along dim 1.
  const tensor yt = kiln::index_select(upload(dev(), x).permute({2, 1, 0}), 1, idx);
  ASSERT_TRUE(matches(yt, remap<float>(x, {5, 9, 4}, [&](shape_t c) {
                        return shape_t{c[2], ids[std::size_t(c[1])], c[0]};
                      })));
  // No indices: an empty dim, and a zero gradient.
  const tensor none = index_tensor(dev(), {}, {0}, scalar_type::i64);
  const tensor e = kiln::index_select(upload(dev(), x), 0, none);
  EXPECT_EQ(e.shape(), (shape_t{0, 6, 5}));
  tensor w = upload(dev(), random_host<float>({3, 2}, 24));
  w.requires_grad_();
  kiln::embedding(w, none).sum().backward();
  EXPECT_TRUE(matches(w.grad(), host<float>{{3, 2}, std::vector<float>(6, 0.f)}));
}

TEST_P(TensorIndexingTest, GatherAndItsBackward) {
  const host<float> x = random_host<float>({3, 5, 4}, 31);
  const shape_t is{2, 7, 3};  // smaller than x except along dim 1
  const auto ids = indices(std::size_t(numel(is)), 5, 32);
  const tensor idx = index_tensor(dev(), ids, is, scalar_type::i64);
  tensor xt = upload(dev(), x);
  xt.requires_grad_();
  const tensor y = kiln::gather(xt, 1, idx);
  host<float> want{is, {}};
  for (std::int64_t i = 0; i < numel(is); ++i) {
    shape_t c = coords(is, i);
    c[1] = ids[std::size_t(i)];
    want.v.push_back(x.v[std::size_t(flat(x.shape, c))]);
  }
  ASSERT_TRUE(matches(y, want));
  const host<float> g = random_host<float>(is, 33);
  y.backward(upload(dev(), g));
  host<float> dx{x.shape, std::vector<float>(x.v.size(), 0.f)};
  for (std::int64_t i = 0; i < numel(is); ++i) {
    shape_t c = coords(is, i);
    c[1] = ids[std::size_t(i)];
    dx.v[std::size_t(flat(x.shape, c))] += g.v[std::size_t(i)];
  }
  ASSERT_TRUE(matches(xt.grad(), dx, 1e-5));
  // Negative dim on the last axis.
  const auto last = indices(3 * 5 * 2, 4, 34);
  const tensor y2 =
      kiln::gather(upload(dev(), x), -1, index_tensor(dev(), last, {3, 5, 2}, scalar_type::i32));
  ASSERT_TRUE(matches(y2, remap<float>(x, {3, 5, 2}, [&](shape_t c) {
                        c[2] = last[std::size_t(flat({3, 5, 2}, c))];
                        return c;
                      })));
}

TEST_P(TensorIndexingTest, ScatterAddDeterministicWithGradients) {
  const host<float> x = random_host<float>({3, 5, 4}, 41);
  const shape_t is{3, 9, 4};  // 9 entries per column over 5 rows: duplicates
  const auto ids = indices(std::size_t(numel(is)), 5, 42);
  const tensor idx = index_tensor(dev(), ids, is, scalar_type::i64);
  const host<float> src = random_host<float>(is, 43);
  host<float> want = x;
  for (std::int64_t i = 0; i < numel(is); ++i) {
    shape_t c = coords(is, i);
    c[1] = ids[std::size_t(i)];
    want.v[std::size_t(flat(x.shape, c))] += src.v[std::size_t(i)];
  }
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    tensor xt = upload(dev(), x), st = upload(dev(), src);
    xt.requires_grad_();
    st.requires_grad_();
    const tensor y = kiln::scatter_add(xt, -2, idx, st);
    ASSERT_TRUE(matches(y, want, 1e-5));
    const std::vector<float> bits = y.to_vector<float>();
    if (run == 0) {
      first = bits;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), bits.data(), bits.size() * sizeof(float)));
    }
    const host<float> g = random_host<float>(x.shape, 44);
    y.backward(upload(dev(), g));
    ASSERT_TRUE(matches(xt.grad(), g));
    host<float> ds{is, {}};
    for (std::int64_t i = 0; i < numel(is); ++i) {
      shape_t c = coords(is, i);
      c[1] = ids[std::size_t(i)];
      ds.v.push_back(g.v[std::size_t(flat(x.shape, c))]);
    }
    ASSERT_TRUE(matches(st.grad(), ds));
  }
  // bf16 (accumulated in float, rounded once), and no indices at all (x unchanged).
  const tensor xb = upload(dev(), x).to(scalar_type::bf16).eval();
  const tensor sb = upload(dev(), src).to(scalar_type::bf16).eval();
  const std::vector<float> xbv = read32(xb), sbv = read32(sb);
  std::vector<float> wb = xbv;
  for (std::int64_t i = 0; i < numel(is); ++i) {
    shape_t c = coords(is, i);
    c[1] = ids[std::size_t(i)];
    wb[std::size_t(flat(x.shape, c))] += sbv[std::size_t(i)];
  }
  const std::vector<float> gotb = read32(kiln::scatter_add(xb, 1, idx, sb));
  for (std::size_t i = 0; i < wb.size(); ++i)
    EXPECT_NEAR(gotb[i], wb[i], 1e-2 * std::max(1.f, std::fabs(wb[i]))) << i;
  const tensor none = index_tensor(dev(), {}, {3, 0, 4}, scalar_type::i64);
  ASSERT_TRUE(matches(kiln::scatter_add(upload(dev(), x), 1, none, upload(dev(), src)), x));
  EXPECT_EQ(kiln::gather(upload(dev(), x), 1, none).shape(), (shape_t{3, 0, 4}));
  // Integers, and an index smaller than src.
  const host<std::int32_t> xi = random_host<std::int32_t>({2, 6}, 45),
                           si = random_host<std::int32_t>({3, 8}, 46);
  const auto small = indices(2 * 5, 6, 47);
  host<std::int32_t> wi = xi;
  for (std::int64_t i = 0; i < 10; ++i)
    wi.v[std::size_t(i / 5 * 6 + small[std::size_t(i)])] += si.v[std::size_t(i / 5 * 8 + i % 5)];
  ASSERT_TRUE(matches(
      kiln::scatter_add(upload(dev(), xi), 1, index_tensor(dev(), small, {2, 5}, scalar_type::i32),
                        upload(dev(), si)),
      wi));
}

TEST_P(TensorIndexingTest, MaskedFillFusesAndDifferentiates) {
  const host<float> x = random_host<float>({2, 3, 4}, 51);
  const host<bool> m = random_host<bool>({3, 4}, 52);
  tensor xt = upload(dev(), x);
  xt.requires_grad_();
  const tensor y = kiln::masked_fill(xt, upload(dev(), m), -1000.f) * 2.f;
  EXPECT_TRUE(y.is_lazy());
  ASSERT_TRUE(matches(y, map2<float>(x, m, [](float a, bool b) { return b ? -2000.f : 2 * a; })));
  EXPECT_EQ(stats().kernel_launches, 1u);
  y.backward(tensor::ones(dev(), {2, 3, 4}));
  ASSERT_TRUE(matches(xt.grad(), map2<float>(x, m, [](float, bool b) { return b ? 0.f : 2.f; })));
  // The value converts to x's dtype; integer and 16-bit inputs keep theirs.
  const host<std::int64_t> xi = random_host<std::int64_t>({3, 4}, 53);
  ASSERT_TRUE(matches(
      kiln::masked_fill(upload(dev(), xi), upload(dev(), m), 7.9),
      map2<std::int64_t>(xi, m, [](std::int64_t a, bool b) { return b ? std::int64_t{7} : a; })));
  EXPECT_EQ(kiln::masked_fill(upload(dev(), x).to(scalar_type::bf16), upload(dev(), m), 1).dtype(),
            scalar_type::bf16);
}

TEST_P(TensorIndexingTest, TrilTriuFuseAndDifferentiate) {
  const host<float> x = random_host<float>({2, 4, 5}, 61);
  for (std::int64_t k : {-1, 0, 2}) {
    for (bool lower : {true, false}) {
      SCOPED_TRACE((lower ? "tril k=" : "triu k=") + std::to_string(k));
      tensor xt = upload(dev(), x);
      xt.requires_grad_();
      const tensor y = (lower ? kiln::tril(xt, k) : kiln::triu(xt, k)) + 1.f;
      host<float> want{x.shape, {}}, dx{x.shape, {}};
      for (std::int64_t i = 0; i < numel(x.shape); ++i) {
        const shape_t c = coords(x.shape, i);
        const bool keep = lower ? c[2] - c[1] <= k : c[2] - c[1] >= k;
        want.v.push_back((keep ? x.v[std::size_t(i)] : 0.f) + 1.f);
        dx.v.push_back(keep ? 1.f : 0.f);
      }
      ASSERT_TRUE(matches(y, want));
      EXPECT_EQ(stats().kernel_launches, 1u);
      y.sum().backward();
      ASSERT_TRUE(matches(xt.grad(), dx));
    }
  }
  // bool and int work too: a causal mask.
  const tensor causal = kiln::triu(tensor::ones(dev(), {3, 3}, scalar_type::boolean), 1);
  EXPECT_EQ(causal.to_vector<bool>(),
            (std::vector<bool>{false, true, true, false, false, true, false, false, false}));
}

TEST_P(TensorIndexingTest, CatStackSplit) {
  const host<float> a = random_host<float>({2, 3, 4}, 71), b = random_host<float>({2, 1, 4}, 72);
  tensor at = upload(dev(), a), bt = upload(dev(), b);
  at.requires_grad_();
  bt.requires_grad_();
  const tensor empty = tensor::zeros(dev(), {2, 0, 4});
  const tensor c = kiln::cat({at, empty, bt * 3.f}, -2);  // a lazy input too
  for (std::int64_t i = 0; i < numel(c.shape()); ++i) {
    const shape_t s = coords({2, 4, 4}, i);
    const float v = s[1] < 3 ? a.v[std::size_t(flat(a.shape, s))]
                             : 3 * b.v[std::size_t(flat(b.shape, {s[0], 0, s[2]}))];
    ASSERT_EQ(c.to_vector<float>()[std::size_t(i)], v) << i;
  }
  const host<float> g = random_host<float>({2, 4, 4}, 73);
  c.backward(upload(dev(), g));
  ASSERT_TRUE(matches(at.grad(), remap<float>(g, a.shape, [](shape_t s) { return s; })));
  const std::vector<float> gb = bt.grad().to_vector<float>();
  for (std::int64_t i = 0; i < 8; ++i)
    EXPECT_EQ(gb[std::size_t(i)], 3 * g.v[std::size_t(flat(g.shape, {i / 4, 3, i % 4}))]);
  // 16-bit, integer and bool dtypes are copied by width.
  for (scalar_type t : {scalar_type::bf16, scalar_type::i64, scalar_type::boolean}) {
    const tensor x = upload(dev(), a).to(t), y = upload(dev(), b).to(t);
    EXPECT_EQ(read(kiln::cat({x, y}, 1)),
              read(kiln::cat({x.to(scalar_type::f64), y.to(scalar_type::f64)}, 1)));
  }
  // stack: a new dim.
  const tensor s = kiln::stack({upload(dev(), a), upload(dev(), a) + 1.f}, -1);
  EXPECT_EQ(s.shape(), (shape_t{2, 3, 4, 2}));
  const std::vector<float> sv = s.to_vector<float>();
  for (std::size_t i = 0; i < a.v.size(); ++i) {
    ASSERT_EQ(sv[2 * i], a.v[i]);
    ASSERT_EQ(sv[2 * i + 1], a.v[i] + 1.f);
  }
  // split: views of x (no copy), gradients padded back.
  tensor x = upload(dev(), random_host<float>({3, 7}, 74));
  x.requires_grad_();
  const std::vector<tensor> parts = kiln::split(x, 3, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (shape_t{3, 1}));
  EXPECT_EQ(parts[1].storage_offset(), 3);
  const std::vector<tensor> p2 = kiln::split(x, std::vector<std::int64_t>{1, 0, 6}, -1);
  EXPECT_EQ(p2[1].shape(), (shape_t{3, 0}));
  (parts[0].sum() * 1.f + parts[1].sum() * 2.f + parts[2].sum() * 3.f).backward();
  const std::vector<float> gx = x.grad().to_vector<float>();
  for (std::size_t i = 0; i < gx.size(); ++i) EXPECT_EQ(gx[i], float(i % 7 / 3 + 1)) << i;
  // An empty piece's gradient, and 16-bit pieces.
  tensor xb = upload(dev(), random_host<float>({2, 5}, 75)).to(scalar_type::bf16).eval();
  xb.requires_grad_();
  const std::vector<tensor> pb = kiln::split(xb, std::vector<std::int64_t>{2, 0, 3}, 1);
  (pb[0].sum() + pb[1].sum() + pb[2].sum() * 2.f).backward();
  EXPECT_EQ(read32(xb.grad()), (std::vector<float>{1, 1, 2, 2, 2, 1, 1, 2, 2, 2}));
  // The pieces share one gradient of x: an unused piece leaves zeros in its slice, x also read
  // directly adds to it, and a second backward of the same graph gives a fresh one (the leaf's
  // gradient accumulates, the first is not overwritten).
  tensor xs = upload(dev(), random_host<float>({2, 6}, 76));
  xs.requires_grad_();
  const std::vector<tensor> ps = kiln::split(xs, 2, 1);
  const tensor loss = ps[1].sum() * 2.f + ps[2].sum() * 3.f + xs.sum();
  loss.backward(tensor(), true);
  const std::vector<float> want{1, 1, 3, 3, 4, 4, 1, 1, 3, 3, 4, 4};
  EXPECT_EQ(xs.grad().to_vector<float>(), want);
  loss.backward();
  std::vector<float> twice = want;
  for (float& v : twice) v *= 2;
  EXPECT_EQ(xs.grad().to_vector<float>(), twice);
}

// Every operation's gradient in one f64 composite against central differences of the loss.
TEST_P(TensorIndexingTest, GradientsMatchCentralDifferences) {
  if (!has_f64()) GTEST_SKIP() << dev().id() << " has no fp64";
  const auto f64 = [&](const shape_t& s, std::uint64_t seed) {
    return random_host<double>(s, seed);
  };
  const host<double> W = f64({5, 3}, 91), X = f64({4, 6}, 92), S = f64({4, 3}, 93),
                     C = f64({4, 5}, 94);
  const tensor ids = index_tensor(dev(), {4, 1, 4, 0}, {4}, scalar_type::i64);
  const tensor gi = index_tensor(dev(), indices(8, 6, 95), {4, 2}, scalar_type::i32);
  const tensor si = index_tensor(dev(), indices(12, 5, 96), {4, 3}, scalar_type::i64);
  const tensor mask = upload(dev(), random_host<bool>({4, 5}, 97)), c = upload(dev(), C);
  const auto loss = [&](const tensor& w, const tensor& x, const tensor& s) {
    const tensor y = kiln::cat({kiln::embedding(w, ids), kiln::gather(x, 1, gi)}, 1);
    const std::vector<tensor> parts =
        kiln::split(kiln::tril(y, 1), std::vector<std::int64_t>{2, 3}, 1);
    const tensor z =
        kiln::cat({parts[1], kiln::masked_fill(parts[0], mask.slice(1, 0, 2), 0.5)}, 1);
    return (kiln::scatter_add(z, 1, si, s) * c).sum();
  };
  tensor w = upload(dev(), W), x = upload(dev(), X), s = upload(dev(), S);
  w.requires_grad_(), x.requires_grad_(), s.requires_grad_();
  loss(w, x, s).backward();
  const double h = 1e-6;
  std::vector<host<double>> at{W, X, S};
  const tensor* grads[] = {&w, &x, &s};
  for (std::size_t p = 0; p < 3; ++p) {
    const std::vector<double> g = grads[p]->grad().to_vector<double>();
    for (std::size_t i = 0; i < at[p].v.size(); ++i) {
      double plus = 0, minus = 0;
      for (const double sign : {1.0, -1.0}) {
        std::vector<host<double>> q = at;
        q[p].v[i] += sign * h;
        kiln::no_grad off;
        (sign > 0 ? plus : minus) =
            loss(upload(dev(), q[0]), upload(dev(), q[1]), upload(dev(), q[2])).item<double>();
      }
      EXPECT_NEAR(g[i], (plus - minus) / (2 * h), 1e-6) << "parameter " << p << " element " << i;
    }
  }
}

TEST_P(TensorIndexingTest, NnEmbedding) {
  kiln::nn::embedding e(dev(), 13, 4, {.seed = 5});
  const auto sd = e.state_dict();
  ASSERT_EQ(sd.size(), 1u);
  EXPECT_EQ(sd[0].first, "weight");
  EXPECT_EQ(e.weight.shape(), (shape_t{13, 4}));
  const std::vector<float> w = e.weight.to_vector<float>();
  double mean = 0;
  for (float v : w) mean += v;
  EXPECT_LT(std::fabs(mean / 52), 0.6);  // normal(0, 1)
  const tensor y = e(index_tensor(dev(), {12, 0, 12}, {3}, scalar_type::i64));
  EXPECT_EQ(y.shape(), (shape_t{3, 4}));
  EXPECT_EQ(y.to_vector<float>()[0], w[48]);
  EXPECT_EQ(e.describe(), "embedding(13, 4)");
}

TEST_P(TensorIndexingTest, BadInputGetsClearErrors) {
  const tensor w = upload(dev(), random_host<float>({5, 3}, 81));
  const auto throws_with = [](auto&& f, const char* text) {
    try {
      f();
      ADD_FAILURE() << "no error; expected one mentioning " << text;
    } catch (const kiln::error& e) {
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  const tensor bad = index_tensor(dev(), {1, 5, 2}, {3}, scalar_type::i64);
  // Out of range: at once on the host device, else reported by one of the next two calls.
  const tensor good = index_tensor(dev(), {1}, {1}, scalar_type::i64);
  const auto later = [&](auto&& bad_call) {
    bad_call();
    for (int i = 0; i < 2; ++i) kiln::embedding(w, good);
  };
  throws_with(
      [&] { later([&] { kiln::embedding(w, bad); }); },
      on_host(dev())
          ? "kiln::embedding: 1 index(es) out of range [0, 5), the first 5 at flat position 1"
          : "kiln::embedding: 1 index(es) out of range [0, 5) in an earlier call on");
  EXPECT_THROW(later([&] { kiln::embedding(w, index_tensor(dev(), {-1}, {1}, scalar_type::i32)); }),
               kiln::invalid_argument);
  EXPECT_THROW(kiln::embedding(w, tensor::ones(dev(), {2})), kiln::dtype_error);
  EXPECT_THROW(kiln::embedding(w.reshape({15}), bad), kiln::shape_error);
  EXPECT_THROW(kiln::index_select(w, 2, bad), kiln::axis_error);
  EXPECT_THROW(kiln::gather(w, 0, index_tensor(dev(), {0, 1}, {2}, scalar_type::i64)),
               kiln::shape_error);
  EXPECT_THROW(later([&] {
                 kiln::gather(w, 1, index_tensor(dev(), {0, 3}, {2, 1}, scalar_type::i64));
               }),
               kiln::invalid_argument);
  const tensor i2 = index_tensor(dev(), {0, 1}, {2, 1}, scalar_type::i64);
  EXPECT_THROW(kiln::scatter_add(w, 0, i2, w.to(scalar_type::i32)), kiln::dtype_error);
  EXPECT_THROW(kiln::scatter_add(w, 1, i2, tensor::ones(dev(), {1, 1})), kiln::shape_error);
  EXPECT_THROW(kiln::cat({w, w.to(scalar_type::i32)}, 0), kiln::dtype_error);
  EXPECT_THROW(kiln::cat({w, w.t()}, 0), kiln::shape_error);
  EXPECT_THROW(kiln::cat({}, 0), kiln::invalid_argument);
  EXPECT_THROW(kiln::stack({w, w.t()}, 0), kiln::shape_error);
  EXPECT_THROW(kiln::masked_fill(w, w, 0.f), kiln::dtype_error);
  EXPECT_THROW(kiln::masked_fill(w, tensor::ones(dev(), {5, 2}, scalar_type::boolean), 0.f),
               kiln::shape_error);
  EXPECT_THROW(kiln::tril(tensor::ones(dev(), {3})), kiln::shape_error);
  EXPECT_THROW(kiln::split(w, std::vector<std::int64_t>{1, 1}, 0), kiln::shape_error);
  EXPECT_THROW(kiln::split(w, 0, 0), kiln::invalid_argument);
  EXPECT_THROW(kiln::embedding(tensor(), bad), kiln::invalid_argument);
  const kiln::device host = kiln::device::host();
  if (!(host == dev())) {
    EXPECT_THROW(kiln::cat({w, tensor::ones(host, {1, 3})}, 0), kiln::device_mismatch);
    EXPECT_THROW(kiln::embedding(w, index_tensor(host, {1}, {1}, scalar_type::i64)),
                 kiln::device_mismatch);
  }
}

// The kernels compile for CUDA too (NVRTC, where the backend is compile-only).
TEST_P(TensorIndexingTest, SourcesCompileEverywhere) {
  using k = kiln::detail::index_kernel_kind;
  for (const auto it : {scalar_type::i32, scalar_type::i64}) {
    for (const std::size_t rank : {1u, 3u}) {
      EXPECT_NO_THROW(conformance::compile_everywhere(
          kiln::detail::index_source(k::gather, rank, scalar_type::u16, it)));
      for (const auto t : {scalar_type::f32, scalar_type::bf16, scalar_type::i32})
        EXPECT_NO_THROW(
            conformance::compile_everywhere(kiln::detail::index_source(k::scatter, rank, t, it)));
    }
  }
  // The backward's kernels: (key, index, position) types, then (value, key, position) types.
  using st = scalar_type;
  for (const auto& [key, it, pt] : {std::tuple{st::u8, st::i32, st::u32},
                                    {st::u16, st::i64, st::u32},
                                    {st::u32, st::i32, st::u32},
                                    {st::u64, st::i64, st::u64}}) {
    EXPECT_NO_THROW(
        conformance::compile_everywhere(kiln::detail::index_source(k::sort_keys, 0, key, it, pt)));
    EXPECT_NO_THROW(
        conformance::compile_everywhere(kiln::detail::index_source(k::run_offsets, 0, key, key)));
  }
  for (const auto& [t, key, pt] : {std::tuple{st::f32, st::u16, st::u32},
                                   {st::bf16, st::u8, st::u32},
                                   {st::f16, st::u32, st::u32},
                                   {st::f64, st::u64, st::u64}}) {
    EXPECT_NO_THROW(
        conformance::compile_everywhere(kiln::detail::index_source(k::run_part, 0, t, key, pt)));
    EXPECT_NO_THROW(
        conformance::compile_everywhere(kiln::detail::index_source(k::run_add, 0, t, pt, pt)));
  }
  EXPECT_NO_THROW(conformance::compile_everywhere(
      kiln::detail::index_source(k::place, 0, scalar_type::u8, scalar_type::u8)));
}

}  // namespace
}  // namespace tensor_test
