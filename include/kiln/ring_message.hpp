// Message types of ring kernels: plain structs described once, so the kernel sees the same
// layout as the host. KILN_RING_MESSAGE lists the fields in declaration order; Kiln generates
// the struct for the kernel from that list and refuses a type whose real layout differs from
// the generated one (a field left out, packing, alignas), so a mismatch is an error, never
// corruption.
//
//   struct order { uint32_t id; float price; double qty[2]; };
//   KILN_RING_MESSAGE(order, id, price, qty);     // at namespace scope, after the struct
//
// Fields are scalars (bool, int8..int64, uint8..uint64, float, double) or one-dimensional
// arrays of them. The kernel sees `struct order { uint32_t id; float price; double qty[2]; };`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "kiln/scalar_type.hpp"

namespace kiln {

struct ring_field {
  std::string name;
  scalar_type type = scalar_type::u8;
  std::size_t offset = 0;  // offsetof in the C++ type
  std::size_t count = 1;   // array extent; 1 for a scalar
  bool is_array = false;
};

// Specialised by KILN_RING_MESSAGE: name() and fields() of T.
template <class T>
struct ring_message_traits;

template <class T>
concept ring_message = requires {
  { ring_message_traits<T>::name() } -> std::convertible_to<std::string>;
  { ring_message_traits<T>::fields() } -> std::convertible_to<std::vector<ring_field>>;
} && std::is_trivially_copyable_v<T> && std::is_standard_layout_v<T>;

namespace detail {
template <class F>
ring_field make_ring_field(const char* name, std::size_t offset) {
  using E = std::remove_all_extents_t<F>;
  static_assert(std::rank_v<F> <= 1, "KILN_RING_MESSAGE: only one-dimensional array fields");
  static_assert(scalar<E>, "KILN_RING_MESSAGE: fields must be scalars or arrays of scalars");
  ring_field f;
  f.name = name;
  f.type = scalar_type_of<E>;
  f.offset = offset;
  f.is_array = std::rank_v<F> == 1;
  f.count = f.is_array ? std::extent_v<F> : 1;
  return f;
}
}  // namespace detail
}  // namespace kiln

#define KILN_RING_PARENS ()
#define KILN_RING_EXPAND(...) KILN_RING_EXPAND3(KILN_RING_EXPAND3(KILN_RING_EXPAND3(__VA_ARGS__)))
#define KILN_RING_EXPAND3(...) KILN_RING_EXPAND2(KILN_RING_EXPAND2(KILN_RING_EXPAND2(__VA_ARGS__)))
#define KILN_RING_EXPAND2(...) KILN_RING_EXPAND1(KILN_RING_EXPAND1(KILN_RING_EXPAND1(__VA_ARGS__)))
#define KILN_RING_EXPAND1(...) __VA_ARGS__
#define KILN_RING_FOR_EACH(m, T, ...) \
  __VA_OPT__(KILN_RING_EXPAND(KILN_RING_FOR_EACH_STEP(m, T, __VA_ARGS__)))
#define KILN_RING_FOR_EACH_STEP(m, T, a, ...) \
  m(T, a) __VA_OPT__(KILN_RING_FOR_EACH_AGAIN KILN_RING_PARENS(m, T, __VA_ARGS__))
#define KILN_RING_FOR_EACH_AGAIN() KILN_RING_FOR_EACH_STEP
#define KILN_RING_FIELD(T, f) \
  ::kiln::detail::make_ring_field<decltype(T::f)>(#f, offsetof(T, f)),

// Describes message type T (a struct) by its fields, in declaration order.
#define KILN_RING_MESSAGE(T, ...)                                                      \
  template <>                                                                         \
  struct kiln::ring_message_traits<T> {                                               \
    static std::string name() { return #T; }                                          \
    static std::vector<::kiln::ring_field> fields() {                                 \
      return {KILN_RING_FOR_EACH(KILN_RING_FIELD, T, __VA_ARGS__)};                   \
    }                                                                                 \
  }
