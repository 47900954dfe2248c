// Device reduce-by-key (internal): consecutive equal keys form a run (CUB's ReduceByKey,
// thrust::reduce_by_key); for each run, its first key and one aggregate per value column. The
// primitive under kiln::query's group_by/distinct/unique_by_key/reduce_by_key (docs/sort.md),
// usually fed a radix-sorted array.
//
//   kiln::detail::reduce_by_key_args a;
//   a.key_type = kiln::scalar_type::u32;
//   a.n = n;
//   a.keys = sorted.keys;                                  // a radix_sorted's keys
//   a.values.push_back({sorted.values, kiln::scalar_type::f32, kiln::detail::run_op::sum,
//                       kiln::scalar_type::f64});
//   kiln::detail::reduce_by_key_result r = kiln::detail::reduce_by_key(q, a);
//   // r.keys: r.runs keys; r.values[0]: r.runs doubles.
//
// Keys are equal when they compare == (-0.0 and +0.0 are one run) or are both NaN (NaNs in a row
// are one run); integers and bool bitwise. Results are deterministic: every float addition
// happens in an order fixed by n and the device (no atomics).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"
#include "runtime/runtime.hpp"
#include "sort/radix_sort.hpp"

namespace kiln::detail {

// sum: converted to out_type, then added; min/max: NaN propagates (any NaN in the run gives a
// NaN, as torch.amax); count: the run's length (u64); mean: the sum in double over the count,
// stored as out_type (f32 or f64); first: the run's first element, converted to out_type.
enum class run_op : std::uint8_t { sum, min, max, count, mean, first };

struct run_value {
  sort_operand in;                      // ignored for count
  scalar_type type = scalar_type::f32;  // the input's element type
  run_op op = run_op::sum;
  scalar_type out_type = scalar_type::f64;  // the result column's type (count: u64 always)
};

struct reduce_by_key_args {
  scalar_type key_type = scalar_type::u32;  // every type but f16/bf16
  std::uint64_t n = 0;
  sort_operand keys;              // runs of equal keys (e.g. a radix-sorted array)
  std::vector<run_value> values;  // may be empty: unique keys only (unique_by_key / distinct)
  // Tuning and tests. tiled needs kiln::feature::barrier; automatic takes it on GPUs that can.
  radix_path path = radix_path::automatic;
  std::uint64_t chunk = 0;     // elements per work-item; 0: the policy's
  std::uint32_t scan_fan = 0;  // states per work-item per level of their scan; 0: the policy's
};

struct reduce_by_key_result {
  std::shared_ptr<memory_impl> keys;                 // the first key of each run
  std::vector<std::shared_ptr<memory_impl>> values;  // one column per run_value, out_type
  std::uint64_t runs = 0;                            // number of runs (read on the host)
};

// Chunk and tile shapes, shared by the kernel text (RBK_B) and the launcher.
struct reduce_by_key_policy {
  // Chunked path (CPU devices: the CPU backend, PoCL): at least cpu_chunk_elems per work-item,
  // at most cpu_chunks_per_unit work-items per core; elsewhere gpu_chunk_elems per work-item.
  std::uint32_t cpu_chunk_elems = 32768;
  std::uint32_t cpu_chunks_per_unit = 2;
  std::uint32_t gpu_chunk_elems = 32;
  // Tiled path (GPUs): work-groups of tile_threads items of tile_items consecutive elements
  // (two 32-byte sectors of 4-byte values, read through L1), one state per tile.
  std::uint32_t tile_threads = 256;
  std::uint32_t tile_items = 16;
  // The scan of the chunk or tile states: scan_fan states per work-item per level (a work-item
  // walks its states in order, so few: 256M elements make 64K tile states, three levels).
  std::uint32_t scan_fan = 64;
};
inline constexpr reduce_by_key_policy reduce_policy{};

// Enqueues the reduction on q. One host wait: after the per-chunk pass and the scan of its
// states, the run count is read back (it sizes the outputs); the output pass is enqueued after
// it with no further wait. Inputs are only read; outputs are allocated on q (max(runs, 1)
// elements; 1 byte each when n == 0). Temporaries are freed in q's order.
// Errors (before anything is queued): kiln::unsupported for f16/bf16 keys, values or result
// types; kiln::invalid_argument for a missing or too-small array, count with an out_type other
// than u64, sum/min/max into bool, mean into other than f32/f64, an unknown op;
// kiln::device_mismatch for memory of another device than q's.
// "sum", "min", ... for error messages.
const char* run_op_name(run_op op);
// The value columns' part of a kernel text's cache key: per column its op, input and result
// types (reduce_by_key and hash_group generate one text per signature).
std::string run_values_signature(const std::vector<run_value>& values);

reduce_by_key_result reduce_by_key(queue& q, const reduce_by_key_args& a);

// The kernel text, tiled (barriers, local memory) or chunked, for keys of key_bytes (1, 2, 4, 8)
// and the value columns' types and ops (the arrays are not read): "rbk_part", "rbk_up",
// "rbk_down", "rbk_emit".
std::string reduce_by_key_source(bool tiled, std::uint32_t key_bytes,
                                 const std::vector<run_value>& values);

}  // namespace kiln::detail
