// nn::multi_head_attention on every device against a double-precision host model of PyTorch's
// MultiheadAttention (packed in_proj, heads, softmax, out_proj): self-attention with and
// without the causal mask, cross-attention with more keys than queries; PyTorch's state_dict
// names; gradients reach every parameter; bad input.
#include <cmath>
#include <kiln/nn.hpp>
#include <kiln/nn/attention.hpp>
#include <kiln/tensor/inplace.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;

class AttentionModuleTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(AttentionModuleTest);

constexpr std::int64_t E = 8, H = 2, D = E / H;

std::vector<double> host(const kiln::tensor& t) {
  const auto f = t.to_vector<float>();
  return {f.begin(), f.end()};
}

// PyTorch's MultiheadAttention in double: q/k/v rows [B, T, E], W [3E, E], b [3E], Wo, bo.
std::vector<double> model(const std::vector<double>& xq, const std::vector<double>& xkv,
                          std::int64_t b, std::int64_t l, std::int64_t s,
                          const std::vector<double>& w, const std::vector<double>& bias,
                          const std::vector<double>& wo, const std::vector<double>& bo,
                          bool causal) {
  auto proj = [&](const std::vector<double>& x, std::int64_t rows, std::int64_t block) {
    std::vector<double> out(std::size_t(rows * E));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t o = 0; o < E; ++o) {
        double acc = bias[std::size_t(block * E + o)];
        for (std::int64_t i = 0; i < E; ++i)
          acc += w[std::size_t((block * E + o) * E + i)] * x[std::size_t(r * E + i)];
        out[std::size_t(r * E + o)] = acc;
      }
    return out;
  };
  const auto q = proj(xq, b * l, 0), k = proj(xkv, b * s, 1), v = proj(xkv, b * s, 2);
  std::vector<double> y(std::size_t(b * l * E)), out(y.size());
  for (std::int64_t n = 0; n < b; ++n)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t i = 0; i < l; ++i) {
        std::vector<double> p(static_cast<std::size_t>(s));
        double mx = -INFINITY, z = 0;
        for (std::int64_t j = 0; j < s; ++j) {
          double d = 0;
          for (std::int64_t c = 0; c < D; ++c)
            d += q[std::size_t((n * l + i) * E + h * D + c)] *
                 k[std::size_t((n * s + j) * E + h * D + c)];
          p[std::size_t(j)] = causal && j > i ? -INFINITY : d / std::sqrt(double(D));
          mx = std::max(mx, p[std::size_t(j)]);
        }
        for (double& x : p) z += (x = std::exp(x - mx));
        for (std::int64_t c = 0; c < D; ++c) {
          double acc = 0;
          for (std::int64_t j = 0; j < s; ++j)
            acc += p[std::size_t(j)] / z * v[std::size_t((n * s + j) * E + h * D + c)];
          y[std::size_t((n * l + i) * E + h * D + c)] = acc;
        }
      }
  for (std::int64_t r = 0; r < b * l; ++r)
    for (std::int64_t o = 0; o < E; ++o) {
      double acc = bo[std::size_t(o)];
      for (std::int64_t i = 0; i < E; ++i)
        acc += wo[std::size_t(o * E + i)] * y[std::size_t(r * E + i)];
      out[std::size_t(r * E + o)] = acc;
    }
  return out;
}

void expect_near(const kiln::tensor& got, const std::vector<double>& want) {
  const auto g = host(got);
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i)
    ASSERT_NEAR(g[i], want[i], 2e-5 * (1 + std::abs(want[i]))) << "element " << i;
}

TEST_P(AttentionModuleTest, MatchesPyTorchsMultiheadAttention) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    nn::multi_head_attention mha(dev(), E, H, {.causal = causal, .seed = 7});
    {  // biases made non-zero, so the test sees them used
      kiln::no_grad off;
      kiln::copy_(mha.in_proj_bias, kiln::tensor::randn(dev(), {3 * E}, 8) * 0.1f);
      kiln::copy_(mha.out_proj->bias, kiln::tensor::randn(dev(), {E}, 9) * 0.1f);
    }
    const auto w = host(mha.in_proj_weight), b = host(mha.in_proj_bias);
    const auto wo = host(mha.out_proj->weight), bo = host(mha.out_proj->bias);
    const kiln::tensor x = kiln::tensor::randn(dev(), {2, 5, E}, 10);
    expect_near(mha(x), model(host(x), host(x), 2, 5, 5, w, b, wo, bo, causal));
    // Cross-attention: 3 queries over 6 keys (no causal mask across sequences).
    const kiln::tensor q = kiln::tensor::randn(dev(), {2, 3, E}, 11);
    const kiln::tensor kv = kiln::tensor::randn(dev(), {2, 6, E}, 12);
    nn::multi_head_attention cross(dev(), E, H, {.seed = 7});
    kiln::no_grad off;
    kiln::copy_(cross.in_proj_bias, mha.in_proj_bias);
    kiln::copy_(cross.out_proj->bias, mha.out_proj->bias);
    expect_near(cross.attend(q, kv, kv), model(host(q), host(kv), 2, 3, 6, w, b, wo, bo, false));
  }
}

TEST_P(AttentionModuleTest, StateDictNamesAndGradients) {
  nn::multi_head_attention mha(dev(), E, H, {.causal = true});
  std::vector<std::string> names;
  for (const auto& [name, t] : mha.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight",
                                             "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.shape(), (kiln::shape_t{3 * E, E}));
  EXPECT_EQ(mha.parameter_count(), 3 * E * E + 3 * E + E * E + E);
  const kiln::tensor x = kiln::tensor::randn(dev(), {2, 4, E}, 13);
  (mha(x) * mha(x)).sum().backward();
  for (const kiln::tensor& p : mha.parameters()) {
    ASSERT_TRUE(p.grad().defined());
    double norm = 0;
    for (float g : p.grad().to_vector<float>()) norm += double(g) * g;
    EXPECT_GT(norm, 0);
  }
  EXPECT_NE(mha.to_string().find("heads 2, causal"), std::string::npos) << mha.to_string();
}

TEST_P(AttentionModuleTest, BadInputGetsClearErrors) {
  EXPECT_THROW(nn::multi_head_attention(dev(), 10, 3), kiln::invalid_argument);
  EXPECT_THROW(nn::multi_head_attention(dev(), 0, 1), kiln::invalid_argument);
  nn::multi_head_attention mha(dev(), E, H);
  EXPECT_THROW(mha(kiln::tensor::randn(dev(), {2, 4, E + 1}, 1)), kiln::shape_error);
  EXPECT_THROW(mha(kiln::tensor::randn(dev(), {4, E}, 1)), kiln::shape_error);
  EXPECT_THROW(mha(kiln::tensor{}), kiln::invalid_argument);
  EXPECT_THROW(
      mha.attend(kiln::tensor::randn(dev(), {2, 3, E}, 1), kiln::tensor::randn(dev(), {3, 6, E}, 2),
                 kiln::tensor::randn(dev(), {3, 6, E}, 3)),
      kiln::shape_error);
}

}  // namespace
}  // namespace autograd_test
