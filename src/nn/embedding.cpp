// nn::embedding: a parameter table read by kiln::embedding (whose backward is deterministic).
#include "kiln/nn/embedding.hpp"

#include "kiln/nn/init.hpp"
#include "kiln/tensor/indexing.hpp"

namespace kiln::nn {

embedding::embedding(const device& dev, std::int64_t num_embeddings, std::int64_t dim,
                     const layer_options& o) {
  if (num_embeddings <= 0 || dim <= 0)
    throw invalid_argument("kiln::nn::embedding: num_embeddings and dim must be positive, got " +
                           std::to_string(num_embeddings) + " and " + std::to_string(dim));
  tensor w = tensor::empty(dev, {num_embeddings, dim}, o.dtype);
  init::normal_(w, 0.0, 1.0, o.seed ? o.seed : next_seed());
  weight = register_parameter("weight", w);
}

tensor embedding::forward(const tensor& indices) const { return kiln::embedding(weight, indices); }

std::string embedding::describe() const {
  return "embedding(" + std::to_string(weight.size(0)) + ", " + std::to_string(weight.size(1)) +
         ")";
}

}  // namespace kiln::nn
