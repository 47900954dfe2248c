// grad_scaler's device state (shared by the scaler and the step_results it hands out).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/optim/grad_scaler.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::optim::detail {

struct scaler_state {
  device dev{nullptr};
  // f32 x3 on dev: [found_inf (0 or 1), scale, clean steps in a row]. found_inf first: the
  // optimizer's step kernels take the buffer as their skip flag.
  std::shared_ptr<kiln::detail::memory_impl> mem;
  tensor scale;             // a rank-0 view of element 1 (what scale() multiplies by)
  std::uint64_t steps = 0;  // step() calls: which step_result is current
  bool stepped_since_update = false;
  // The optimizer unscale_() unscaled, whose step() is still to come (it then steps without
  // unscaling again); empty when none. Identity only, by owner: an optimizer made later at a
  // freed one's address is not mistaken for it.
  std::weak_ptr<const void> unscaled;
  // Optimizers unscale_()d since the last update(): a second unscale_() of one is an error.
  std::vector<std::weak_ptr<const void>> unscaled_since_update;
};

// Whether a and b name the same object (weak_ptr identity; false for an empty one).
inline bool same_owner(const std::weak_ptr<const void>& a, const std::weak_ptr<const void>& b) {
  return !a.owner_before(b) && !b.owner_before(a) && !a.expired();
}

// The kernels: unscale-and-check of gradients of type t ("ko_unscale"), and the schedule
// ("ko_scaler_update").
std::string unscale_source(scalar_type t);
extern const char* const update_source;

// Reads from the device to the host by every grad_scaler so far (the tests check that the
// steady state makes none).
std::uint64_t scaler_host_reads();

}  // namespace kiln::optim::detail
