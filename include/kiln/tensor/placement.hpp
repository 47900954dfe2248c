// Where operations over kiln::automatic tensors run (docs/placement.md). Each operation has a
// class and an amount of work; it runs on the first GPU when at least half of its input bytes
// are already there, or when
//     work >= threshold(class) x (share of its input bytes that are not on that GPU)
// and on the host CPU otherwise (a threshold of 0 always picks the GPU; placement_never means
// "moving host data to the GPU never pays": only data mostly on the GPU is worked on there;
// with no GPU everything stays on the CPU). A threshold is the work from which the GPU wins
// with every input on the host, the copy included. Operands move to the chosen device and
// stay there. Thresholds come, first found first: set_placement_threshold, the environment
// (KILN_PLACE_ELEMENTWISE, _REDUCTION, _GEMM, _CONV: a number or "never"), `kiln calibrate`'s
// measurement for the GPU (<cache dir>/placement.txt), the built-in default.
//
//   auto a = kiln::tensor::from(kiln::automatic, host_a, {4096, 4096});   // on the host
//   auto c = kiln::matmul(a, a);                 // gemm: 2 n^3 flops, likely on the GPU
//   kiln::placement_info p = kiln::last_placement();   // class, device, work, bytes moved
//   kiln::set_placement_threshold(kiln::op_class::elementwise, 0);   // always the GPU
//   kiln::reset_placement_thresholds();
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "kiln/automatic.hpp"
#include "kiln/device.hpp"

namespace kiln {

// The placement class of an operation, and what its work counts:
//   elementwise: output elements of one fused elementwise kernel (views' copies included);
//   reduction:   elements folded by a kernel holding a reduction (softmax, norms, ...);
//   gemm:        2 m n k flops (times the batch) of matmul, gemm, gemv;
//   conv:        2 N K P Q (C / groups) R S flops of conv2d.
enum class op_class : std::uint8_t { elementwise, reduction, gemm, conv };
inline constexpr int op_class_count = 4;
// "elementwise", "reduction", "gemm", "conv"; kiln::invalid_argument for another value.
const char* to_string(op_class c);

// The threshold "never": host-resident inputs never go to the GPU for this class.
inline constexpr std::uint64_t placement_never = std::numeric_limits<std::uint64_t>::max();

// Overrides the class's threshold for this process (every thread, every GPU) until reset.
void set_placement_threshold(op_class c, std::uint64_t work);
void reset_placement_threshold(op_class c);
void reset_placement_thresholds();  // every class
// The threshold in force for the class on `gpu` (override, environment, calibrated, default),
// and on the first GPU (the default when there is none).
std::uint64_t placement_threshold(op_class c, const device& gpu);
std::uint64_t placement_threshold(op_class c);

// The last placement decided on this thread: by an evaluation whose expression holds
// kiln::automatic tensors, or by matmul/gemm/gemv/conv2d over them.
struct placement_info {
  op_class cls = op_class::elementwise;
  device dev{nullptr};            // where it ran; null before any placement on this thread
  double work = 0;                // in the class's units (above)
  std::uint64_t threshold = 0;    // the class's threshold for the GPU (0 without a GPU)
  std::uint64_t bytes_total = 0;  // bytes of storage its tensor inputs read
  std::uint64_t bytes_moved = 0;  // of those, bytes copied to dev before it ran
  std::string reason;             // the rule's reading, for logs and tests
};
placement_info last_placement();

}  // namespace kiln
