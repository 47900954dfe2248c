// batch_norm and its backward, composed from tensor operations: per-channel statistics are
// reductions over every dimension but 1, the normalisation one fused elementwise kernel (lazy,
// so what reads it fuses too). Scalars are captured in the input's dtype, so f32 work never
// needs fp64.
#include <algorithm>
#include <string>

#include "autograd/derivatives.hpp"
#include "kiln/tensor/inplace.hpp"
#include "kiln/tensor/normalization.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

// v as a captured scalar of like's dtype.
tensor lit(const tensor& like, double v) {
  return like.dtype() == scalar_type::f64
             ? detail::scalar_like(like, scalar_type::f64, detail::bits_of(v))
             : detail::scalar_like(like, scalar_type::f32, detail::bits_of(float(v)));
}

struct channels {
  std::int64_t c;
  std::vector<int> axes;  // every dimension but 1
  shape_t view;           // [1, C, 1, ...]: a [C] operand broadcast over the input
};

channels check_input(const char* fn, const tensor& x) {
  if (!x.impl()) throw invalid_argument(std::string("kiln::") + fn + ": input is undefined");
  if (x.dim() < 2)
    throw shape_error(std::string("kiln::") + fn + ": expects an input [N, C, ...], got " +
                      to_string(x.shape()));
  const scalar_type t = x.dtype();
  if (t != scalar_type::f32 && t != scalar_type::f64)
    throw dtype_error(std::string("kiln::") + fn + ": input has dtype " + type_name(t) +
                      "; only float and double are supported");
  channels ch{x.size(1), {}, shape_t(static_cast<std::size_t>(x.dim()), 1)};
  for (int d = 0; d < x.dim(); ++d)
    if (d != 1) ch.axes.push_back(d);
  ch.view[1] = ch.c;
  return ch;
}

// A per-channel operand: undefined allowed unless required; else [C], the input's dtype and
// device.
void check_channel(const char* fn, const char* name, const tensor& t, const tensor& x,
                   const channels& ch, bool required) {
  if (!t.impl()) {
    if (required)
      throw invalid_argument(std::string("kiln::") + fn + ": " + name + " is required here");
    return;
  }
  if (t.shape() != shape_t{ch.c})
    throw shape_error(std::string("kiln::") + fn + ": " + name + " must be [C] = [" +
                      std::to_string(ch.c) + "] for input " + to_string(x.shape()) + "; got " +
                      to_string(t.shape()));
  if (t.dtype() != x.dtype())
    throw dtype_error(std::string("kiln::") + fn + ": " + name + " is " + type_name(t.dtype()) +
                      ", the input " + type_name(x.dtype()));
  if (!(t.get_device() == x.get_device()))
    throw device_mismatch(std::string("kiln::") + fn + ": " + name + " is on " +
                          t.get_device().id() + ", the input on " + x.get_device().id());
}

}  // namespace

namespace {
batch_norm_result batch_norm_forward(const tensor& input, const tensor& weight, const tensor& bias,
                                     const tensor& running_mean, const tensor& running_var,
                                     bool training, double momentum, double eps) {
  const char* fn = "batch_norm";
  const channels ch = check_input(fn, input);
  check_channel(fn, "weight", weight, input, ch, false);
  check_channel(fn, "bias", bias, input, ch, false);
  check_channel(fn, "running_mean", running_mean, input, ch, !training);
  check_channel(fn, "running_var", running_var, input, ch, !training);
  if (!(eps > 0))
    throw invalid_argument("kiln::batch_norm: eps is " + std::to_string(eps) +
                           "; it must be positive");
  if (running_mean.impl() != nullptr && running_var.impl() == nullptr)
    throw invalid_argument("kiln::batch_norm: running_mean given without running_var");
  batch_norm_result r;
  if (training) {
    const std::int64_t m = ch.c ? input.numel() / ch.c : 0;
    if (m <= 1)
      throw shape_error(
          "kiln::batch_norm: training needs more than one value per channel; "
          "input " +
          to_string(input.shape()) + " has " + std::to_string(m));
    r.mean = input.mean(ch.axes);
    r.mean.eval();
    const tensor var = input.var(ch.axes, 0);  // biased, as the normalisation uses
    var.eval();
    r.invstd = rsqrt(var + lit(input, eps));
    r.invstd.eval();
    if (running_mean.impl()) {
      const tensor keep = lit(input, 1 - momentum), take = lit(input, momentum);
      copy_(running_mean, running_mean * keep + r.mean * take);
      copy_(running_var, running_var * keep + var * lit(input, momentum * double(m) / (m - 1)));
    }
  } else {
    r.mean = running_mean;
    r.invstd = rsqrt(running_var + lit(input, eps));
    r.invstd.eval();
  }
  tensor y = (input - r.mean.view(ch.view)) * r.invstd.view(ch.view);
  if (weight.impl()) y = y * weight.view(ch.view);
  if (bias.impl()) y = y + bias.view(ch.view);
  r.output = y;
  return r;
}
}  // namespace

