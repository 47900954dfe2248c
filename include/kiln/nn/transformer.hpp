// Transformers in kiln::nn: the pre-norm block of GPT-2/nanoGPT and a character-level GPT.
// Parameter names follow PyTorch modules of the same structure (nn.LayerNorm, a batch-first
// nn.MultiheadAttention, nn.Linear), so a state_dict moves between the two:
//   wte.weight [V, C], wpe.weight [T, C],
//   h.<i>.ln_1.{weight,bias}, h.<i>.attn.{in_proj_weight,in_proj_bias,out_proj.weight,
//   out_proj.bias}, h.<i>.ln_2.{weight,bias}, h.<i>.mlp.c_fc.{weight,bias} [4C, C],
//   h.<i>.mlp.c_proj.{weight,bias} [C, 4C], ln_f.{weight,bias}, lm_head.weight (untied only).
//
//   kiln::nn::gpt_config cfg{.vocab_size = 96, .block_size = 256, .n_layer = 6, .n_head = 6,
//                            .n_embd = 384};
//   kiln::nn::gpt model(dev, cfg);
//   kiln::tensor logits = model(tokens);                  // tokens int64 [B, T] -> [B, T, V]
//   kiln::tensor loss = model.loss(tokens, targets);      // mean cross-entropy over B * T
//   std::vector<std::int64_t> more = model.generate(prompt, 200, {.temperature = 0.8});
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "kiln/nn/attention.hpp"
#include "kiln/nn/embedding.hpp"
#include "kiln/nn/layers.hpp"
#include "kiln/nn/normalization.hpp"

namespace kiln::nn {

struct gpt_config {
  std::int64_t vocab_size = 0;
  std::int64_t block_size = 256;  // the longest context (positions)
  std::int64_t n_layer = 6, n_head = 6, n_embd = 384;
  double dropout = 0;     // on the embeddings' sum and each residual branch (training only)
  bool bias = true;       // biases in linear layers and layer norms
  bool tied_head = true;  // lm_head shares wte's weight (nanoGPT's default)
  scalar_type dtype = scalar_type::f32;
  std::uint64_t seed = 0;  // 0: the next seeds of nn::manual_seed's sequence
};

// x + attn(ln_1(x)), then x + mlp(ln_2(x)) with mlp = c_proj(gelu(c_fc(.))) (erf GELU, as
// PyTorch's nn.GELU()); causal self-attention. x [batch, tokens, n_embd].
class transformer_block : public module {
 public:
  transformer_block(const device& dev, const gpt_config& c);
  tensor forward(const tensor& x) const override;
  std::string describe() const override;
  std::shared_ptr<layer_norm> ln_1, ln_2;
  std::shared_ptr<multi_head_attention> attn;
  std::shared_ptr<module> mlp;           // c_proj(gelu(c_fc(.)))
  std::shared_ptr<linear> c_fc, c_proj;  // mlp's children
  std::shared_ptr<dropout> drop;
};

struct sample_options {
  double temperature = 1.0;  // > 0; logits are divided by it
  std::int64_t top_k = 0;    // > 0: sample among the k likeliest tokens only
  std::uint64_t seed = 0;    // the sampling's random sequence
};

// GPT with learned positions (nanoGPT's shape). Initialised as nanoGPT: normal(0, 0.02)
// weights, residual projections (attn.out_proj, mlp.c_proj) normal(0, 0.02 / sqrt(2 n_layer)),
// zero biases, unit layer norms.
class gpt : public module {
 public:
  gpt(const device& dev, const gpt_config& c);
  // tokens int64 (or int32) [batch, T] with T <= block_size -> logits [batch, T, vocab_size].
  // kiln::shape_error for a longer T or another rank; ids outside the vocabulary are
  // kiln::invalid_argument (the embedding's check).
  tensor forward(const tensor& tokens) const override;
  // Mean cross-entropy of forward(tokens) against targets [batch, T].
  tensor loss(const tensor& tokens, const tensor& targets) const;
  // Appends `count` sampled tokens to the prompt (ids, at least one), each from the logits of
  // the last block_size tokens; runs in eval mode without recording. Returns prompt + new.
  std::vector<std::int64_t> generate(std::vector<std::int64_t> prompt, std::int64_t count,
                                     const sample_options& o = {});
  std::string describe() const override;
  const gpt_config& config() const noexcept { return cfg_; }
  std::shared_ptr<embedding> wte, wpe;
  std::vector<std::shared_ptr<transformer_block>> h;
  std::shared_ptr<layer_norm> ln_f;
  std::shared_ptr<linear> lm_head;  // null when tied to wte

 private:
  gpt_config cfg_;
  device dev_;
  std::shared_ptr<dropout> drop_;  // on the embeddings' sum; null without dropout
};

}  // namespace kiln::nn
