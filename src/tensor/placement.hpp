// kiln::automatic for tensors (docs/placement.md): the rule that picks the device of an
// operation over automatic tensors, the moves of their storage, and the thresholds' store.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "kiln/tensor/placement.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

// Where an operation runs, chosen by place(). While it lives, evaluations on this thread of
// expressions over automatic tensors run on `dev` too (copies an operation makes of its
// operands must not be placed elsewhere). Keep it for the operation's whole body.
class placed {
 public:
  placed(device d, bool automatic);
  ~placed();
  placed(const placed&) = delete;
  placed& operator=(const placed&) = delete;

  device dev;      // where the operation runs: its operands are stored there now
  bool automatic;  // no operand is fixed: mark the operation's results automatic

 private:
  const device* outer_;
};

// For an operation of class c doing `work` over `operands` (null entries skipped; lazy ones
// are evaluated first, each by its own placement):
// - every operand fixed (not automatic): their device (kiln::device_mismatch if two differ);
// - some fixed: the fixed operands' device (they pin it); the automatic ones move there;
// - all automatic: the rule (the first GPU when at least half of the operands' bytes are on
//   it or work >= threshold(c) x the share of them not on it, else the host CPU); operands not
//   there move there.
// Moves copy each storage once (views sharing it are retargeted together, so pass a view and
// the tensor it views both when both are used after). Records last_placement() when any
// operand is automatic. Call it after the operation's own checks, before it allocates.
//
// conv2d: const detail::placed p = detail::place(op_class::conv, {...}, flops);
placed place(op_class c, std::initializer_list<tensor_impl*> operands, double work);

// Evaluation hook (eval.cpp): before a lazy expression runs, sets the device of its nodes and
// moves its automatic leaves (class reduction when it holds one, else elementwise; work: the
// largest iteration space of its kernels). Nothing when no node or leaf is automatic.
void place_expression(tensor_impl& root);

// Copies the storage behind ts (each storage once, the span the tensors use) to `to`, and
// points the tensors at it there; returns the bytes copied. Tensors already on `to` are left.
std::uint64_t move_storage(const std::vector<tensor_impl*>& ts, const device& to);

// The GPU kiln::automatic may choose: the first device of type gpu; null device when none.
const device& automatic_gpu();

// Thresholds: where the value in force comes from.
enum class threshold_source : std::uint8_t { override, environment, calibrated, builtin };
const char* source_name(threshold_source s);
struct threshold_value {
  std::uint64_t work;
  threshold_source source;
};
threshold_value resolve_threshold(op_class c, const device& gpu);
// The built-in default (docs/placement.md has how they were measured).
std::uint64_t default_threshold(op_class c);
// `kiln calibrate`'s measurement of dev, from <cache dir>/placement.txt.
std::optional<std::uint64_t> calibrated_threshold(op_class c, const device& dev);
// Stores a measured threshold for dev (kiln calibrate); returns the file.
std::string store_threshold(op_class c, const device& dev, std::uint64_t work);

// kiln::invalid_argument for a value outside the enumeration.
int class_index(op_class c);

}  // namespace kiln::detail
