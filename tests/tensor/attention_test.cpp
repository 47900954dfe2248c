// scaled_dot_product_attention on every device against a double-precision host model: no mask,
// causal (more keys than queries: top-left aligned), a broadcast bool mask, an additive mask,
// a custom scale, bf16; gradients against central differences in f64; clear errors.
#include <cmath>
#include <kiln/kiln.hpp>
#include <kiln/tensor/attention.hpp>
#include <limits>
#include <optional>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::scalar_type;

class AttentionTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(AttentionTest);

constexpr std::int64_t B = 2, H = 3, L = 5, S = 7, E = 4, EV = 6;

enum class mask_kind { none, causal, boolean, additive };

// The host model: mask(i, j) in {keep, drop} or an additive value, per (i, j) (broadcast over
// batch and heads).
std::vector<double> reference(const std::vector<double>& q, const std::vector<double>& k,
                              const std::vector<double>& v, mask_kind m,
                              const std::vector<double>& add, double scale) {
  std::vector<double> out(std::size_t(B * H * L * EV));
  for (std::int64_t bh = 0; bh < B * H; ++bh)
    for (std::int64_t i = 0; i < L; ++i) {
      std::vector<double> s(S);
      double mx = -INFINITY;
      for (std::int64_t j = 0; j < S; ++j) {
        double d = 0;
        for (std::int64_t e = 0; e < E; ++e)
          d += q[std::size_t((bh * L + i) * E + e)] * k[std::size_t((bh * S + j) * E + e)];
        d *= scale;
        if (m == mask_kind::causal && j > i) d = -INFINITY;
        if (m == mask_kind::boolean && add[std::size_t(i * S + j)] == 0) d = -INFINITY;
        if (m == mask_kind::additive) d += add[std::size_t(((bh % H) * L + i) * S + j)];
        s[std::size_t(j)] = d;
        mx = std::max(mx, d);
      }
      double z = 0;
      for (double& x : s) z += (x = std::exp(x - mx));
      for (std::int64_t c = 0; c < EV; ++c) {
        double acc = 0;
        for (std::int64_t j = 0; j < S; ++j)
          acc += s[std::size_t(j)] / z * v[std::size_t((bh * S + j) * EV + c)];
        out[std::size_t((bh * L + i) * EV + c)] = acc;
      }
    }
  return out;
}

std::vector<double> doubles(const kiln::tensor& t) {
  const auto f = t.to(scalar_type::f32).to_vector<float>();
  return {f.begin(), f.end()};
}

TEST_P(AttentionTest, MatchesTheReferenceForEveryMask) {
  for (scalar_type t : {scalar_type::f32, scalar_type::bf16}) {
    SCOPED_TRACE(kiln::type_name(t));
    const auto q = kiln::tensor::randn(dev(), {B, H, L, E}, 1).to(t).eval();
    const auto k = kiln::tensor::randn(dev(), {B, H, S, E}, 2).to(t).eval();
    const auto v = kiln::tensor::randn(dev(), {B, H, S, EV}, 3).to(t).eval();
    // A bool mask keeping key 0 in every row (no row fully masked), broadcast over B and H.
    std::vector<double> keep(std::size_t(L * S));
    std::vector<bool> keep_b(keep.size());
    for (std::size_t x = 0; x < keep.size(); ++x)
      keep[x] = keep_b[x] = (x % S == 0) || (x % 3 != 1);
    const auto add = kiln::tensor::randn(dev(), {1, H, L, S}, 4).to(t).eval();
    const double u = t == scalar_type::f32 ? 1e-5 : 3e-2;
    for (mask_kind m :
         {mask_kind::none, mask_kind::causal, mask_kind::boolean, mask_kind::additive}) {
      SCOPED_TRACE("mask " + std::to_string(int(m)));
      kiln::tensor mask;
      if (m == mask_kind::boolean) mask = kiln::tensor::from(dev(), keep_b, {L, S});
      if (m == mask_kind::additive) mask = add;
      const std::optional<double> scale =
          m == mask_kind::additive ? std::optional<double>(0.3) : std::nullopt;
      const kiln::tensor y =
          kiln::scaled_dot_product_attention(q, k, v, mask, m == mask_kind::causal, scale);
      EXPECT_EQ(y.shape(), (shape_t{B, H, L, EV}));
      EXPECT_EQ(y.dtype(), t);
      const auto want = reference(doubles(q), doubles(k), doubles(v), m,
                                  m == mask_kind::boolean ? keep : doubles(add),
                                  scale.value_or(1 / std::sqrt(double(E))));
      const auto got = doubles(y);
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], u * (1 + std::abs(want[i]))) << "element " << i;
    }
  }
}

