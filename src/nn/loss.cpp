// Losses: mse and binary cross-entropy as tensor expressions (autograd differentiates them);
// cross-entropy as one recorded function with PyTorch's closed-form gradient.
#include "kiln/nn/loss.hpp"

#include <vector>

#include "tensor/autocast_rules.hpp"
#include "tensor/deferred_check.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::nn {
namespace {

// cross_entropy's label-range check: at once on the CPU backend; on accelerators without a
// host wait, reported by a later call (tensor/deferred_check.hpp), as a GPU framework's
// device-side assert: reading it back at once would stop the host every training step.
void check_labels(const tensor& y, std::int64_t c) {
  const tensor bad = ((y < std::int64_t(0)) + (y >= c)).sum().to(scalar_type::i64);
  const auto what = [c](std::int64_t n) {
    return "kiln::nn::cross_entropy: " + std::to_string(n) + " label(s) outside [0, " +
           std::to_string(c) + ")";
  };
  if (y.get_device().info().type == device_type::cpu || !detail::defer_count_check(bad, what))
    if (const std::int64_t n = bad.item<std::int64_t>()) throw invalid_argument(what(n));
}

tensor reduce(const tensor& l, const std::string& reduction, const char* fn) {
  if (reduction == "mean") return l.mean();
  if (reduction == "sum") return l.sum();
  if (reduction == "none") return l;
  throw invalid_argument(std::string("kiln::nn::") + fn +
                         ": reduction must be \"mean\", \"sum\" or \"none\", not \"" + reduction +
                         "\"");
}

void check_float(const tensor& t, const char* fn, const char* name) {
  if (!t.defined())
    throw invalid_argument(std::string("kiln::nn::") + fn + ": " + name + " is undefined");
  if (t.dtype() != scalar_type::f32 && t.dtype() != scalar_type::f64)
    throw dtype_error(std::string("kiln::nn::") + fn + ": " + name + " must be f32 or f64, got " +
                      type_name(t.dtype()));
}

bool is_integer(scalar_type t) {
  switch (t) {
    case scalar_type::i8:
    case scalar_type::i16:
    case scalar_type::i32:
    case scalar_type::i64:
    case scalar_type::u8:
    case scalar_type::u16:
    case scalar_type::u32:
    case scalar_type::u64: return true;
    default: return false;
  }
}

}  // namespace

// Losses compute in f32 from 16-bit inputs (autocast's rule; the cast carries the gradient).
using kiln::detail::widen_reduced;

tensor mse_loss(const tensor& input0, const tensor& target0, const std::string& reduction) {
  const tensor input = widen_reduced(input0), target = widen_reduced(target0);
  check_float(input, "mse_loss", "input");
  check_float(target, "mse_loss", "target");
  return reduce(square(input - target), reduction, "mse_loss");
}

tensor binary_cross_entropy_with_logits(const tensor& logits0, const tensor& targets0,
                                        const std::string& reduction) {
  const tensor logits = widen_reduced(logits0), targets = widen_reduced(targets0);
  check_float(logits, "binary_cross_entropy_with_logits", "logits");
  check_float(targets, "binary_cross_entropy_with_logits", "targets");
  if (logits.shape() != targets.shape())
    throw shape_error("kiln::nn::binary_cross_entropy_with_logits: logits " +
                      to_string(logits.shape()) + " and targets " + to_string(targets.shape()) +
                      " differ");
  const tensor l = relu(logits) - logits * targets + log(exp(-abs(logits)) + 1.0f);
  return reduce(logits.dtype() == scalar_type::f64 ? l : l.to(logits.dtype()), reduction,
                "binary_cross_entropy_with_logits");
}

tensor cross_entropy(const tensor& logits0, const tensor& labels, const std::string& reduction) {
  const tensor logits = widen_reduced(logits0);
  const char* fn = "cross_entropy";
  check_float(logits, fn, "logits");
  if (!labels.defined()) throw invalid_argument("kiln::nn::cross_entropy: labels are undefined");
  if (!is_integer(labels.dtype()))
    throw dtype_error(std::string("kiln::nn::cross_entropy: labels must be integers, got ") +
                      type_name(labels.dtype()));
  if (logits.dim() != 2 || labels.dim() != 1 || labels.size(0) != logits.size(0))
    throw shape_error("kiln::nn::cross_entropy: expects logits [N, C] and labels [N], got " +
                      to_string(logits.shape()) + " and " + to_string(labels.shape()));
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    reduce(logits, reduction, fn);
  const std::int64_t n = logits.size(0), c = logits.size(1);
  const scalar_type t = logits.dtype();
  tensor one_hot, out;
  {
    no_grad off;
    const tensor y = labels.to(scalar_type::i64);
    if (n > 0) check_labels(y, c);
    one_hot = (tensor::arange(logits.get_device(), 0, double(c), 1, scalar_type::i64) ==
               y.reshape({n, 1}))
                  .to(t);
    const tensor per_row = -(logits.log_softmax(1) * one_hot).sum(1);
    out = reduction == "mean" ? per_row.mean() : reduction == "sum" ? per_row.sum() : per_row;
  }
  const double scale = reduction == "mean" && n > 0 ? 1.0 / double(n) : 1.0;
  const bool per_row = reduction == "none";
  return autograd::record(
      "cross_entropy", out, {logits, labels},
      [logits, one_hot, scale, per_row, n](const tensor& g, const tensor&) -> std::vector<tensor> {
        // d loss / d logits = (softmax(logits) - one_hot) * g (per row, or the scalar) * scale
        const tensor gg = per_row ? g.reshape({n, 1}) : g;
        const tensor s = g.dtype() == scalar_type::f64 ? gg * scale : gg * float(scale);
        return {(logits.softmax(1) - one_hot) * s, tensor()};
      });
}

}  // namespace kiln::nn
