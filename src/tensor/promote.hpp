// Dtype promotion of tensor operations: C++'s usual arithmetic conversions on the two element
// types ([expr.arith.conv]), so a tensor expression has the type the same expression on its
// elements would have in C++ (and in kiln::query). Constexpr; tests check it against decltype
// for every pair.
#pragma once

#include "kiln/scalar_type.hpp"

namespace kiln::detail {

constexpr bool is_floating(scalar_type t) {
  return t == scalar_type::f32 || t == scalar_type::f64 || is_reduced_float(t);
}

// The type a kernel computes and accumulates a value of type t in: f16 and bf16 in float.
constexpr scalar_type compute_type(scalar_type t) {
  return is_reduced_float(t) ? scalar_type::f32 : t;
}

constexpr bool is_unsigned(scalar_type t) {
  return t == scalar_type::u8 || t == scalar_type::u16 || t == scalar_type::u32 ||
         t == scalar_type::u64;
}

// Integral promotion: bool and integers narrower than int become int32.
constexpr scalar_type integral_promote(scalar_type t) {
  switch (t) {
    case scalar_type::boolean:
    case scalar_type::i8:
    case scalar_type::i16:
    case scalar_type::u8:
    case scalar_type::u16: return scalar_type::i32;
    default: return t;
  }
}

// Integer conversion rank after promotion: int32/uint32 are int's rank, int64/uint64 long's.
constexpr int int_rank(scalar_type t) {
  return t == scalar_type::i64 || t == scalar_type::u64 ? 2 : 1;
}

constexpr scalar_type to_unsigned(scalar_type t) {
  return t == scalar_type::i64 ? scalar_type::u64 : scalar_type::u32;
}

constexpr scalar_type promote(scalar_type a, scalar_type b) {
  if (a == scalar_type::f64 || b == scalar_type::f64) return scalar_type::f64;
  if (a == scalar_type::f32 || b == scalar_type::f32) return scalar_type::f32;
  // PyTorch's rules for the 16-bit floats: f16 with bf16 gives f32 (neither holds the other),
  // either with an integer or bool keeps the float type.
  if (is_reduced_float(a) && is_reduced_float(b)) return a == b ? a : scalar_type::f32;
  if (is_reduced_float(a)) return a;
  if (is_reduced_float(b)) return b;
  a = integral_promote(a);
  b = integral_promote(b);
  if (a == b) return a;
  if (is_unsigned(a) == is_unsigned(b)) return int_rank(a) >= int_rank(b) ? a : b;
  const scalar_type u = is_unsigned(a) ? a : b, s = is_unsigned(a) ? b : a;
  if (int_rank(u) >= int_rank(s)) return u;
  // The signed type is wider (int64 vs uint32): it represents every value of the unsigned one.
  return s;
}

// Type of a <cmath> function's result on t: the float types keep theirs, integers give double.
constexpr scalar_type math_type(scalar_type t) { return is_floating(t) ? t : scalar_type::f64; }

}  // namespace kiln::detail