TEST_P(AttentionTest, GradientsMatchCentralDifferences) {
  if (!has_f64()) GTEST_SKIP() << dev().id() << " has no f64";
  const shape_t qs{1, 2, 3, 4}, ks{1, 2, 5, 4}, vs{1, 2, 5, 3};
  auto leaf = [&](const shape_t& s, std::uint64_t seed) {
    kiln::tensor t = kiln::tensor::randn(dev(), s, seed, scalar_type::f64);
    t.eval();
    t.requires_grad_();
    return t;
  };
  const kiln::tensor q = leaf(qs, 11), k = leaf(ks, 12), v = leaf(vs, 13);
  const kiln::tensor g = kiln::tensor::randn(dev(), {1, 2, 3, 3}, 14, scalar_type::f64).eval();
  auto loss = [&](const kiln::tensor& a, const kiln::tensor& b, const kiln::tensor& c) {
    return (kiln::scaled_dot_product_attention(a, b, c, {}, true) * g).sum();
  };
  loss(q, k, v).backward();
  const kiln::tensor* leaves[] = {&q, &k, &v};
  for (int which = 0; which < 3; ++which) {
    const std::vector<double> base = leaves[which]->detach().to_vector<double>();
    const std::vector<double> grad = leaves[which]->grad().to_vector<double>();
    for (std::size_t i = 0; i < base.size(); i += 3) {
      double f[2];
      for (int sgn = 0; sgn < 2; ++sgn) {
        std::vector<double> p = base;
        p[i] += sgn ? 1e-6 : -1e-6;
        kiln::no_grad off;
        const kiln::tensor moved = kiln::tensor::from(dev(), p, leaves[which]->shape());
        f[sgn] = loss(which == 0 ? moved : q.detach(), which == 1 ? moved : k.detach(),
                      which == 2 ? moved : v.detach())
                     .item<double>();
      }
      EXPECT_NEAR(grad[i], (f[1] - f[0]) / 2e-6, 1e-6 * (1 + std::abs(grad[i])))
          << "operand " << which << " element " << i;
    }
  }
}

TEST_P(AttentionTest, BadInputGetsClearErrors) {
  const auto q = kiln::tensor::randn(dev(), {2, 3, 4}, 21);
  const auto k = kiln::tensor::randn(dev(), {2, 5, 4}, 22);
  const auto v = kiln::tensor::randn(dev(), {2, 5, 6}, 23);
  using kiln::scaled_dot_product_attention;
  EXPECT_THROW(scaled_dot_product_attention(q, kiln::tensor::randn(dev(), {2, 5, 3}, 24), v),
               kiln::shape_error);
  EXPECT_THROW(scaled_dot_product_attention(q, k, kiln::tensor::randn(dev(), {2, 4, 6}, 25)),
               kiln::shape_error);
  EXPECT_THROW(scaled_dot_product_attention(q.reshape({24}), k, v), kiln::shape_error);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, kiln::tensor::ones(dev(), {3, 5}), true),
               kiln::invalid_argument);
  EXPECT_THROW(
      scaled_dot_product_attention(q, k, v, kiln::tensor::ones(dev(), {3, 5}, scalar_type::i32)),
      kiln::dtype_error);
  EXPECT_THROW(scaled_dot_product_attention(q.to(scalar_type::bf16), k, v), kiln::dtype_error);
  EXPECT_THROW(scaled_dot_product_attention(q.to(scalar_type::i32), k.to(scalar_type::i32),
                                            v.to(scalar_type::i32)),
               kiln::dtype_error);
  EXPECT_THROW(scaled_dot_product_attention(kiln::tensor{}, k, v), kiln::invalid_argument);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, {}, false, INFINITY), kiln::invalid_argument);
  EXPECT_THROW(scaled_dot_product_attention(q, k, v, kiln::tensor::ones(dev(), {4, 5})),
               kiln::shape_error);  // the mask does not broadcast to [2, 3, 5]
}

}  // namespace
}  // namespace tensor_test
