// scaled_dot_product_attention on every device against a double-precision host model: no mask,
// causal (more keys than queries: top-left aligned), a broadcast bool mask, an additive mask,
// a custom scale, bf16; gradients against central differences in f64; the fused kernels
// against the composed path over many tiles and work-groups (head-split views, a broadcast
// batch, 16-bit storage); the vendor path (cuDNN's flash attention on CUDA) against the
// composed one in f32, and its refusals; clear errors.
#include <cmath>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <kiln/tensor/attention.hpp>
#include <kiln/tensor/conv.hpp>
#include <kiln/tensor/indexing.hpp>
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

// KILN_ATTENTION=path for the scope: "vendor" (the device's library), "fused"
// (attention_kernels.cpp) or "composed" (matmul, softmax, matmul).
struct path_scope {
  explicit path_scope(const char* path) { ::setenv("KILN_ATTENTION", path, 1); }
  ~path_scope() { ::unsetenv("KILN_ATTENTION"); }
  path_scope(const path_scope&) = delete;
  path_scope& operator=(const path_scope&) = delete;
};
struct composed_scope : path_scope {
  composed_scope() : path_scope("composed") {}
};
struct fused_scope : path_scope {
  fused_scope() : path_scope("fused") {}
};

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
  for (const char* path : {"composed", "fused"})  // fused takes no mask and causal only
    for (scalar_type t : {scalar_type::f32, scalar_type::bf16}) {
      SCOPED_TRACE(std::string(path) + " " + kiln::type_name(t));
      const path_scope scope(path);
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
  for (const char* path : {"composed", "fused"}) {
    SCOPED_TRACE(path);
    const path_scope scope(path);
    for (const kiln::tensor* x : {&q, &k, &v}) x->set_grad(kiln::tensor());
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
}

void expect_close(const kiln::tensor& got, const kiln::tensor& want, double tol, const char* what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const auto g = doubles(got), w = doubles(want);
  double worst = 0;
  std::size_t at = 0;
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - w[i]) / (1 + std::abs(w[i]));
    if (!(err <= worst)) worst = err, at = i;  // NaN counts as the worst
  }
  EXPECT_LE(worst, tol) << what << ": element " << at << " is " << g[at] << ", expected " << w[at];
}

// The leaves themselves as q, k and v.
std::tuple<kiln::tensor, kiln::tensor, kiln::tensor> as_qkv(const std::vector<kiln::tensor>& x) {
  return {x[0], x[1], x[2]};
}

// make's leaves widened to f32: the same (rounded) values, as the reference's inputs.
template <class Make>
auto in_f32(Make make) {
  return [make] {
    std::vector<kiln::tensor> x = make();
    for (kiln::tensor& y : x) y = y.to(scalar_type::f32).eval();
    return x;
  };
}

// Outputs and gradients of loss = sum(sdpa(q, k, v) * g) for leaves made by make(); q, k, v
// are derived from the leaves by split(), so head-split views of one packed leaf work too.
struct attention_run {
  kiln::tensor y;
  std::vector<kiln::tensor> grads;
};
template <class Make, class Split>
attention_run run_attention(Make make, Split split, bool causal, std::uint64_t gseed) {
  std::vector<kiln::tensor> leaves = make();
  for (kiln::tensor& t : leaves) t.requires_grad_();
  const auto [q, k, v] = split(leaves);
  attention_run r;
  r.y = kiln::scaled_dot_product_attention(q, k, v, {}, causal);
  const kiln::tensor g =
      kiln::tensor::randn(q.get_device(), r.y.shape(), gseed).to(r.y.dtype()).eval();
  (r.y * g).to(scalar_type::f32).sum().backward();
  r.y = r.y.detach();
  for (const kiln::tensor& t : leaves) r.grads.push_back(t.grad());
  return r;
}

TEST_P(AttentionTest, FusedMatchesComposedAcrossTilesAndGroups) {
  // 70 / 90 rows: several 32-row tiles and 64-row work-groups, none of them full at the end.
  struct shape_case {
    std::int64_t l, s;
    bool causal;
  };
  for (const shape_case c : {shape_case{70, 90, false}, shape_case{70, 70, true},
                             shape_case{40, 90, true}, shape_case{90, 40, true}}) {
    SCOPED_TRACE("L " + std::to_string(c.l) + " S " + std::to_string(c.s) +
                 (c.causal ? " causal" : ""));
    auto make = [&] {
      return std::vector<kiln::tensor>{kiln::tensor::randn(dev(), {2, 3, c.l, 16}, 31).eval(),
                                       kiln::tensor::randn(dev(), {2, 3, c.s, 16}, 32).eval(),
                                       kiln::tensor::randn(dev(), {2, 3, c.s, 24}, 33).eval()};
    };
    auto split = [](const std::vector<kiln::tensor>& x) { return std::tuple{x[0], x[1], x[2]}; };
    attention_run fused, composed;
    {
      fused_scope scope;
      fused = run_attention(make, split, c.causal, 34);
    }
    {
      composed_scope scope;
      composed = run_attention(make, split, c.causal, 34);
    }
    expect_close(fused.y, composed.y, 1e-5, "output");
    for (std::size_t x = 0; x < 3; ++x)
      expect_close(fused.grads[x], composed.grads[x], 1e-4, x == 0 ? "dq" : x == 1 ? "dk" : "dv");
  }
}

