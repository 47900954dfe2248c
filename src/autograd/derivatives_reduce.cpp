// Gradients of reductions (sum, mean, max, min, var, std, norm, softmax) and of views. A
// reduction's gradient is the output gradient put back in keepdim form and broadcast over the
// reduced axes; a view's is the inverse view of the gradient.
#include <cmath>

#include "autograd/derivatives.hpp"
#include "kiln/tensor/linalg.hpp"
#include "tensor/shape.hpp"

namespace kiln::detail::grad {
namespace {

// x's shape with each reduced axis set to 1 (what keepdim gives).
shape_t kept_shape(const shape_t& xs, const axes& a) {
  shape_t k = xs;
  const int rank = static_cast<int>(xs.size());
  if (a.list.empty()) {
    for (auto& d : k) d = 1;
  } else {
    for (int d : a.list) k[std::size_t(normalise_axis(d, rank, "backward"))] = 1;
  }
  return k;
}

// The number of elements folded per result, in g's dtype.
double folded(const shape_t& xs, const shape_t& kept) {
  return double(numel_of(xs)) / double(std::max<std::int64_t>(numel_of(kept), 1));
}

tensor sign(const tensor& x) { return (x > 0).to(x.dtype()) - (x < 0).to(x.dtype()); }

// g (the reduction's output gradient) and out in keepdim form.
tensor kept(const tensor& t, const shape_t& k) { return t.shape() == k ? t : t.reshape(k); }

// Gradient spread evenly over the elements equal to the extreme (PyTorch's amax/amin rule).
tensor to_extremes(const tensor& g, const tensor& v, const tensor& ext, const shape_t& xs,
                   const axes& a) {
  const tensor hit = (v == ext).to(g.dtype());
  (void)xs;
  return g * hit / hit.sum(a, true);
}

}  // namespace

tensor reduction(const std::string& name, const tensor& x, const axes& a, bool keepdim,
                 std::int64_t correction, const tensor& out) {
  const shape_t xs = x.shape(), k = kept_shape(xs, a);
  (void)keepdim;
  return autograd::record(
      name, out, {x}, [name, x, a, xs, k, correction](const tensor& g0, const tensor& y) {
        const tensor g = kept(g0, k);
        std::vector<tensor> r(1);
        if (name == "sum") {
          r[0] = g.expand(xs);
        } else if (name == "mean") {
          r[0] = g.expand(xs) * lit(g, 1 / folded(xs, k));
        } else if (name == "max" || name == "min") {
          r[0] = to_extremes(g, x, kept(y, k), xs, a);
        } else {  // var, std: d var / dx = 2 (x - mean) / (N - correction)
          const double dof = std::max<double>(folded(xs, k) - double(correction), 0);
          const tensor xt = x.dtype() == g.dtype() ? x : x.to(g.dtype());
          const tensor gv = name == "std" ? g / (kept(y, k) * lit(g, 2)) : g;
          r[0] = gv * (xt - xt.mean(a, true)) * lit(g, 2 / dof);
        }
        return r;
      });
}

tensor norm(const tensor& x, double p, const axes& a, bool keepdim, const tensor& out) {
  (void)keepdim;
  const shape_t xs = x.shape(), k = kept_shape(xs, a);
  return autograd::record("norm", out, {x}, [x, p, a, xs, k](const tensor& g0, const tensor& y) {
    const tensor g = kept(g0, k), n = kept(y, k);
    const tensor xt = x.dtype() == g.dtype() ? x : x.to(g.dtype());
    std::vector<tensor> r(1);
    const tensor zero = lit(g, 0);
    if (p == 0) {
      r[0] = tensor::zeros(g.get_device(), xs, g.dtype());
    } else if (p == 1) {
      r[0] = g * sign(xt);
    } else if (std::isinf(p)) {
      r[0] = sign(xt) * to_extremes(g, abs(xt), n, xs, a);
    } else if (p == 2) {
      r[0] = where(n == zero, zero, g / n) * xt;
    } else {
      r[0] = where(n == zero, zero, g / pow(n, lit(g, p - 1))) * sign(xt) *
             pow(abs(xt), lit(g, p - 1));
    }
    return r;
  });
}

tensor softmax(const tensor& x, int dim, bool log, const tensor& out) {
  return autograd::record(log ? "log_softmax" : "softmax", out, {x},
                          [dim, log](const tensor& g, const tensor& y) -> std::vector<tensor> {
                            if (log) return {g - exp(y) * g.sum(dim, true)};
                            return {y * (g - (g * y).sum(dim, true))};
                          });
}

tensor reshape_view(const char* name, const tensor& x, const tensor& out) {
  const shape_t xs = x.shape();
  return autograd::record(
      name, out, {x},
      [xs](const tensor& g, const tensor&) -> std::vector<tensor> { return {g.reshape(xs)}; });
}

tensor permute_view(const tensor& x, const std::vector<int>& dims, const tensor& out) {
  std::vector<int> inverse(dims.size());
  const int rank = static_cast<int>(dims.size());
  for (int i = 0; i < rank; ++i)
    inverse[std::size_t(normalise_axis(dims[std::size_t(i)], rank, "permute"))] = i;
  return autograd::record("permute", out, {x},
                          [inverse](const tensor& g, const tensor&) -> std::vector<tensor> {
                            return {g.permute(inverse)};
                          });
}

tensor expand_view(const tensor& x, const tensor& out) {
  const shape_t xs = x.shape();
  return autograd::record("expand", out, {x},
                          [xs](const tensor& g, const tensor&) -> std::vector<tensor> {
                            return {autograd::sum_to(g, xs)};
                          });
}

// The slice's gradient is g scattered into zeros: a product with the 0/1 selection matrix
// S [len, size] (S[i][start + i step] = 1) along the sliced dimension, which every backend
// runs without a scatter kernel; O(elements x size) work, fine off the hot path.
tensor slice_view(const tensor& x, int dim, std::int64_t start, std::int64_t step,
                  const tensor& out) {
  const shape_t xs = x.shape();
  const int d = normalise_axis(dim, static_cast<int>(xs.size()), "slice");
  return autograd::record(
      "slice", out, {x},
      [xs, d, start, step](const tensor& g, const tensor&) -> std::vector<tensor> {
        const std::int64_t size = xs[std::size_t(d)], len = g.size(d);
        const device& dev = g.get_device();
        if (len == 0) return {tensor::zeros(dev, xs, g.dtype())};
        const tensor src =
            tensor::arange(dev, 0, double(len), 1, scalar_type::i64) * std::int64_t(step) +
            std::int64_t(start);
        const tensor sel =
            (tensor::arange(dev, 0, double(size), 1, scalar_type::i64) == src.eval().unsqueeze(1))
                .to(g.dtype());
        const int last = g.dim() - 1;
        tensor moved = g.transpose(d, last);
        return {matmul(moved, sel).transpose(d, last).contiguous()};
      });
}

}  // namespace kiln::detail::grad
