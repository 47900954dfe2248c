// What the optimizer core (optimizer.cpp) and the update rules (sgd.cpp, adam.cpp, rmsprop.cpp,
// adagrad.cpp) share: a rule is the kernel-language body of one element's update plus the
// host side of its scalars; the core groups parameters into flat buffers per (device, dtype)
// and runs every rule through one generated kernel per group (step_kernel.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/kernel.hpp"
#include "kiln/optim.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::optim::detail {

struct update_rule {
  std::string name;                  // "adam"
  std::vector<std::string> buffers;  // state buffers, in kernel order ("exp_avg", ...)
  std::vector<double> initial;       // each buffer's initial value
  std::vector<std::string> scalars;  // the kernel's scalar parameters (element type), in order
  // Statements run once per work-item before the loop: the scalars that depend on the step
  // number, computed from `t` (int64, 1 on the first step; it lives on the device, since a step
  // skipped by grad_scaler does not advance it) and the scalars. Declares what `body` reads.
  std::string prologue;
  // Statements of the update of element i, in the kernel language with T_ the element type:
  // they read and write `pv` (the parameter) and `gv` (its gradient, may be changed), each
  // buffer as `st_<name>[i]`, and the scalars by name.
  std::string body;
  // The scalars' values at learning rate lr, computed on the host in double (converted to the
  // element type at launch: no recompilation per step).
  std::function<std::vector<double>(double lr)> values;
  // The scalars that carry weight decay ("wd", "lr_wd"): 0 for a group exempt from it.
  std::vector<std::string> decay_scalars;
};

// One (device, dtype) group: flat buffers of `n` elements holding each member's slot. A group
// of bf16/f16 parameters keeps f32 master weights: params and grads stay 16-bit (what the model
// and backward see), `master` and the state are f32 (`math`), and the step kernel updates the
// master and writes its rounding into params.
struct group {
  device dev{nullptr};
  scalar_type dtype = scalar_type::f32;  // the parameters' and gradients' type
  scalar_type math = scalar_type::f32;   // the master's, the state's and the scalars' type
  bool decay = true;                     // false: exempt from weight decay (no_weight_decay)
  std::int64_t n = 0;
  std::shared_ptr<kiln::detail::memory_impl> params, grads;
  std::shared_ptr<kiln::detail::memory_impl> master;              // 16-bit groups only
  std::vector<std::shared_ptr<kiln::detail::memory_impl>> state;  // one per rule buffer
  // The step count (int64 x2; slot 0 is the count): the step kernel reads it and a one-item
  // kernel after it advances it (unless skipped), so no item reads what another writes and a
  // captured step (kiln::step_graph) advances it on every replay.
  std::shared_ptr<kiln::detail::memory_impl> steps;
  std::shared_ptr<kiln::detail::memory_impl> no_skip;      // one f32 zero: never skip
  std::vector<std::size_t> members;                        // indices into optimizer_impl::params
  std::shared_ptr<kiln::detail::kernel_impl> step, count;  // compiled once, at construction
};

struct slot {
  std::size_t group = 0;
  std::int64_t offset = 0;                          // in elements
  std::shared_ptr<kiln::detail::tensor_impl> grad;  // the parameter's view of the flat gradient
};

struct optimizer_impl {
  update_rule rule;
  double lr = 0;
  std::int64_t steps = 0;   // the step count when steps_known, else as of the last read
  bool steps_known = true;  // false after a step that the device may have skipped
  std::vector<tensor> params;
  std::vector<slot> slots;  // per parameter
  std::vector<group> groups;
};

// Moves params into flat buffers and compiles the step kernels (errors: see kiln/optim.hpp).
// no_decay: parameters (each one of params) whose groups step without weight decay.
optimizer make_optimizer(const std::vector<tensor>& params, update_rule rule, double lr,
                         const std::vector<tensor>& no_decay = {});

// The step kernel "ko_step" of a rule for parameter type t; parameters: p, g (type t), the f32
// master (16-bit t only), each buffer, the element count (int64), then each scalar (buffers and
// scalars in t, or f32 for a 16-bit t).
std::string step_source(const update_rule& rule, scalar_type t);
// The group's step kernel and the one-item kernel that advances its step count.
std::pair<kernel, kernel> step_kernel(const device& dev, const update_rule& rule, scalar_type t);
// A kernel argument bound to a whole flat buffer of type t.
kiln::detail::arg_binding mem_arg(kiln::detail::memory_impl& m, scalar_type t, bool is_const);
// Items launched for n elements: on a GPU enough to fill it (the loops stride over the rest).
std::uint64_t items_for(const device& dev, std::int64_t n);
// The optimizer's small generated kernels (grad_scaler's, clipping's): compiled once per
// source and device, cached on disk like every generated kernel.
kernel generated(const device& dev, const std::string& source, const char* name,
                 const std::string& what);

// One launch over a group's flat buffers, counted in kiln::last_tensor_stats(). `skip` (one
// f32 on the group's device, or null for never): the launch leaves parameters, state and step
// count as they are when it holds a non-zero.
void launch_step(const update_rule& rule, const group& g, const std::vector<double>& values,
                 kiln::detail::memory_impl* skip);
// Points each parameter's grad() at its slot again; a gradient that is not the slot's view
// (replaced by set_grad, or undefined) is first copied in (zeros when copy_values is false or
// it is undefined).
void reclaim_grads(optimizer_impl& o, bool copy_values);
// Checks the parameters, reclaims replaced gradients and steps every group once (optimizer::step
// with skip null; grad_scaler::step with its flag, all groups on its device).
void step_all(optimizer_impl& o, kiln::detail::memory_impl* skip);
// The step count as the device has it (read back once after a step the device may have skipped).
std::int64_t step_count_of(optimizer_impl& o);
// Sets the device's step count (load_state_dict).
void set_step_count(optimizer_impl& o, std::int64_t steps);

// The handle's optimizer, or kiln::invalid_argument for an empty handle.
optimizer_impl& impl_of(const std::shared_ptr<optimizer_impl>& o);

// kiln::invalid_argument "kiln::optim::<fn>: <what> must be ..., got <v>" unless ok.
void check_option(bool ok, const char* fn, const char* what, const char* must, double v);

}  // namespace kiln::optim::detail