batch_norm_result batch_norm(const tensor& input, const tensor& weight, const tensor& bias,
                             const tensor& running_mean, const tensor& running_var, bool training,
                             double momentum, double eps) {
  // A 16-bit input (an autocast model's convolution output): normalised in f32, statistics and
  // running statistics f32, the output rounded back to the input's type (PyTorch's rule). The
  // casts are recorded, so gradients flow back in the input's type.
  if (input.impl() && is_reduced_float(input.dtype())) {
    const auto f32 = [](const tensor& t) {
      return t.impl() && is_reduced_float(t.dtype()) ? t.to(scalar_type::f32) : t;
    };
    batch_norm_result r = batch_norm(input.to(scalar_type::f32), f32(weight), f32(bias),
                                     running_mean, running_var, training, momentum, eps);
    r.output = r.output.to(input.dtype());
    return r;
  }
  if (!detail::grad_wanted({&input, &weight, &bias}))
    return batch_norm_forward(input, weight, bias, running_mean, running_var, training, momentum,
                              eps);
  batch_norm_result r;
  {
    no_grad off;
    r = batch_norm_forward(input, weight, bias, running_mean, running_var, training, momentum, eps);
  }
  r.output = detail::grad::batch_norm(input, weight, bias, r, training);
  return r;
}

batch_norm_grads batch_norm_backward(const tensor& grad_output, const tensor& input,
                                     const tensor& weight, const tensor& mean, const tensor& invstd,
                                     bool training) {
  const char* fn = "batch_norm_backward";
  const channels ch = check_input(fn, input);
  if (!grad_output.impl())
    throw invalid_argument("kiln::batch_norm_backward: grad_output is undefined");
  if (grad_output.shape() != input.shape())
    throw shape_error("kiln::batch_norm_backward: grad_output " + to_string(grad_output.shape()) +
                      " and input " + to_string(input.shape()) + " differ");
  if (grad_output.dtype() != input.dtype())
    throw dtype_error("kiln::batch_norm_backward: grad_output is " +
                      std::string(type_name(grad_output.dtype())) + ", the input " +
                      type_name(input.dtype()));
  check_channel(fn, "weight", weight, input, ch, false);
  check_channel(fn, "mean", mean, input, ch, true);
  check_channel(fn, "invstd", invstd, input, ch, true);
  const tensor& dy = grad_output;
  const tensor is = invstd.view(ch.view);
  const tensor xhat = (input - mean.view(ch.view)) * is;
  batch_norm_grads g;
  const tensor db = dy.sum(ch.axes);
  const tensor dxhat = (dy * xhat).sum(ch.axes);  // = dL/dweight
  db.eval();
  dxhat.eval();
  const tensor scale = weight.impl() ? is * weight.view(ch.view) : is;
  if (training) {
    // dx = w invstd (dy - mean(dy) - xhat mean(dy xhat)), the means over each channel.
    const tensor inv_m = lit(input, 1.0 / double(input.numel() / std::max<std::int64_t>(ch.c, 1)));
    g.input = scale * (dy - db.view(ch.view) * inv_m - xhat * (dxhat.view(ch.view) * inv_m));
  } else {
    g.input = dy * scale;
  }
  if (weight.impl()) {
    g.weight = dxhat;
    g.bias = db;
  }
  return g;
}

}  // namespace kiln
