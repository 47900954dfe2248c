// The GPT block and model of kiln/nn/transformer.hpp.
#include "kiln/nn/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "kiln/error.hpp"
#include "kiln/nn/init.hpp"
#include "kiln/nn/loss.hpp"
#include "kiln/tensor/autograd.hpp"
#include "kiln/tensor/linear.hpp"

namespace kiln::nn {
namespace {

// The configuration's seed sequence: explicit seeds count up from cfg.seed (so a model is the
// same whatever was initialised before it), else nn::manual_seed's sequence.
struct seeds {
  std::uint64_t base;
  std::uint64_t k = 0;
  std::uint64_t next() { return base ? base + k++ : next_seed(); }
};

void check_config(const gpt_config& c) {
  if (c.vocab_size <= 0 || c.block_size <= 0 || c.n_layer <= 0 || c.n_head <= 0 || c.n_embd <= 0)
    throw invalid_argument(
        "kiln::nn::gpt: vocab_size, block_size, n_layer, n_head and n_embd "
        "must be positive");
  if (c.n_embd % c.n_head != 0)
    throw invalid_argument("kiln::nn::gpt: n_embd " + std::to_string(c.n_embd) +
                           " is not a multiple of n_head " + std::to_string(c.n_head));
  if (!(c.dropout >= 0 && c.dropout < 1))
    throw invalid_argument("kiln::nn::gpt: dropout must be in [0, 1)");
}

// The MLP of a block: c_proj(gelu(c_fc(x))), the GELU in c_fc's product (kiln::linear).
class block_mlp : public module {
 public:
  block_mlp(const device& dev, const gpt_config& c, seeds& s) {
    c_fc =
        register_module("c_fc", linear(dev, c.n_embd, 4 * c.n_embd, {c.bias, c.dtype, s.next()}));
    c_proj =
        register_module("c_proj", linear(dev, 4 * c.n_embd, c.n_embd, {c.bias, c.dtype, s.next()}));
  }
  tensor forward(const tensor& x) const override {
    return c_proj->forward(kiln::linear(x, c_fc->weight, c_fc->bias, "gelu"));
  }
  std::string describe() const override { return "mlp"; }
  std::shared_ptr<linear> c_fc, c_proj;
};

// A module list: children "0", "1", ... (forward is unused: the owner runs them).
class module_list : public sequential {
 public:
  std::string describe() const override { return "module_list"; }
};

}  // namespace

transformer_block::transformer_block(const device& dev, const gpt_config& c) {
  check_config(c);
  seeds s{c.seed};
  const norm_options norm{true, c.bias, c.dtype};
  ln_1 = register_module("ln_1", layer_norm(dev, {c.n_embd}, 1e-5, norm));
  attn = register_module(
      "attn", multi_head_attention(dev, c.n_embd, c.n_head, {c.bias, true, c.dtype, s.next()}));
  ln_2 = register_module("ln_2", layer_norm(dev, {c.n_embd}, 1e-5, norm));
  auto m = register_module("mlp", block_mlp(dev, c, s));
  mlp = m;
  c_fc = m->c_fc;
  c_proj = m->c_proj;
  if (c.dropout > 0) drop = std::make_shared<dropout>(c.dropout, s.next());
}

tensor transformer_block::forward(const tensor& x) const {
  auto residual = [&](const tensor& branch) {
    return drop && is_training() ? drop->forward(branch) : branch;
  };
  const tensor y = x + residual(attn->forward(ln_1->forward(x)));
  return y + residual(mlp->forward(ln_2->forward(y)));
}

std::string transformer_block::describe() const {
  return "transformer_block(" + std::to_string(attn->embed_dim) + ", heads " +
         std::to_string(attn->num_heads) + ")";
}

gpt::gpt(const device& dev, const gpt_config& c) : cfg_(c), dev_(dev) {
  check_config(c);
  seeds s{c.seed};
  const layer_options plain{false, c.dtype, 0};
  wte = register_module("wte", embedding(dev, c.vocab_size, c.n_embd, plain));
  wpe = register_module("wpe", embedding(dev, c.block_size, c.n_embd, plain));
  module_list blocks;
  for (std::int64_t i = 0; i < c.n_layer; ++i) {
    gpt_config bc = c;
    bc.seed = s.next();
    blocks.push_back(std::make_shared<transformer_block>(dev, bc));
  }
  auto list = register_module("h", std::move(blocks));
  for (std::size_t i = 0; i < list->size(); ++i)
    h.push_back(std::static_pointer_cast<transformer_block>(list->children()[i].second));
  ln_f = register_module("ln_f", layer_norm(dev, {c.n_embd}, 1e-5, {true, c.bias, c.dtype}));
  if (!c.tied_head)
    lm_head = register_module("lm_head", linear(dev, c.n_embd, c.vocab_size, plain));

  // nanoGPT's initialisation (GPT-2's): N(0, 0.02), residual projections scaled by depth.
  const double proj_std = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  for (const auto& [name, p] : named_parameters()) {
    if (name.find("ln_") != std::string::npos) continue;  // layer norms: ones and zeros already
    if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      init::zeros_(p);
      continue;
    }
    const bool residual = name.find("c_proj.weight") != std::string::npos ||
                          name.find("out_proj.weight") != std::string::npos;
    init::normal_(p, 0.0, residual ? proj_std : 0.02, s.next());
  }
  if (c.dropout > 0) drop_ = std::make_shared<dropout>(c.dropout, s.next());
}

