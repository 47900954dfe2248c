// nn::transformer_block and nn::gpt on every device: the block's wiring against its parts,
// PyTorch-style state_dict names and nanoGPT's initialisation, the loss at initialisation,
// learning a small corpus, seeded generation, and bad input.
#include <cmath>
#include <kiln/nn.hpp>
#include <kiln/nn/transformer.hpp>
#include <kiln/optim.hpp>
#include <kiln/tensor/layer_norm.hpp>
#include <kiln/tensor/linear.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;

class TransformerTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TransformerTest);

nn::gpt_config tiny(std::int64_t vocab = 11) {
  return {.vocab_size = vocab, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 16, .seed = 5};
}

std::vector<float> host(const kiln::tensor& t) { return t.contiguous().to_vector<float>(); }

TEST_P(TransformerTest, BlockIsPreNormAttentionThenGeluMlpWithResiduals) {
  nn::transformer_block b(dev(), tiny());
  const kiln::tensor x = kiln::tensor::randn(dev(), {2, 5, 16}, 3);
  const kiln::tensor y = x + (*b.attn)(kiln::layer_norm(x, {16}, b.ln_1->weight, b.ln_1->bias));
  const kiln::tensor h = kiln::gelu(
      kiln::matmul(kiln::layer_norm(y, {16}, b.ln_2->weight, b.ln_2->bias), b.c_fc->weight.t()) +
      b.c_fc->bias);
  const kiln::tensor want = y + kiln::matmul(h, b.c_proj->weight.t()) + b.c_proj->bias;
  const auto got = host(b(x)), w = host(want);
  ASSERT_EQ(got.size(), w.size());
  for (std::size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], 1e-4) << i;
}

TEST_P(TransformerTest, StateDictNamesShapesAndInitialisation) {
  nn::gpt_config c = tiny();
  c.tied_head = false;
  nn::gpt m(dev(), c);
  std::vector<std::string> names;
  for (const auto& [name, t] : m.state_dict()) names.push_back(name);
  const std::vector<std::string> block = {
      "ln_1.weight",          "ln_1.bias",          "attn.in_proj_weight", "attn.in_proj_bias",
      "attn.out_proj.weight", "attn.out_proj.bias", "ln_2.weight",         "ln_2.bias",
      "mlp.c_fc.weight",      "mlp.c_fc.bias",      "mlp.c_proj.weight",   "mlp.c_proj.bias"};
  std::vector<std::string> want = {"wte.weight", "wpe.weight"};
  for (int i = 0; i < 2; ++i)
    for (const std::string& n : block) want.push_back("h." + std::to_string(i) + "." + n);
  for (const char* n : {"ln_f.weight", "ln_f.bias", "lm_head.weight"}) want.push_back(n);
  EXPECT_EQ(names, want);
  const std::int64_t C = 16, V = 11, T = 8;
  const std::int64_t per_block = 4 * C + 3 * C * C + 3 * C + C * C + C + 8 * C * C + 4 * C + C;
  EXPECT_EQ(m.parameter_count(), V * C + T * C + 2 * per_block + 2 * C + V * C);
  EXPECT_EQ(nn::gpt(dev(), tiny()).parameter_count(), m.parameter_count() - V * C);  // tied
  // nanoGPT's initialisation: N(0, 0.02), residual projections N(0, 0.02 / sqrt(2 n_layer)),
  // zero biases, unit norms.
  auto stddev = [](const kiln::tensor& t) {
    double s = 0, n = 0;
    for (float v : host(t)) s += double(v) * v, n += 1;
    return std::sqrt(s / n);
  };
  EXPECT_NEAR(stddev(m.wte->weight), 0.02, 0.004);
  EXPECT_NEAR(stddev(m.h[0]->c_fc->weight), 0.02, 0.003);
  EXPECT_NEAR(stddev(m.h[1]->c_proj->weight), 0.01, 0.002);
  for (float v : host(m.h[0]->c_fc->bias)) EXPECT_EQ(v, 0.f);
  for (float v : host(m.ln_f->weight)) EXPECT_EQ(v, 1.f);
  // The same seed, the same weights.
  EXPECT_EQ(host(nn::gpt(dev(), tiny()).wte->weight), host(nn::gpt(dev(), tiny()).wte->weight));
}

TEST_P(TransformerTest, LossStartsNearLogVocabAndTheModelLearnsASmallCorpus) {
  nn::gpt m(dev(), tiny());
  // A periodic sequence: every token is determined by the two before it.
  std::vector<std::int64_t> seq;
  for (int i = 0; i < 64; ++i) seq.push_back((i * 3 + (i / 5) % 2) % 11);
  std::vector<std::int64_t> x, y;
  const std::int64_t B = 4, T = 8;
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      x.push_back(seq[std::size_t(b * 9 + t)]);
      y.push_back(seq[std::size_t(b * 9 + t + 1)]);
    }
  const kiln::tensor xt = kiln::tensor::from(dev(), x, {B, T});
  const kiln::tensor yt = kiln::tensor::from(dev(), y, {B, T});
  EXPECT_EQ(m(xt).shape(), (kiln::shape_t{B, T, 11}));
  const double first = double(m.loss(xt, yt).item<float>());
  EXPECT_NEAR(first, std::log(11.0), 0.25);
  const std::vector<kiln::tensor> params = m.parameters();
  kiln::optim::optimizer opt =
      kiln::optim::adamw(params, {.lr = 1e-2, .no_weight_decay = kiln::optim::decay_split(params)});
  double last = first;
  for (int step = 0; step < 40; ++step) {
    opt.zero_grad();
    const kiln::tensor loss = m.loss(xt, yt);
    loss.backward();
    if (step == 0) {
      for (const auto& [name, p] : m.named_parameters()) {
        ASSERT_TRUE(p.grad().defined()) << name << " got no gradient";
      }
    }
    opt.step();
    last = double(loss.item<float>());
  }
  EXPECT_LT(last, 0.5 * first) << "from " << first;
}

