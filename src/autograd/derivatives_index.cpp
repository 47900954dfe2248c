// Gradients of the indexing operations: index_select / embedding sum back into rows by a device
// sort of the indices (no host wait); gather and scatter_add are each other's transposes; cat's
// pieces are views of the gradient; a split's pieces place their gradients into one shared
// gradient of the input.
#include "autograd/derivatives_index.hpp"

namespace kiln::detail::grad {

tensor index_select(const tensor& x, int dim, const sort_keyed_index& index, const tensor& out) {
  const shape_t xs = x.shape();
  return autograd::record("index_select", out, {x},
                          [xs, dim, index](const tensor& g, const tensor&) -> std::vector<tensor> {
                            return {index_add_rows(g, dim, index, xs)};
                          });
}

tensor gather(const tensor& x, int dim, const tensor& index, const tensor& out) {
  const shape_t xs = x.shape();
  return autograd::record("gather", out, {x},
                          [xs, dim, index](const tensor& g, const tensor&) -> std::vector<tensor> {
                            return {scatter_add_into(tensor(), dim, index, g, xs)};
                          });
}

tensor scatter_add(const tensor& x, int dim, const tensor& index, const tensor& src,
                   const tensor& out) {
  const bool want_src = needs_grad(src.impl().get());
  if (want_src && src.shape() != index.shape())
    throw invalid_argument("kiln::scatter_add: the gradient of src needs src's shape " +
                           to_string(src.shape()) + " to equal index's " +
                           to_string(index.shape()) + " (as PyTorch)");
  return autograd::record(
      "scatter_add", out, {x, src},
      [dim, index, want_src](const tensor& g, const tensor&) -> std::vector<tensor> {
        return {g, want_src ? kiln::gather(g, dim, index) : tensor()};
      });
}

tensor cat(const std::vector<tensor>& xs, int dim, const tensor& out) {
  std::vector<std::int64_t> sizes;
  for (const tensor& x : xs) sizes.push_back(x.size(dim));
  return autograd::record("cat", out, xs,
                          [sizes, dim](const tensor& g, const tensor&) -> std::vector<tensor> {
                            std::vector<tensor> r;
                            std::int64_t at = 0;
                            for (std::int64_t n : sizes) {
                              r.push_back(g.slice(dim, at, at + n));
                              at += n;
                            }
                            return r;
                          });
}

tensor split_piece(const tensor& x, int dim, std::int64_t start, const tensor& out,
                   std::shared_ptr<split_gradient> shared) {
  const shape_t xs = x.shape();
  const scalar_type t = x.dtype();
  return autograd::record(
      "split", out, {x},
      [xs, t, dim, start, shared](const tensor& g, const tensor&) -> std::vector<tensor> {
        const std::uint64_t pass = backward_pass();  // backward runs only inside a sweep
        const bool first = shared->pass != pass;
        if (first) {
          shared->pass = pass;
          shared->buffer = tensor::zeros(g.get_device(), xs, t).eval();
        }
        place_along(shared->buffer, g.dtype() == t ? g : g.to(t), dim, start);
        return {first ? shared->buffer : tensor()};
      });
}

}  // namespace kiln::detail::grad
