// Device hash group-by (internal): one row per distinct key with exact aggregates, through an
// open-addressing table in device memory instead of a full sort (docs/sort.md). For few to
// moderate group counts it reads the rows once; it gives up (done == false) when there are
// more distinct keys than max_groups, and the caller sorts instead.
//
//   kiln::detail::hash_group_args a;
//   a.key_type = kiln::scalar_type::u32;
//   a.n = n;
//   a.keys = {keys_mem, 0};                                // any order
//   a.values.push_back({{vals_mem, 0}, kiln::scalar_type::i32, kiln::detail::run_op::sum,
//                       kiln::scalar_type::i64});
//   kiln::detail::hash_group_result r = kiln::detail::hash_group(q, a);
//   if (!r.done) { /* radix_sort + reduce_by_key */ }
//
// The result equals reduce_by_key's on the stably sorted keys, key bits included (the zero
// group's key is -0.0 when one occurs, the NaN group's key the first NaN's bits), with one
// exceptions, all between values that compare equal: a float min/max that is a NaN has a NaN
// of its own bits; min/max of -0.0 and +0.0 give -0.0 and +0.0 (the sort path keeps the first
// one); `first` of the zero group is its first row by position (the sort path's is its first
// -0.0 row, as the radix sort puts -0.0 keys before +0.0 keys).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"
#include "sort/reduce_by_key.hpp"

namespace kiln::detail {

// Whether the hash path computes this aggregate exactly as the sort path does whatever the
// order rows arrive in: count, sum of integers/bool into an integer, min, max, first (by
// position). Not float sums, integer sums into floats, or means: atomics would make them
// order-dependent, so those stay on the sort path.
bool hash_group_exact(const run_value& v);

struct hash_group_args {
  scalar_type key_type = scalar_type::u32;  // every type but f16/bf16
  std::uint64_t n = 0;
  sort_operand keys;              // any order
  std::vector<run_value> values;  // each hash_group_exact (else kiln::invalid_argument)
  std::uint64_t max_groups = 0;   // 0: the policy's default; more distinct keys -> gives up
  // Tuning and tests: tiled folds each work-group's runs in a table in local memory first
  // (needs kiln::feature::barrier; automatic takes it on GPUs that can, with aggregates);
  // automatic on CPU devices folds each work-item's runs in a private table first; chunked
  // goes to the global table directly.
  radix_path path = radix_path::automatic;
};

// done == false: more than max_groups distinct keys; nothing else is valid, the caller sorts
// instead. done == true: as reduce_by_key's result on the sorted keys: one row per distinct key
// in ascending key order (floats: -0.0 and +0.0 one key, all NaNs one key, last), the
// aggregates in their out_type; runs = number of groups (read on the host).
struct hash_group_result {
  bool done = false;
  reduce_by_key_result groups;
};

struct hash_group_policy {
  std::uint64_t default_max_groups = std::uint64_t(1) << 22;
  // The table holds at least slack x min(max_groups, n) slots (a power of two): probes stay
  // short while the groups fit.
  std::uint32_t slack = 2;
  // Rows per work-item: CPU devices take contiguous chunks of at least cpu_chunk_elems, at most
  // cpu_chunks_per_unit per core; GPUs a grid-stride loop over at most gpu_items_per_unit
  // work-items per compute unit.
  std::uint32_t cpu_chunk_elems = 32768;
  std::uint32_t cpu_chunks_per_unit = 2;
  std::uint32_t gpu_items_per_unit = 2048;
  std::uint32_t gpu_group = 256;
  // Tiled path: up to local_slots_max entries of (1 + columns) words, at most local_bytes
  // (CUDA's static shared limit), in local_groups_per_unit work-groups per compute unit.
  std::uint32_t local_slots_max = 2048;
  std::uint32_t local_bytes = 49152;
  std::uint32_t local_reserve = 256;  // for the kernel's other local variables
  std::uint32_t local_groups_per_unit = 4;
  // CPU devices: each work-item's private table, entries of (2 + columns) words.
  std::uint32_t cpu_private_slots = 2048;
};
inline constexpr hash_group_policy hash_policy{};

// Enqueues the grouping on q. One host wait, after the insertion pass (the group count and
// whether the table gave up). Inputs are only read; outputs are allocated on q (max(groups, 1)
// elements). Errors (before anything is queued): kiln::unsupported for f16/bf16 keys, values or
// results; kiln::invalid_argument for an aggregate that is not hash_group_exact, a missing or
// too-small array, max_groups above 2^30; kiln::device_mismatch for memory of another device.
hash_group_result hash_group(queue& q, const hash_group_args& a);

// The kernel text for keys of key_bytes (1, 2, 4, 8) and the value columns (not read):
// "hg_insert", "hg_compact", "hg_emit", "hg_conv<j>" for float min/max column j whose result
// type differs from its input's, and with local_slots (a power of two >= 256) and columns,
// "hg_insert_local" (local memory and barriers).
std::string hash_group_source(std::uint32_t key_bytes, const std::vector<run_value>& values,
                              std::uint32_t local_slots = 0);

}  // namespace kiln::detail
