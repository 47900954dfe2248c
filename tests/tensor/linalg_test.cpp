// matmul, gemm and gemv on tensors, against a naive double-precision triple loop over seeded
// operands (never zero), and the errors of every linear-algebra call (transposes included;
// their values are checked in linalg_transpose_test.cpp). Tolerance per element, as in
// docs/linalg.md: 2 (k + 2) eps (|alpha| sum_p |a_ip b_pj| + |beta c_ij|), eps = 2^-23 (f32),
// 2^-52 (f64), 2^-10 with TF32.
#include <cmath>
#include <limits>
#include <tuple>

#include "tensor/tensor_fixture.hpp"
#include "tensor/tensor_impl.hpp"

namespace tensor_test {
namespace {

class TensorLinalgTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorLinalgTest);

using floats = type_list<float, double>;

// Reference values and each element's magnitude (what the tolerance scales with).
struct expected {
  shape_t shape;
  std::vector<double> v, mag;
  std::int64_t k = 0;
};

// torch.matmul in double, then alpha * that + beta * c (c of the full result shape).
template <class T>
expected reference(host<T> a, host<T> b, double alpha = 1, double beta = 0,
                   const host<T>* c = nullptr) {
  const bool a1 = a.shape.size() == 1, b1 = b.shape.size() == 1;
  if (a1) a.shape.insert(a.shape.begin(), 1);
  if (b1) b.shape.push_back(1);
  const std::int64_t m = a.shape.end()[-2], k = a.shape.back(), n = b.shape.back();
  shape_t full = bcast_shape(shape_t(a.shape.begin(), a.shape.end() - 2),
                             shape_t(b.shape.begin(), b.shape.end() - 2));
  shape_t out = full;
  if (!a1) out.push_back(m);
  if (!b1) out.push_back(n);
  full.push_back(m);
  full.push_back(n);
  expected e{out, {}, {}, k};
  for (std::int64_t i = 0; i < numel(full); ++i) {
    shape_t at = coords(full, i), bt = at;
    double sum = 0, mag = 0;
    for (std::int64_t p = 0; p < k; ++p) {
      at.back() = p;
      bt.end()[-2] = p;
      const double x = double(bcast_at(a, at)) * double(bcast_at(b, bt));
      sum += x;
      mag += std::fabs(x);
    }
    const double cv = c ? double(c->v[static_cast<std::size_t>(i)]) : 0;
    e.v.push_back(alpha * sum + beta * cv);
    e.mag.push_back(std::fabs(alpha) * mag + std::fabs(beta * cv));
  }
  return e;
}

template <class T>
::testing::AssertionResult close_to(const kiln::tensor& got, const expected& e, bool tf32 = false) {
  if (got.shape() != e.shape)
    return ::testing::AssertionFailure()
           << "shape " << kiln::to_string(got.shape()) << ", expected " << kiln::to_string(e.shape);
  if (got.is_lazy()) return ::testing::AssertionFailure() << "the result is lazy";
  const double eps = tf32 ? std::ldexp(1.0, -10) : std::numeric_limits<T>::epsilon();
  return conformance::elements_near(got.to_vector<T>(), e.v, [&](std::uint64_t i) {
    return 2 * eps * double(e.k + 2) * e.mag[i] + std::numeric_limits<T>::min();
  });
}

// h with its last two dimensions swapped (what x.transpose(-1, -2) reads).
template <class T>
host<T> swapped(const host<T>& h) {
  shape_t s = h.shape;
  std::swap(s.end()[-1], s.end()[-2]);
  return remap<T>(h, s, [](shape_t c) {
    std::swap(c.end()[-1], c.end()[-2]);
    return c;
  });
}

TEST_P(TensorLinalgTest, MatmulShapesMatchTheReference) {
  const std::vector<std::pair<shape_t, shape_t>> cases = {{{3, 4}, {4, 5}},
                                                          {{1, 1}, {1, 1}},
                                                          {{7, 2}, {2, 9}},
                                                          {{5}, {5}},
                                                          {{4}, {4, 3}},
                                                          {{3, 4}, {4}},
                                                          {{2, 3, 4}, {4, 5}},
                                                          {{3, 4}, {2, 4, 5}},
                                                          {{2, 1, 3, 4}, {1, 3, 4, 2}},
                                                          {{4}, {2, 4, 3}},
                                                          {{2, 3, 4}, {4}},
                                                          {{1, 4}, {4, 1}},
                                                          {{1, 1, 4}, {3, 4, 1}},
                                                          {{0, 4}, {4, 3}},
                                                          {{3, 0}, {0, 2}},
                                                          {{2, 0, 3, 4}, {4, 5}},
                                                          {{3, 4}, {4, 0}},
                                                          {{0}, {0}},
                                                          {{2, 3, 4}, {1, 4, 5}},
                                                          {{3, 2, 3}, {3, 3, 2}}};
  for_each_type(floats{}, [&]<class T>() {
    if (std::is_same_v<T, double> && !has_f64()) return;
    std::uint64_t seed = 10;
    for (const auto& [as, bs] : cases) {
      SCOPED_TRACE(kiln::to_string(as) + " x " + kiln::to_string(bs));
      const host<T> a = random_host<T>(as, seed++), b = random_host<T>(bs, seed++);
      const kiln::tensor r = kiln::matmul(upload(dev(), a), upload(dev(), b));
      EXPECT_TRUE(close_to<T>(r, reference(a, b)));
      EXPECT_TRUE(r.is_contiguous());
    }
  });
}

// Transposed views go through the trans flag, a row pitch through ld, a batch broadcast only
// on the right folds into rows: one launch (the product). Other layouts copy first.
TEST_P(TensorLinalgTest, MatmulLayoutsAndCopies) {
  const host<float> at = random_host<float>({4, 3}, 1), bt = random_host<float>({5, 4}, 2);
  const kiln::tensor a = upload(dev(), at).t(), b = upload(dev(), bt).t();  // [3, 4], [4, 5]
  kiln::tensor r = kiln::matmul(a, b);
  EXPECT_EQ(stats().kernel_launches, 1u);  // read before to_vector resets the stats
  EXPECT_TRUE(close_to<float>(r, reference(swapped(at), swapped(bt))));

  const host<float> wide = random_host<float>({3, 8}, 3);  // a [3, 4] view with ld 8
  const kiln::tensor w = upload(dev(), wide).slice(1, 2, 6);
  const host<float> wh = remap<float>(wide, {3, 4}, [](shape_t c) {
    return shape_t{c[0], c[1] + 2};
  });
  r = kiln::matmul(w, b);
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(close_to<float>(r, reference(wh, swapped(bt))));

  // Every other column: no unit stride, copied (one strided-copy kernel) then multiplied.
  const kiln::tensor s = upload(dev(), wide).slice(1, 0, 8, 2);
  const host<float> sh = remap<float>(wide, {3, 4}, [](shape_t c) {
    return shape_t{c[0], 2 * c[1]};
  });
  r = kiln::matmul(s, b);
  EXPECT_EQ(stats().kernel_launches, 2u);
  EXPECT_TRUE(close_to<float>(r, reference(sh, swapped(bt))));

  // Batched, transposed per matrix; b broadcast over the batch folds into a's rows.
  const host<float> x = random_host<float>({2, 3, 4}, 4);
  const kiln::tensor xd = upload(dev(), x);
  r = kiln::matmul(xd, b);
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(close_to<float>(r, reference(x, swapped(bt))));
  const host<float> y = random_host<float>({2, 5, 4}, 5);
  r = kiln::matmul(xd, upload(dev(), y).transpose(-1, -2));
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(close_to<float>(r, reference(x, swapped(y))));
  // a broadcast over b's batch: a is materialised per batch (linalg has no 0 batch stride).
  r = kiln::matmul(a, upload(dev(), y).transpose(-1, -2));
  EXPECT_EQ(stats().kernel_launches, 2u);
  EXPECT_TRUE(close_to<float>(r, reference(swapped(at), swapped(y))));
  // Attention's heads: q a [B, H, T, D] view of [B, T, H, D] (batch strides that do not
  // collapse: copied), k^T its transpose (stored column by column: its transpose is copied,
  // along rows, and taken transposed). Two copies and the product.
  const host<float> bthd = random_host<float>({2, 5, 3, 4}, 7);
  const kiln::tensor q = upload(dev(), bthd).transpose(1, 2);
  const host<float> qh = remap<float>(bthd, {2, 3, 5, 4}, [](shape_t c) {
    return shape_t{c[0], c[2], c[1], c[3]};
  });
  r = kiln::matmul(q, q.transpose(-1, -2));
  EXPECT_EQ(stats().kernel_launches, 3u);
  EXPECT_TRUE(close_to<float>(r, reference(qh, swapped(qh))));
  // A strided vector is a matrix with ld = its stride: no copy.
  const host<float> v = random_host<float>({8}, 6);
  const kiln::tensor vs = upload(dev(), v).slice(0, 0, 8, 2);
  const host<float> vh{{4}, {v.v[0], v.v[2], v.v[4], v.v[6]}};
  r = kiln::matmul(vs, vs);
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(close_to<float>(r, reference(vh, vh)));
  r = kiln::matmul(a, vs);
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(close_to<float>(r, reference(swapped(at), vh)));
}

TEST_P(TensorLinalgTest, MatmulEvaluatesLazyOperands) {
  const host<float> a = random_host<float>({3, 4}, 7), b = random_host<float>({4, 2}, 8);
  const kiln::tensor la = upload(dev(), a) * 2.f;
  ASSERT_TRUE(la.is_lazy());
  const kiln::tensor r = kiln::matmul(la, upload(dev(), b));
  EXPECT_EQ(stats().kernel_launches, 2u);  // a * 2, then the product
  EXPECT_FALSE(la.is_lazy());
  EXPECT_TRUE(close_to<float>(r, reference(a, b, 2.0)));
  // The result is an input of later lazy expressions.
  const kiln::tensor later = r + 0.f;
  later.eval();
  EXPECT_TRUE(close_to<float>(later, reference(a, b, 2.0)));
}

TEST_P(TensorLinalgTest, GemmAlphaBetaAndTranspose) {
  for_each_type(floats{}, [&]<class T>() {
    if (std::is_same_v<T, double> && !has_f64()) return;
    const std::int64_t m = 5, n = 3, k = 6;
    std::uint64_t seed = 20;
    for (const bool ta : {false, true})
      for (const bool tb : {false, true}) {
        SCOPED_TRACE(std::string("trans_a ") + (ta ? "1" : "0") + " trans_b " + (tb ? "1" : "0"));
        const host<T> a = random_host<T>(ta ? shape_t{k, m} : shape_t{m, k}, seed++);
        const host<T> b = random_host<T>(tb ? shape_t{n, k} : shape_t{k, n}, seed++);
        const host<T> c = random_host<T>({m, n}, seed++);
        const kiln::tensor cd = upload(dev(), c);
        const kiln::tensor r =
            kiln::gemm(upload(dev(), a), upload(dev(), b), cd, 0.5, -1.5, ta, tb);
        EXPECT_EQ(r.impl(), cd.impl());
        EXPECT_TRUE(
            close_to<T>(cd, reference(ta ? swapped(a) : a, tb ? swapped(b) : b, 0.5, -1.5, &c)));
      }
    // c column-major (a transposed view): computed as c^T = b^T a^T, in place.
    const host<T> a = random_host<T>({m, k}, 30), b = random_host<T>({k, n}, 31);
    const host<T> ct = random_host<T>({n, m}, 32);
    const kiln::tensor cd = upload(dev(), ct).t();
    kiln::gemm(upload(dev(), a), upload(dev(), b), cd, 2, 1);
    const host<T> c = swapped(ct);
    EXPECT_TRUE(close_to<T>(cd, reference(a, b, 2, 1, &c)));
    // c a [m, n] view with a row pitch; beta 0 never reads it (NaN there is overwritten).
    const kiln::tensor big = kiln::tensor::full(dev(), {m, n + 3}, kiln::scalar_type_of<T>,
                                                std::numeric_limits<T>::quiet_NaN());
    const kiln::tensor cv = big.slice(1, 1, n + 1);
    kiln::gemm(upload(dev(), a), upload(dev(), b), cv);
    EXPECT_TRUE(close_to<T>(cv, reference(a, b)));
    EXPECT_TRUE(std::isnan(big.slice(1, 0, 1).slice(0, 0, 1).item<T>()));  // untouched
    // Batched: a [2, m, k], b shared, c [2, m, n].
    const host<T> ab = random_host<T>({2, m, k}, 33), cb = random_host<T>({2, m, n}, 34);
    const kiln::tensor cbd = upload(dev(), cb);
    kiln::gemm(upload(dev(), ab), upload(dev(), b), cbd, -1, 0.25);
    EXPECT_TRUE(close_to<T>(cbd, reference(ab, b, -1, 0.25, &cb)));
  });
}

TEST_P(TensorLinalgTest, GemmTf32Option) {
  const host<float> a = random_host<float>({4, 8}, 40), b = random_host<float>({8, 4}, 41);
  const kiln::tensor c = kiln::tensor::empty(dev(), {4, 4});
  kiln::gemm(upload(dev(), a), upload(dev(), b), c, 1, 0, false, false, {.tf32 = true});
  EXPECT_TRUE(close_to<float>(c, reference(a, b), true));
  EXPECT_TRUE(close_to<float>(kiln::matmul(upload(dev(), a), upload(dev(), b), {.tf32 = true}),
                              reference(a, b), true));
}

TEST_P(TensorLinalgTest, GemvMatchesTheReference) {
  for_each_type(floats{}, [&]<class T>() {
    if (std::is_same_v<T, double> && !has_f64()) return;
    const host<T> a = random_host<T>({5, 3}, 50);
    for (const bool tr : {false, true}) {
      SCOPED_TRACE(tr ? "transposed" : "plain");
      const std::int64_t in = tr ? 5 : 3, out = tr ? 3 : 5;
      const host<T> x = random_host<T>({in}, 51), y = random_host<T>({out}, 52);
      const host<T> ah = tr ? swapped(a) : a;
      const kiln::tensor yd = upload(dev(), y);
      const kiln::tensor r = kiln::gemv(upload(dev(), a), upload(dev(), x), yd, 1.5, -0.5, tr);
      EXPECT_EQ(r.impl(), yd.impl());
      EXPECT_TRUE(close_to<T>(yd, reference(ah, x, 1.5, -0.5, &y)));
      // a as a transposed view of its transpose: the same product.
      const kiln::tensor y2 = upload(dev(), y);
      kiln::gemv(upload(dev(), swapped(a)).t(), upload(dev(), x), y2, 1.5, -0.5, tr);
      EXPECT_TRUE(close_to<T>(y2, reference(ah, x, 1.5, -0.5, &y)));
    }
    // Strided x and y (every other element): y's other elements are untouched.
    const host<T> x2 = random_host<T>({6}, 53), y2 = random_host<T>({10}, 54);
    const kiln::tensor yd = upload(dev(), y2);
    kiln::gemv(upload(dev(), a), upload(dev(), x2).slice(0, 0, 6, 2), yd.slice(0, 0, 10, 2), 1, 1);
    const host<T> xs{{3}, {x2.v[0], x2.v[2], x2.v[4]}};
    host<T> ys{{5}, {}};
    for (int i = 0; i < 5; ++i) ys.v.push_back(y2.v[2 * i]);
    const expected e = reference(a, xs, 1, 1, &ys);
    const std::vector<T> got = yd.to_vector<T>();
    for (int i = 0; i < 5; ++i) {
      EXPECT_NEAR(double(got[2 * i]), e.v[i], 1e-4 * (1 + e.mag[i])) << i;
      EXPECT_EQ(got[2 * i + 1], y2.v[2 * i + 1]) << i;
    }
  });
}

template <class E, class F>
::testing::AssertionResult throws_naming(F f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const E& e) {
    const std::string m = e.what();
    for (const std::string& p : parts)
      if (m.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << m << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "another exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "nothing thrown";
}

// 16-bit matrix-vector products (on the CPU OpenBLAS's GEMV over widened row blocks, not a
// GEMM over a widened copy of a): f32 accumulation and one rounding at the store, for a
// vector, a one-column matrix and a transposed view of a.
TEST_P(TensorLinalgTest, SixteenBitMatrixVectorProducts) {
  constexpr std::int64_t m = 37, k = 300;
  for (const kiln::scalar_type t : {kiln::scalar_type::bf16, kiln::scalar_type::f16}) {
    SCOPED_TRACE(kiln::type_name(t));
    const double unit = t == kiln::scalar_type::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const kiln::tensor a = kiln::tensor::randn(dev(), {m, k}, 61).to(t).eval();
    const kiln::tensor at = kiln::tensor::randn(dev(), {k, m}, 62).to(t).eval().t();
    const kiln::tensor x = kiln::tensor::randn(dev(), {k}, 63).to(t).eval();
    const std::vector<float> hx = x.to(kiln::scalar_type::f32).to_vector<float>();
    for (const auto& [what, lhs, rhs] :
         {std::tuple{"a x", a, x}, std::tuple{"a x[:, None]", a, x.unsqueeze(1)},
          std::tuple{"a^T view x", at, x}}) {
      SCOPED_TRACE(what);
      const kiln::tensor r = kiln::matmul(lhs, rhs);
      ASSERT_EQ(r.dtype(), t);
      ASSERT_EQ(r.numel(), m);
      const std::vector<float> ha = lhs.to(kiln::scalar_type::f32).contiguous().to_vector<float>();
      const std::vector<float> got = r.to(kiln::scalar_type::f32).to_vector<float>();
      for (std::int64_t i = 0; i < m; ++i) {
        double want = 0, mag = 0;
        for (std::int64_t p = 0; p < k; ++p) {
          const double v = double(ha[std::size_t(i * k + p)]) * hx[std::size_t(p)];
          want += v;
          mag += std::fabs(v);
        }
        const double tol = unit * std::fabs(want) + 2 * (k + 2) * std::ldexp(1.0, -24) * mag;
        ASSERT_NEAR(got[std::size_t(i)], want, tol) << "row " << i;
      }
    }
  }
}

TEST_P(TensorLinalgTest, Errors) {
  using kiln::shape_error, kiln::dtype_error, kiln::invalid_argument;
  const kiln::tensor a = kiln::tensor::ones(dev(), {2, 3}), b = kiln::tensor::ones(dev(), {4, 5});
  const kiln::tensor c = kiln::tensor::ones(dev(), {2, 5});
  const kiln::tensor i = kiln::tensor::ones(dev(), {2, 3}, kiln::scalar_type::i32);
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::matmul(a, b); }, {"[2, 3]", "[4, 5]"}));
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::matmul(kiln::tensor::ones(dev(), {}), b); },
                                         {"[]", "[4, 5]"}));
  EXPECT_TRUE(throws_naming<shape_error>(
      [&] {
        kiln::matmul(kiln::tensor::ones(dev(), {2, 2, 3}), kiln::tensor::ones(dev(), {3, 3, 1}));
      },
      {"[2, 2, 3]", "[3, 3, 1]", "batch"}));
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::matmul(kiln::tensor::ones(dev(), {4}), a); },
                                         {"[4]", "[2, 3]"}));
  EXPECT_TRUE(throws_naming<dtype_error>([&] { kiln::matmul(i, i.t()); }, {"int32_t"}));
  if (has_f64()) {
    EXPECT_TRUE(throws_naming<dtype_error>(
        [&] {
          kiln::matmul(a, kiln::tensor::ones(dev(), {3, 2}, kiln::scalar_type::f64));
        },
        {"float", "double"}));
  }
  // gemm: inner sizes, c's shape, ranks, c's layout, dtypes.
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::gemm(a, b, c); }, {"[2, 3]", "[4, 5]"}));
  EXPECT_TRUE(throws_naming<shape_error>(
      [&] {
        kiln::gemm(a, kiln::tensor::ones(dev(), {3, 4}), c);
      },
      {"[2, 5]", "[2, 4]"}));
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::gemm(a, kiln::tensor::ones(dev(), {3}), c); },
                                         {"[3]"}));
  EXPECT_TRUE(throws_naming<invalid_argument>(
      [&] {
        kiln::gemm(a, kiln::tensor::ones(dev(), {3, 5}),
                   kiln::tensor::zeros(dev(), {1, 5}).expand({2, 5}));
      },
      {"[2, 5]", "strides [0, 1]"}));
  EXPECT_TRUE(throws_naming<dtype_error>([&] { kiln::gemm(i, i.t(), i); }, {"int32_t"}));
  // gemv shapes.
  EXPECT_TRUE(throws_naming<shape_error>(
      [&] { kiln::gemv(a, kiln::tensor::ones(dev(), {2}), kiln::tensor::ones(dev(), {2})); },
      {"[2, 3]", "[2]"}));
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::gemv(a, a, a); }, {"[2, 3]"}));
  // Transposes.
  EXPECT_TRUE(throws_naming<shape_error>(
      [&] {
        kiln::transpose_copy(kiln::tensor::ones(dev(), {2, 2, 2}));
      },
      {"[2, 2, 2]"}));
  EXPECT_TRUE(throws_naming<shape_error>([&] { kiln::transpose_(a); }, {"[2, 3]", "square"}));
  EXPECT_TRUE(throws_naming<invalid_argument>(
      [&] {
        kiln::transpose_(kiln::tensor::zeros(dev(), {1, 3}).expand({3, 3}));
      },
      {"strides [0, 1]"}));
  EXPECT_THROW(kiln::matmul(kiln::tensor(), a), invalid_argument);
  // Two devices.
  const auto all = kiln::device::all();
  const auto other =
      std::find_if(all.begin(), all.end(), [&](const kiln::device& d) { return !(d == dev()); });
  if (other == all.end()) return;
  const kiln::tensor o = kiln::tensor::ones(*other, {3, 5});
  EXPECT_TRUE(
      throws_naming<kiln::device_mismatch>([&] { kiln::matmul(a, o); }, {dev().id(), other->id()}));
  EXPECT_TRUE(throws_naming<kiln::device_mismatch>([&] { kiln::gemm(a, o, c); }, {other->id()}));
  EXPECT_TRUE(throws_naming<kiln::device_mismatch>(
      [&] { kiln::gemv(o, kiln::tensor::ones(dev(), {5}), kiln::tensor::ones(dev(), {3})); },
      {other->id()}));
}

}  // namespace
}  // namespace tensor_test
