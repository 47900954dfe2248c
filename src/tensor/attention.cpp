// scaled_dot_product_attention composed of matmul, the masked scale and softmax, and matmul:
// three launches for the forward (the products are fusion boundaries; the scale, the mask and
// the softmax fuse into one row kernel), and autograd through the same ops.
#include "kiln/tensor/attention.hpp"

#include <cmath>
#include <limits>
#include <string>

#include "kiln/tensor/indexing.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {

tensor scaled_dot_product_attention(const tensor& q, const tensor& k, const tensor& v,
                                    const tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale) {
  const char* fn = "kiln::scaled_dot_product_attention";
  detail::check_float_operands("scaled_dot_product_attention", {{"q", &q}, {"k", &k}, {"v", &v}},
                               true);
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    throw shape_error(std::string(fn) + ": q, k and v need at least 2 dimensions, got " +
                      to_string(q.shape()) + ", " + to_string(k.shape()) + ", " +
                      to_string(v.shape()));
  if (q.size(-1) != k.size(-1))
    throw shape_error(std::string(fn) + ": q and k differ in their last size (" +
                      to_string(q.shape()) + " and " + to_string(k.shape()) + ")");
  if (k.size(-2) != v.size(-2))
    throw shape_error(std::string(fn) + ": k and v differ in their number of keys (" +
                      to_string(k.shape()) + " and " + to_string(v.shape()) + ")");
  if (attn_mask.defined() && is_causal)
    throw invalid_argument(std::string(fn) + ": pass attn_mask or is_causal, not both");
  if (attn_mask.defined() && attn_mask.dtype() != scalar_type::boolean &&
      attn_mask.dtype() != q.dtype())
    throw dtype_error(std::string(fn) + ": attn_mask must be bool or " + type_name(q.dtype()) +
                      ", got " + type_name(attn_mask.dtype()));
  const std::int64_t queries = q.size(-2), keys = k.size(-2);
  const double s = scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
  if (!std::isfinite(s))
    throw invalid_argument(std::string(fn) + ": scale must be finite, got " + std::to_string(s));
  // The scores stay in q's dtype (a C++ scalar promotes: a double would turn f32 into f64, a
  // float bf16 into f32), as PyTorch's math path keeps them; the cast fuses into the kernel.
  const tensor product = matmul(q, k.transpose(-2, -1));
  tensor scores = q.dtype() == scalar_type::f64 ? product * s : (product * float(s)).to(q.dtype());
  const float minus_inf = -std::numeric_limits<float>::infinity();
  if (is_causal) {
    const tensor upper =
        triu(tensor::ones(q.get_device(), {queries, keys}, scalar_type::boolean), 1);
    scores = masked_fill(scores, upper, minus_inf);
  } else if (attn_mask.defined()) {
    scores = attn_mask.dtype() == scalar_type::boolean
                 ? masked_fill(scores, attn_mask == false, minus_inf)
                 : scores + attn_mask;
  }
  return matmul(scores.softmax(-1), v);
}

}  // namespace kiln