TEST_P(AttentionTest, FusedReadsHeadSplitViewsAndBroadcastBatches) {
  constexpr std::int64_t b = 2, t = 70, h = 3, e = 16;
  // Self-attention over one packed [B, T, 3 H E] projection, heads as strided views.
  auto make_packed = [&] {
    return std::vector<kiln::tensor>{kiln::tensor::randn(dev(), {b, t, 3 * h * e}, 41).eval()};
  };
  auto split_packed = [&](const std::vector<kiln::tensor>& x) {
    const std::vector<kiln::tensor> p = kiln::split(x[0], h * e, 2);
    auto heads = [&](const kiln::tensor& y) { return y.reshape({b, t, h, e}).transpose(1, 2); };
    return std::tuple{heads(p[0]), heads(p[1]), heads(p[2])};
  };
  // k and v shared by every head ([B, 1, S, E], broadcast over H).
  auto make_shared = [&] {
    return std::vector<kiln::tensor>{kiln::tensor::randn(dev(), {b, h, t, e}, 42).eval(),
                                     kiln::tensor::randn(dev(), {b, 1, t, e}, 43).eval(),
                                     kiln::tensor::randn(dev(), {b, 1, t, e}, 44).eval()};
  };
  auto split_shared = [](const std::vector<kiln::tensor>& x) {
    return std::tuple{x[0], x[1], x[2]};
  };
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    attention_run packed, shared;
    {
      fused_scope scope;
      packed = run_attention(make_packed, split_packed, causal, 45);
      shared = run_attention(make_shared, split_shared, causal, 46);
    }
    EXPECT_EQ(packed.y.shape(), (shape_t{b, h, t, e}));
    EXPECT_EQ(shared.grads[1].shape(), (shape_t{b, 1, t, e}));
    composed_scope scope;
    const attention_run packed_c = run_attention(make_packed, split_packed, causal, 45);
    const attention_run shared_c = run_attention(make_shared, split_shared, causal, 46);
    expect_close(packed.y, packed_c.y, 1e-5, "packed output");
    expect_close(packed.grads[0], packed_c.grads[0], 1e-4, "packed gradient");
    expect_close(shared.y, shared_c.y, 1e-5, "shared output");
    for (std::size_t x = 0; x < 3; ++x)
      expect_close(shared.grads[x], shared_c.grads[x], 1e-4, "shared gradient");
  }
}

TEST_P(AttentionTest, SixteenBitFusedMatchesFloatWithOneRounding) {
  // 16-bit storage, f32 inside the kernel: the composed path in f32 over the same (rounded)
  // values is the reference; the fused result may differ by its output rounding and the
  // inputs' (2^-8 for bf16).
  for (scalar_type t : {scalar_type::bf16, scalar_type::f16}) {
    SCOPED_TRACE(kiln::type_name(t));
    auto make16 = [&] {
      // The shapes of FusedMatchesComposedAcrossTilesAndGroups (its reference programs again).
      return std::vector<kiln::tensor>{kiln::tensor::randn(dev(), {2, 3, 70, 16}, 51).to(t).eval(),
                                       kiln::tensor::randn(dev(), {2, 3, 70, 16}, 52).to(t).eval(),
                                       kiln::tensor::randn(dev(), {2, 3, 70, 24}, 53).to(t).eval()};
    };
    attention_run r16;
    {
      fused_scope scope;
      r16 = run_attention(make16, as_qkv, true, 54);
    }
    composed_scope scope;
    const attention_run r32 = run_attention(in_f32(make16), as_qkv, true, 54);
    EXPECT_EQ(r16.y.dtype(), t);
    const double tol = t == scalar_type::bf16 ? 1e-2 : 2e-3;
    expect_close(r16.y, r32.y, tol, "output");
    // The gradient g is rounded too: compare the gradients loosely.
    for (std::size_t x = 0; x < 3; ++x) expect_close(r16.grads[x], r32.grads[x], 8 * tol, "grad");
  }
}

