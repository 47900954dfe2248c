// multi_head_attention: the packed input projection (one product for q, k and v in
// self-attention; the weight's row blocks for cross-attention), heads as a [B, H, T, D] view,
// scaled_dot_product_attention, and the output projection.
#include "kiln/nn/attention.hpp"

#include <string>

#include "kiln/nn/init.hpp"
#include "kiln/tensor/attention.hpp"
#include "kiln/tensor/indexing.hpp"
#include "kiln/tensor/linear.hpp"

namespace kiln::nn {
namespace {

// [B, T, E] -> [B, H, T, E / H]: a view when x is contiguous.
tensor heads(const tensor& x, std::int64_t h) {
  const std::int64_t b = x.size(0), t = x.size(1), e = x.size(2);
  return x.reshape({b, t, h, e / h}).transpose(1, 2);
}

void check_input(const char* what, const tensor& x, std::int64_t e) {
  if (!x.defined())
    throw invalid_argument(std::string("kiln::nn::multi_head_attention: ") + what +
                           " is undefined");
  if (x.dim() != 3 || x.size(2) != e)
    throw shape_error(std::string("kiln::nn::multi_head_attention: ") + what +
                      " must be [batch, tokens, " + std::to_string(e) + "], got " +
                      kiln::to_string(x.shape()));
}

}  // namespace

multi_head_attention::multi_head_attention(const device& dev, std::int64_t e, std::int64_t h,
                                           const attention_options& o)
    : embed_dim(e), num_heads(h), causal(o.causal) {
  if (e < 1 || h < 1 || e % h)
    throw invalid_argument("kiln::nn::multi_head_attention: embed_dim (" + std::to_string(e) +
                           ") must be a positive multiple of num_heads (" + std::to_string(h) +
                           ")");
  const std::uint64_t seed = o.seed ? o.seed : next_seed();
  tensor w = tensor::empty(dev, {3 * e, e}, o.dtype);
  init::xavier_uniform_(w, seed);
  in_proj_weight = register_parameter("in_proj_weight", w);
  if (o.bias)
    in_proj_bias = register_parameter("in_proj_bias", tensor::zeros(dev, {3 * e}, o.dtype));
  out_proj = register_module(
      "out_proj", linear(dev, e, e, {.bias = o.bias, .dtype = o.dtype, .seed = seed + 1}));
  if (o.bias) {
    no_grad off;
    init::zeros_(out_proj->bias);
  }
}

tensor multi_head_attention::attend(const tensor& q, const tensor& k, const tensor& v,
                                    const tensor& mask) const {
  check_input("query", q, embed_dim);
  check_input("key", k, embed_dim);
  check_input("value", v, embed_dim);
  if (k.size(0) != q.size(0) || v.size(0) != q.size(0) || k.size(1) != v.size(1))
    throw shape_error("kiln::nn::multi_head_attention: query " + kiln::to_string(q.shape()) +
                      ", key " + kiln::to_string(k.shape()) + " and value " +
                      kiln::to_string(v.shape()) + " differ in batch or key count");
  const std::int64_t e = embed_dim;
  auto block = [&](const tensor& x, std::int64_t i) {
    const tensor b = in_proj_bias.defined() ? in_proj_bias.slice(0, i * e, (i + 1) * e) : tensor{};
    return kiln::linear(x, in_proj_weight.slice(0, i * e, (i + 1) * e), b);
  };
  tensor qh, kh, vh;
  if (q.impl() == k.impl() && k.impl() == v.impl()) {  // self-attention: one product
    const std::vector<tensor> qkv = split(kiln::linear(q, in_proj_weight, in_proj_bias), e, 2);
    qh = heads(qkv[0], num_heads), kh = heads(qkv[1], num_heads), vh = heads(qkv[2], num_heads);
  } else {
    qh = heads(block(q, 0), num_heads), kh = heads(block(k, 1), num_heads);
    vh = heads(block(v, 2), num_heads);
  }
  const tensor y = scaled_dot_product_attention(qh, kh, vh, mask, causal && !mask.defined());
  // [B, H, L, D] -> [B, L, E]
  return out_proj->forward(y.transpose(1, 2).reshape({q.size(0), q.size(1), e}));
}

tensor multi_head_attention::forward(const tensor& x) const { return attend(x, x, x); }

std::string multi_head_attention::describe() const {
  return "multi_head_attention(" + std::to_string(embed_dim) + ", heads " +
         std::to_string(num_heads) + (causal ? ", causal" : "") + ")";
}

}  // namespace kiln::nn
