// Device radix sort (internal): a stable LSD sort of keys, optionally carrying 4- or 8-byte
// values, on the memory of one device, enqueued on a queue with no host wait. The primitive
// kiln::query's sort/order_by/distinct/group_by and tensor topk/argsort sit on (docs/sort.md).
//
//   kiln::detail::radix_sort_args a;
//   a.key_type = kiln::scalar_type::f32;
//   a.n = n;
//   a.keys_in = {collected.outputs[0], 0};     // collect_result outputs feed it directly
//   a.value_bytes = 4;                         // e.g. uint32 indices; 0 for keys only
//   a.values_in = {indices_mem, 0};
//   kiln::detail::radix_sorted r = kiln::detail::radix_sort(q, a);   // outputs allocated
//
// Order: ascending (std::less) or descending (std::greater), stable in both. Signed integers
// by value; floats -inf < ... < -0.0 < +0.0 < ... < +inf, then every NaN (in both directions),
// NaNs in input order. Keys and values are moved bitwise (NaN payloads kept).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {

// The tile shape, shared by the kernel text (printed into it as RS_* macros) and the launcher.
struct radix_sort_policy {
  // Barrier path (GPUs, OpenCL): a tile of threads * items keys per work-group. Tiles rank keys
  // with 16-bit counters packed four to a word, so a tile holds at most 65535 keys.
  std::uint32_t threads = 256;
  std::uint32_t items = 8;
  std::uint32_t scan_items = 8;     // entries per work-item per round of the (digit, tile) scan
  std::uint32_t scan_groups = 512;  // work-groups of that scan, at most
  // Chunked path (the CPU backend, no barriers): one work-item sorts a contiguous chunk of at
  // least cpu_chunk_elems keys, at most cpu_chunks_per_unit chunks per core.
  std::uint32_t cpu_chunk_elems = 32768;
  std::uint32_t cpu_chunks_per_unit = 2;

  constexpr std::uint64_t tile() const { return std::uint64_t(threads) * items; }
};
inline constexpr radix_sort_policy radix_policy{};

// A device array: an allocation and the element offset the array starts at.
struct sort_operand {
  std::shared_ptr<memory_impl> mem;
  std::uint64_t offset = 0;  // elements
};

// Which kernels run. automatic: CUB's onesweep agents on CUDA devices where CCCL's headers are
// found (cub_radix_sort.hpp), else the tiled kernels on GPUs, the chunked ones on CPU devices
// (the CPU backend has no barriers; on PoCL the chunked kernels are ~10x faster than tiles).
// cub: CUB's or kiln::unsupported saying why not.
enum class radix_path { automatic, tiled, chunked, cub };

struct radix_sort_args {
  scalar_type key_type = scalar_type::u32;  // every type but f16/bf16
  std::uint64_t n = 0;
  sort_operand keys_in;
  sort_operand keys_out;          // empty: allocated (n keys)
  std::uint32_t value_bytes = 0;  // 0: keys only; 4 or 8: values moved bitwise with the keys
  sort_operand values_in;
  sort_operand values_out;  // empty: allocated when value_bytes
  bool descending = false;
  radix_path path = radix_path::automatic;  // tiled needs kiln::feature::barrier
};

// The sorted arrays: the outputs passed in, or the ones allocated (offset 0).
struct radix_sorted {
  sort_operand keys, values;
};

// Enqueues the sort on q (no host wait; temporaries are freed in q's order). Inputs are only
// read; outputs must not overlap the inputs or each other. Errors: kiln::unsupported for
// f16/bf16 keys; kiln::invalid_argument for a value size other than 0/4/8, a missing or
// too-small array, overlapping arrays; kiln::device_mismatch for memory of another device.
radix_sorted radix_sort(queue& q, const radix_sort_args& a);

// The kernel text (radix_sort_kernels.cpp) for keys of `key_bytes` (1, 2, 4, 8) and values of
// `value_bytes` (4 or 8; keys-only sorts use 4 and pass no values): "rs_hist", "rs_scan_up",
// "rs_scan", "rs_scatter" for devices with barriers; "rs_chist", "rs_cscan", "rs_cscatter"
// otherwise; "rs_final" in both.
const std::string& radix_sort_source(bool tiled, std::uint32_t key_bytes,
                                     std::uint32_t value_bytes);

}  // namespace kiln::detail