TEST_P(TransformerTest, MicroBatchGradientsAccumulateToTheBatchsGradient) {
  // Gradient accumulation (kiln train gpt --grad-accum): a batch of 4 run as two micro-batches
  // of 2, each loss scaled by 1/2, leaves the same gradients (into the optimizer's flat buffer)
  // as the batch in one backward.
  nn::gpt m(dev(), tiny());
  const std::vector<kiln::tensor> params = m.parameters();
  kiln::optim::optimizer opt = kiln::optim::adamw(params, {.lr = 1e-3});
  std::vector<std::int64_t> ids(4 * 9);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int64_t((i * 7 + i / 3) % 11);
  const kiln::tensor all = kiln::tensor::from(dev(), ids, {4, 9});
  const kiln::tensor x = all.slice(1, 0, 8).contiguous(), y = all.slice(1, 1, 9).contiguous();
  opt.zero_grad();
  m.loss(x, y).backward();
  std::vector<std::vector<float>> whole;
  for (const kiln::tensor& p : params) whole.push_back(host(p.grad()));
  opt.zero_grad();
  for (std::int64_t k = 0; k < 2; ++k)
    (m.loss(x.slice(0, 2 * k, 2 * k + 2), y.slice(0, 2 * k, 2 * k + 2)) / 2.f).backward();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const std::vector<float> g = host(params[i].grad());
    ASSERT_EQ(g.size(), whole[i].size());
    double scale = 0, worst = 0;
    for (std::size_t j = 0; j < g.size(); ++j) {
      scale = std::max(scale, double(std::fabs(whole[i][j])));
      worst = std::max(worst, double(std::fabs(g[j] - whole[i][j])));
    }
    EXPECT_LE(worst, 1e-5 * (1 + scale)) << "parameter " << i;
  }
}

TEST_P(TransformerTest, GenerationIsSeededAndStaysInTheVocabulary) {
  nn::gpt m(dev(), tiny());
  const auto a = m.generate({1, 2, 3}, 12, {.temperature = 0.9, .top_k = 4, .seed = 7});
  const auto b = m.generate({1, 2, 3}, 12, {.temperature = 0.9, .top_k = 4, .seed = 7});
  ASSERT_EQ(a.size(), 15u);
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::vector<std::int64_t>(a.begin(), a.begin() + 3),
            (std::vector<std::int64_t>{1, 2, 3}));
  for (std::int64_t t : a) EXPECT_TRUE(t >= 0 && t < 11) << t;
  EXPECT_TRUE(m.is_training());  // generate restores the mode
  EXPECT_THROW(m.generate({}, 3), kiln::invalid_argument);
  EXPECT_THROW(m.generate({11}, 3), kiln::invalid_argument);
  EXPECT_THROW(m.generate({1}, 3, {.temperature = 0}), kiln::invalid_argument);
}

TEST_P(TransformerTest, BadInputGetsClearErrors) {
  nn::gpt m(dev(), tiny());
  const auto ids = [&](std::int64_t b, std::int64_t t, std::int64_t v) {
    return kiln::tensor::from(dev(), std::vector<std::int64_t>(std::size_t(b * t), v), {b, t});
  };
  EXPECT_THROW(m(ids(1, 9, 0)), kiln::shape_error);  // longer than block_size
  EXPECT_THROW(m(kiln::tensor::from(dev(), std::vector<std::int64_t>{1, 2})), kiln::shape_error);
  // Outside the vocabulary: at once on the CPU backend; on accelerators a later call reports
  // it (the check is deferred so that a forward never waits for the device).
  EXPECT_THROW(
      {
        m(ids(1, 4, 11));
        for (int i = 0; i < 3; ++i) m(ids(1, 4, 0));
      },
      kiln::invalid_argument);
  EXPECT_THROW(m.loss(ids(1, 4, 0), ids(1, 5, 0)), kiln::shape_error);
  nn::gpt_config c = tiny();
  c.n_head = 3;
  EXPECT_THROW(nn::gpt(dev(), c), kiln::invalid_argument);
  c = tiny();
  c.vocab_size = 0;
  EXPECT_THROW(nn::gpt(dev(), c), kiln::invalid_argument);
  c = tiny();
  c.dropout = 1;
  EXPECT_THROW(nn::gpt(dev(), c), kiln::invalid_argument);
}

}  // namespace
}  // namespace autograd_test
