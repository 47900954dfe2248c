// The kernel text of the device hash group-by (hash_group.hpp, which describes the kernels), and
// the predicates on value columns that the text and the launcher share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/scalar_type.hpp"
#include "sort/hash_group.hpp"
#include "sort/reduce_by_key.hpp"

namespace kiln::detail::hash_group_text {

inline bool is_float(scalar_type t) { return t == scalar_type::f32 || t == scalar_type::f64; }
inline bool is_signed(scalar_type t) {
  return t == scalar_type::i8 || t == scalar_type::i16 || t == scalar_type::i32 ||
         t == scalar_type::i64;
}
inline bool is_integer(scalar_type t) { return !is_float(t) && !is_reduced_float(t); }  // bool too

// A float min/max: ordered through its bits (the input is bound as its word).
inline bool float_order(const run_value& v) {
  return (v.op == run_op::min || v.op == run_op::max) && is_float(v.type);
}
// A float min/max whose result type differs: its bits go through a temporary and hg_conv<j>.
inline bool needs_conv(const run_value& v) { return float_order(v) && v.out_type != v.type; }

// The program (hg_insert, hg_insert_local, hg_compact, hg_emit) for keys of kb bytes, the
// value columns, and local tables of local_slots slots (0: no hg_insert_local).
std::string render(std::uint32_t kb, const std::vector<run_value>& values,
                   std::uint32_t local_slots);

}  // namespace kiln::detail::hash_group_text
