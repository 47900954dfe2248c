// kiln::nn::embedding: a lookup table of num_embeddings rows of `dim` values (PyTorch's
// nn.Embedding without padding_idx / max_norm). Weight initialised normal(0, 1) as PyTorch;
// state_dict key "weight".
//
//   kiln::nn::embedding tok(dev, 65, 384);             // weight [65, 384]
//   kiln::tensor x = tok(ids);                         // ids int64 [B, T] -> [B, T, 384]
#pragma once

#include <cstdint>

#include "kiln/nn/layers.hpp"

namespace kiln::nn {

class embedding : public module {
 public:
  // o.bias is ignored (an embedding has none); o.dtype and o.seed as for the other layers.
  embedding(const device& dev, std::int64_t num_embeddings, std::int64_t dim,
            const layer_options& o = {});
  tensor forward(const tensor& indices) const override;
  std::string describe() const override;
  tensor weight;  // [num_embeddings, dim]
};

}  // namespace kiln::nn