// Whether the device runs convolutions in cuDNN: then it has cuDNN's flash attention too (every
// GPU cuDNN 9 runs on, sm80 and later, has it), and the vendor path must run.
bool has_cudnn(const kiln::device& dev) {
  if (dev.backend() != "cuda") return false;
  kiln::conv2d(kiln::tensor::randn(dev, {1, 2, 5, 5}, 3),
               kiln::tensor::randn(dev, {2, 2, 3, 3}, 4));
  return kiln::last_conv_path() == kiln::conv_path::vendor;
}

TEST_P(AttentionTest, VendorPathMatchesComposedInFloat) {
  if (!has_cudnn(dev()))
    GTEST_SKIP() << dev().id() << " has no vendor flash attention (CUDA with cuDNN only)";
  struct shape_case {
    std::int64_t b, h, l, s, e, ev;
    bool causal;
  };
  // Sequences that are and are not multiples of the library's tiles, more keys than queries
  // and fewer (causal: top-left aligned), head widths 32-128, a value width unlike the key's,
  // and a width of 192 (forward in the library, backward in Kiln's fused kernels from the
  // library's statistics).
  const shape_case cases[] = {{2, 3, 128, 128, 64, 64, true},   {2, 2, 100, 130, 64, 64, false},
                              {1, 2, 70, 150, 32, 32, true},    {1, 2, 150, 70, 128, 128, true},
                              {1, 4, 256, 256, 128, 128, true}, {2, 1, 33, 33, 64, 64, false},
                              {1, 2, 64, 96, 64, 32, true},     {1, 1, 40, 72, 192, 192, true}};
  for (scalar_type t : {scalar_type::bf16, scalar_type::f16})
    for (const shape_case& c : cases) {
      SCOPED_TRACE(std::string(kiln::type_name(t)) + " L " + std::to_string(c.l) + " S " +
                   std::to_string(c.s) + " E " + std::to_string(c.e) + " Ev " +
                   std::to_string(c.ev) + (c.causal ? " causal" : ""));
      auto make16 = [&] {
        return std::vector<kiln::tensor>{
            kiln::tensor::randn(dev(), {c.b, c.h, c.l, c.e}, 61).to(t).eval(),
            kiln::tensor::randn(dev(), {c.b, c.h, c.s, c.e}, 62).to(t).eval(),
            kiln::tensor::randn(dev(), {c.b, c.h, c.s, c.ev}, 63).to(t).eval()};
      };
      attention_run r16;
      {
        const path_scope scope("vendor");
        r16 = run_attention(make16, as_qkv, c.causal, 64);
        EXPECT_EQ(kiln::last_attention_path(), kiln::attention_path::vendor);
      }
      const composed_scope scope;
      const attention_run r32 = run_attention(in_f32(make16), as_qkv, c.causal, 64);
      ASSERT_EQ(r16.y.dtype(), t);
      // The library rounds the probabilities to 16 bits before their product with v (as every
      // flash attention does): a few units of the storage's rounding.
      const double tol = t == scalar_type::bf16 ? 2e-2 : 4e-3;
      expect_close(r16.y, r32.y, tol, "output");
      for (std::size_t x = 0; x < 3; ++x) expect_close(r16.grads[x], r32.grads[x], 8 * tol, "grad");
    }
}

