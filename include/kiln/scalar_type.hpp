// The element types Kiln kernels and buffers use, and their C++ spellings.
//
//   static_assert(kiln::scalar_type_of<float> == kiln::scalar_type::f32);
//   kiln::type_name(kiln::scalar_type::u16);   // "uint16_t"
//   static_assert(kiln::scalar_type_of<kiln::bfloat16> == kiln::scalar_type::bf16);
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kiln/half.hpp"

namespace kiln {

// f16 (kiln::half) and bf16 (kiln::bfloat16) are storage types: kernels load them into float,
// compute in float and round once where they store (docs/reduced_precision.md).
enum class scalar_type : std::uint8_t {
  boolean,
  i8,
  i16,
  i32,
  i64,
  u8,
  u16,
  u32,
  u64,
  f32,
  f64,
  f16,
  bf16
};

// The kernel language's name of the type ("int32_t", "float", "half", "bfloat16", ...).
const char* type_name(scalar_type t) noexcept;
std::size_t size_of(scalar_type t) noexcept;

namespace detail {
template <class T>
constexpr bool always_false = false;

template <class T>
constexpr scalar_type scalar_type_of_impl() {
  using U = std::remove_cv_t<T>;
  if constexpr (std::is_same_v<U, bool>)
    return scalar_type::boolean;
  else if constexpr (std::is_same_v<U, float>)
    return scalar_type::f32;
  else if constexpr (std::is_same_v<U, double>)
    return scalar_type::f64;
  else if constexpr (std::is_same_v<U, half>)
    return scalar_type::f16;
  else if constexpr (std::is_same_v<U, bfloat16>)
    return scalar_type::bf16;
  else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) {
    if constexpr (sizeof(U) == 1)
      return scalar_type::i8;
    else if constexpr (sizeof(U) == 2)
      return scalar_type::i16;
    else if constexpr (sizeof(U) == 4)
      return scalar_type::i32;
    else
      return scalar_type::i64;
  } else if constexpr (std::is_integral_v<U>) {
    if constexpr (sizeof(U) == 1)
      return scalar_type::u8;
    else if constexpr (sizeof(U) == 2)
      return scalar_type::u16;
    else if constexpr (sizeof(U) == 4)
      return scalar_type::u32;
    else
      return scalar_type::u64;
  } else {
    static_assert(
        always_false<T>,
        "kiln: not a scalar type (bool, int8..int64, uint8..uint64, half, bfloat16, float, "
        "double)");
    return scalar_type::boolean;
  }
}
}  // namespace detail

template <class T>
concept scalar =
    (std::is_arithmetic_v<std::remove_cv_t<T>> &&
     !std::is_same_v<std::remove_cv_t<T>, long double>) ||
    std::is_same_v<std::remove_cv_t<T>, half> || std::is_same_v<std::remove_cv_t<T>, bfloat16>;

// f16 and bf16: stored in 16 bits, computed in float.
constexpr bool is_reduced_float(scalar_type t) {
  return t == scalar_type::f16 || t == scalar_type::bf16;
}

template <scalar T>
inline constexpr scalar_type scalar_type_of = detail::scalar_type_of_impl<T>();

}  // namespace kiln