tensor gpt::forward(const tensor& tokens) const {
  if (tokens.dim() != 2)
    throw shape_error("kiln::nn::gpt: tokens must be [batch, T], got rank " +
                      std::to_string(tokens.dim()));
  const std::int64_t t = tokens.size(1);
  if (t > cfg_.block_size || t < 1)
    throw shape_error("kiln::nn::gpt: " + std::to_string(t) +
                      " tokens, but the model's context "
                      "(block_size) is " +
                      std::to_string(cfg_.block_size));
  // Positions 0..T-1 are wpe's first T rows: a view, so no index check or gather per call.
  tensor x = wte->forward(tokens) + wpe->weight.slice(0, 0, t);
  if (drop_ && is_training()) x = drop_->forward(x);
  for (const auto& b : h) x = b->forward(x);
  x = ln_f->forward(x);
  return kiln::linear(x, lm_head ? lm_head->weight : wte->weight);
}

tensor gpt::loss(const tensor& tokens, const tensor& targets) const {
  const tensor logits = forward(tokens);
  if (targets.shape() != tokens.shape())
    throw shape_error("kiln::nn::gpt::loss: targets must have the tokens' shape");
  const std::int64_t n = tokens.numel();
  return cross_entropy(logits.reshape({n, cfg_.vocab_size}), targets.reshape({n}));
}

std::vector<std::int64_t> gpt::generate(std::vector<std::int64_t> prompt, std::int64_t count,
                                        const sample_options& o) {
  if (prompt.empty()) throw invalid_argument("kiln::nn::gpt::generate: the prompt is empty");
  if (!(o.temperature > 0))
    throw invalid_argument("kiln::nn::gpt::generate: temperature must be positive");
  for (std::int64_t id : prompt)
    if (id < 0 || id >= cfg_.vocab_size)
      throw invalid_argument("kiln::nn::gpt::generate: prompt token " + std::to_string(id) +
                             " is outside the vocabulary of " + std::to_string(cfg_.vocab_size));
  const bool was_training = is_training();
  eval();
  no_grad off;
  std::mt19937_64 rng(o.seed);
  for (std::int64_t k = 0; k < count; ++k) {
    const std::size_t ctx = std::min<std::size_t>(prompt.size(), std::size_t(cfg_.block_size));
    const std::vector<std::int64_t> window(prompt.end() - std::ptrdiff_t(ctx), prompt.end());
    const tensor ids = tensor::from(dev_, window, {1, std::int64_t(ctx)});
    // The last position's distribution, read back (the host samples: one small read per token).
    const tensor last = forward(ids).slice(1, std::int64_t(ctx) - 1, std::int64_t(ctx));
    std::vector<double> p =
        (last.to(scalar_type::f64) / o.temperature).softmax(-1).contiguous().to_vector<double>();
    if (o.top_k > 0 && o.top_k < std::int64_t(p.size())) {
      std::vector<double> sorted = p;
      std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                       std::greater<>());
      const double cut = sorted[std::size_t(o.top_k - 1)];
      for (double& v : p)
        if (v < cut) v = 0;
    }
    std::discrete_distribution<std::int64_t> pick(p.begin(), p.end());
    prompt.push_back(pick(rng));
  }
  train(was_training);
  return prompt;
}

std::string gpt::describe() const {
  return "gpt(vocab " + std::to_string(cfg_.vocab_size) + ", context " +
         std::to_string(cfg_.block_size) + ", " + std::to_string(cfg_.n_layer) + " layers, " +
         std::to_string(cfg_.n_head) + " heads, width " + std::to_string(cfg_.n_embd) + ")";
}

}  // namespace kiln::nn
