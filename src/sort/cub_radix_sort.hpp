// The radix sort on CUDA devices through CUB's own onesweep agents (CCCL), compiled at run time
// by NVRTC around Kiln's key order: the same histogram, exclusive-sum and onesweep kernels that
// cub::DeviceRadixSort launches, with its tuned policy for the device's architecture, so the
// sort runs at CUB's speed by construction (issue 26). radix_sort() takes this path on CUDA
// devices when CCCL's headers are found, and its portable kernels everywhere else.
//
//   if (kiln::detail::cub_sort_unavailable(dev).empty())   // "" when the path can run
//     kiln::detail::cub_radix_sort(q, args, keys_bytes, value_bytes, &sorted);
//
// Key order is Kiln's (radix_sort.hpp), not CUB's: CUB's traits for the key are replaced by
// ones that keep -0.0 before +0.0 and put every NaN last in both directions (CUB treats the
// zeros as equal and orders negative NaNs first). Stable, like CUB's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "sort/radix_sort.hpp"

namespace kiln::detail {

// Where CCCL's headers are (the folder holding cub/ and cuda/std/), searched once: KILN_CCCL_
// INCLUDE, then $CUDA_PATH and $CUDA_HOME, /usr/local/cuda, and Python's nvidia/cuda_cccl and
// nvidia/cu13 packages; CCCL 3.0 or newer. nullopt with `why` set when none is usable.
std::optional<std::string> cccl_include_dir(std::string* why = nullptr);
// The search itself, uncached, with KILN_CCCL_INCLUDE's value given (null or "": unset).
std::optional<std::string> find_cccl(const char* kiln_cccl_include, std::string* why);

// Why the CUB path cannot run on `dev` ("" when it can): not a CUDA device, KILN_CUB=0, or no
// usable CCCL headers.
std::string cub_sort_unavailable(const device& dev);

// The kernels' CUDA text for keys of `key_bytes` (kind: radix_sort's order_kind), values of
// `value_bytes` (0: keys only), 64-bit offsets when `wide`; compiled with -I<cccl_include_dir()>.
std::string cub_radix_sort_source(std::uint32_t key_bytes, std::uint32_t value_bytes, int kind,
                                  bool descending, bool wide);

// Enqueues the sort of a (checked by radix_sort) into r's arrays (allocated, n elements) on q.
// Throws kiln::compile_error when NVRTC refuses CUB's headers (the caller falls back).
void cub_radix_sort(queue& q, const radix_sort_args& a, std::uint32_t key_bytes,
                    std::uint32_t value_bytes, const radix_sorted& r);

}  // namespace kiln::detail
