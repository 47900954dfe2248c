// What the layer_norm / rms_norm kernel texts share (layer_norm_kernels.cpp for the forward
// and backward, layer_norm_params.cpp for the parameter gradients): the key, its type names,
// loads widened to the accumulation type, and the parameter declarations.
#pragma once

#include <string>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "tensor/layer_norm_kernels.hpp"

namespace kiln::detail {

struct norm_text_base {
  const norm_kernel_key& k;
  const std::string X = type_name(k.x), W = type_name(k.w), A = type_name(norm_acc_type(k.x));

  std::string lx(const std::string& e) const { return codegen::load_value(k.x, e); }
  std::string lw(const std::string& e) const { return codegen::load_value(k.w, e); }
  std::string in(const std::string& t, const std::string& name) const {
    return codegen::cat(", KILN_GLOBAL const ", t, "* KILN_RESTRICT ", name);
  }
  std::string out(const std::string& t, const std::string& name) const {
    return codegen::cat("KILN_GLOBAL ", t, "* KILN_RESTRICT ", name);
  }
};

}  // namespace kiln::detail
