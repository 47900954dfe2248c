// The autocast scope: one thread-local setting, restored when the scope ends (nested scopes
// and disabled scopes compose as PyTorch's do).
#include "kiln/tensor/autocast.hpp"

#include <string>

#include "kiln/error.hpp"
#include "tensor/autocast_rules.hpp"

namespace kiln {
namespace {
thread_local std::optional<scalar_type> t_autocast;
}

autocast::autocast(scalar_type dtype, bool enabled) : previous_(t_autocast) {
  if (!is_reduced_float(dtype))
    throw invalid_argument(std::string("kiln::autocast: the dtype must be f16 or bf16, not ") +
                           type_name(dtype));
  t_autocast = enabled ? std::optional<scalar_type>(dtype) : std::nullopt;
}

autocast::~autocast() { t_autocast = previous_; }

std::optional<scalar_type> autocast::active() noexcept { return t_autocast; }

namespace detail {

tensor autocast_narrow(const tensor& x) {
  return t_autocast && x.defined() && x.dtype() == scalar_type::f32 ? x.to(*t_autocast) : x;
}

tensor widen_reduced(const tensor& x) {
  return x.defined() && is_reduced_float(x.dtype()) ? x.to(scalar_type::f32) : x;
}

}  // namespace detail

}  // namespace kiln
