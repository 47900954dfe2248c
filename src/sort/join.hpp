// Device equi-join of two key arrays (internal): the (probe row, build row) pairs whose keys are
// equal, on the memory of one device. The primitive under kiln::query's join (issue 26).
//
//   kiln::detail::join_args a;
//   a.key_type = kiln::scalar_type::i64;
//   a.build_n = nb;  a.build_keys = {build_mem, 0};   // sorted and searched
//   a.probe_n = np;  a.probe_keys = {probe_mem, 0};   // streamed
//   a.kind = kiln::detail::join_kind::left;
//   kiln::detail::join_result r = kiln::detail::join_keys(q, a);   // r.count rows
//
// Rows: exactly those of the nested loop `for i in probe: for j in build: if probe[i] ==
// build[j]: emit (i, j)`, in that order (probe index, then build index, ascending). A left join
// also emits (i, UINT64_MAX) for a probe row that matches nothing. Floats match by ==: -0.0
// matches +0.0 and NaN matches nothing (not even itself).
//
// One host wait: the row count is read back to size the outputs (none when the count is known
// without it: an empty side). Temporaries are freed in q's order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"
#include "runtime/runtime.hpp"
#include "sort/radix_sort.hpp"

namespace kiln::detail {

enum class join_kind : std::uint8_t { inner, left };

struct join_args {
  scalar_type key_type = scalar_type::u32;  // both sides have this type; every type but f16/bf16
  std::uint64_t build_n = 0;
  sort_operand build_keys;  // the side that is sorted and searched (no memory: only if n is 0)
  std::uint64_t probe_n = 0;
  sort_operand probe_keys;  // the side that is streamed (no memory: only if n is 0)
  join_kind kind = join_kind::inner;
  // Optional: where to write the rows (u64 each, from the offsets) when both hold at least the
  // row count; otherwise (or when left empty) the outputs are allocated. They must not overlap
  // each other.
  sort_operand probe_out, build_out;
};

struct join_result {
  std::shared_ptr<memory_impl> probe_index;  // u64 per output row
  std::shared_ptr<memory_impl> build_index;  // u64 per output row; UINT64_MAX: no match (left join)
  std::uint64_t count = 0;                   // output rows (read on the host)
  // Element offsets of the rows in probe_index / build_index: 0 unless probe_out/build_out
  // were used.
  std::uint64_t probe_offset = 0, build_offset = 0;
};

// The most rows a join may produce; more is refused (kiln::invalid_argument naming the count)
// before anything is allocated for them.
inline constexpr std::uint64_t join_max_rows = std::uint64_t(1) << 40;

// Enqueues the join on q and waits once for its row count (see above). Inputs are only read.
// Errors: kiln::unsupported for f16/bf16 keys; kiln::invalid_argument for a missing or too-small
// array, a bad kind, overlapping outputs, more than join_max_rows rows; kiln::device_mismatch
// for memory of another device than q's.
join_result join_keys(queue& q, const join_args& a);

// The kernel text (join.cpp) for keys of `key_bytes` (1, 2, 4, 8) and sorted build positions
// of `perm_bytes` (4 or 8): "jn_prep", "jn_count", "jn_scan_reduce", "jn_scan_apply",
// "jn_emit", "jn_unmatched". No barriers or local memory (every backend runs it).
const std::string& join_source(std::uint32_t key_bytes, std::uint32_t perm_bytes);

}  // namespace kiln::detail
