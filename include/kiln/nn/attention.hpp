// Multi-head attention of kiln::nn (torch.nn.MultiheadAttention with batch_first=True, no
// dropout): the parameters PyTorch's state_dict names — "in_proj_weight" [3E, E],
// "in_proj_bias" [3E], "out_proj.weight" [E, E], "out_proj.bias" [E] — so weights move between
// the two; heads through kiln::scaled_dot_product_attention.
//
//   kiln::nn::multi_head_attention mha(dev, 384, 6, {.causal = true});
//   kiln::tensor y = mha(x);                      // self-attention, x [batch, tokens, 384]
//   kiln::tensor z = mha.attend(q, kv, kv);       // cross-attention, any key/value length
#pragma once

#include <memory>

#include "kiln/nn/layers.hpp"

namespace kiln::nn {

struct attention_options {
  bool bias = true;     // in_proj_bias and out_proj.bias
  bool causal = false;  // forward(x): token i attends to tokens <= i
  scalar_type dtype = scalar_type::f32;
  std::uint64_t seed = 0;  // 0: the next seed of nn::manual_seed's sequence
};

class multi_head_attention : public module {
 public:
  // embed_dim a multiple of num_heads (else kiln::invalid_argument). Initialised as PyTorch:
  // in_proj_weight Xavier-uniform, out_proj.weight as a linear layer's, biases zero.
  multi_head_attention(const device& dev, std::int64_t embed_dim, std::int64_t num_heads,
                       const attention_options& o = {});
  // Self-attention over x [batch, tokens, embed_dim] (causal when the options say so).
  tensor forward(const tensor& x) const override;
  // query [batch, L, E], key and value [batch, S, E]; mask as scaled_dot_product_attention's
  // attn_mask ([L, S] bool: true attends); causal per the options when no mask is given.
  tensor attend(const tensor& query, const tensor& key, const tensor& value,
                const tensor& mask = {}) const;
  std::string describe() const override;
  tensor in_proj_weight, in_proj_bias;  // bias undefined without bias
  std::shared_ptr<linear> out_proj;
  std::int64_t embed_dim, num_heads;
  bool causal;
};

}  // namespace kiln::nn