TEST_P(AttentionTest, VendorPathReadsHeadSplitViewsAndRefusesWhatItCannotTake) {
  if (!has_cudnn(dev()))
    GTEST_SKIP() << dev().id() << " has no vendor flash attention (CUDA with cuDNN only)";
  constexpr std::int64_t b = 2, t = 96, h = 3, e = 64;
  // Self-attention over one packed [B, T, 3 H E] projection (the GPT's), heads as strided views;
  // and [B, T, E] operands with no head dimension.
  auto make_packed = [&] {
    return std::vector<kiln::tensor>{
        kiln::tensor::randn(dev(), {b, t, 3 * h * e}, 71).to(scalar_type::bf16).eval()};
  };
  auto split_packed = [&](const std::vector<kiln::tensor>& x) {
    const std::vector<kiln::tensor> p = kiln::split(x[0], h * e, 2);
    auto heads = [&](const kiln::tensor& y) { return y.reshape({b, t, h, e}).transpose(1, 2); };
    return std::tuple{heads(p[0]), heads(p[1]), heads(p[2])};
  };
  auto make3 = [&] {
    std::vector<kiln::tensor> x;
    for (std::uint64_t seed : {72, 73, 74})
      x.push_back(kiln::tensor::randn(dev(), {b, t, e}, seed).to(scalar_type::bf16).eval());
    return x;
  };
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    attention_run packed, three;
    {
      const path_scope scope("vendor");
      packed = run_attention(make_packed, split_packed, causal, 75);
      EXPECT_EQ(kiln::last_attention_path(), kiln::attention_path::vendor);
      three = run_attention(make3, as_qkv, causal, 76);
      EXPECT_EQ(kiln::last_attention_path(), kiln::attention_path::vendor);
    }
    EXPECT_EQ(packed.y.shape(), (shape_t{b, h, t, e}));
    EXPECT_EQ(three.y.shape(), (shape_t{b, t, e}));
    const composed_scope scope;
    const attention_run packed_c = run_attention(make_packed, split_packed, causal, 75);
    const attention_run three_c = run_attention(make3, as_qkv, causal, 76);
    expect_close(packed.y, packed_c.y, 3e-2, "packed output");
    expect_close(packed.grads[0], packed_c.grads[0], 0.15, "packed gradient");
    expect_close(three.y, three_c.y, 3e-2, "3-d output");
    for (std::size_t x = 0; x < 3; ++x) expect_close(three.grads[x], three_c.grads[x], 0.15, "3-d");
  }
  // An operand 4 elements into its memory (copied to a word boundary first) and gradients
  // wanted for q alone.
  {
    const auto base = kiln::tensor::randn(dev(), {2 * 3 * 40 * 64 + 4}, 80).to(scalar_type::bf16);
    const kiln::tensor q_off = base.slice(0, 4, 4 + 2 * 3 * 40 * 64).reshape({2, 3, 40, 64});
    kiln::tensor q = (q_off * 1).eval();
    q.requires_grad_();
    const auto k = kiln::tensor::randn(dev(), {2, 3, 40, 64}, 81).to(scalar_type::bf16).eval();
    const auto v = kiln::tensor::randn(dev(), {2, 3, 40, 64}, 82).to(scalar_type::bf16).eval();
    kiln::tensor y_off, y_ref, g_ref;
    {
      const path_scope scope("vendor");
      y_off = kiln::scaled_dot_product_attention(q_off, k, v, {}, true);
      EXPECT_EQ(kiln::last_attention_path(), kiln::attention_path::vendor);
      kiln::scaled_dot_product_attention(q, k, v, {}, true).to(scalar_type::f32).sum().backward();
    }
    const kiln::tensor g_vendor = q.grad();
    q.set_grad(kiln::tensor());
    {
      const composed_scope scope;
      y_ref = kiln::scaled_dot_product_attention(q_off, k, v, {}, true);
      kiln::scaled_dot_product_attention(q, k, v, {}, true).to(scalar_type::f32).sum().backward();
    }
    expect_close(y_off, y_ref, 3e-2, "offset q");
    expect_close(g_vendor, q.grad(), 0.15, "q-only gradient");
  }
  // What the library cannot take runs elsewhere, with the same result: a head width that is
  // not a multiple of 8, f32, a mask.
  const auto q = kiln::tensor::randn(dev(), {1, 2, 40, 20}, 77).to(scalar_type::bf16).eval();
  const auto k = kiln::tensor::randn(dev(), {1, 2, 40, 20}, 78).to(scalar_type::bf16).eval();
  const auto v = kiln::tensor::randn(dev(), {1, 2, 40, 20}, 79).to(scalar_type::bf16).eval();
  const path_scope scope("vendor");
  const kiln::tensor narrow = kiln::scaled_dot_product_attention(q, k, v, {}, true);
  EXPECT_NE(kiln::last_attention_path(), kiln::attention_path::vendor);
  kiln::tensor ref;
  {
    const composed_scope composed;
    ref = kiln::scaled_dot_product_attention(q, k, v, {}, true);
  }
  expect_close(narrow, ref, 1e-2, "narrow heads");
  kiln::scaled_dot_product_attention(q.to(scalar_type::f32), k.to(scalar_type::f32),
                                     v.to(scalar_type::f32));
  EXPECT_NE(kiln::last_attention_path(), kiln::attention_path::vendor);
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
  {
    const path_scope scope("flash");
    EXPECT_THROW(scaled_dot_product_attention(q, k, v), kiln::invalid_argument);
  }
  {
    const fused_scope scope;  // batches that do not broadcast: [2] against [3]
    EXPECT_THROW(scaled_dot_product_attention(q, kiln::tensor::randn(dev(), {3, 5, 4}, 26),
                                              kiln::tensor::randn(dev(), {3, 5, 6}, 27)),
                 kiln::shape_error);
  }
}

}  // namespace
}  // namespace tensor_test
