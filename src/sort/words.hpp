// Helpers shared by the device sort primitives (src/sort/) and kiln::query's barrier steps:
// elements moved bitwise as unsigned words of their width, the order kind of a key type, and
// array arguments at an element offset.
#pragma once

#include <cstdint>
#include <string>

#include "kiln/error.hpp"
#include "kiln/scalar_type.hpp"
#include "runtime/runtime.hpp"
#include "sort/radix_sort.hpp"

namespace kiln::detail {

// The unsigned word of `bytes` (1, 2, 4, 8) bytes, as the kernel language spells it and as a type.
inline const char* word_name(std::uint64_t bytes) {
  return bytes == 1 ? "uint8_t" : bytes == 2 ? "uint16_t" : bytes == 4 ? "uint32_t" : "uint64_t";
}
inline scalar_type word_type(std::uint64_t bytes) {
  return bytes == 1   ? scalar_type::u8
         : bytes == 2 ? scalar_type::u16
         : bytes == 4 ? scalar_type::u32
                      : scalar_type::u64;
}

// How a key's bits order: 0 unsigned (bool too), 1 signed, 2 IEEE float.
inline std::int32_t order_kind(scalar_type t) {
  switch (t) {
    case scalar_type::i8:
    case scalar_type::i16:
    case scalar_type::i32:
    case scalar_type::i64: return 1;
    case scalar_type::f32:
    case scalar_type::f64: return 2;
    default: return 0;
  }
}

// bool travels as bytes (OpenCL allows no bool in kernel arguments).
inline scalar_type stored_type(scalar_type t) {
  return t == scalar_type::boolean ? scalar_type::u8 : t;
}

// n elements of type t of x, from its element offset.
inline arg_binding array_arg(const sort_operand& x, scalar_type t, bool is_const, std::uint64_t n) {
  arg_binding b;
  b.is_mem = true;
  b.type = t;
  b.is_const = is_const;
  b.mem = x.mem.get();
  b.byte_offset = x.offset * size_of(t);
  b.count = n;
  return b;
}

// fn's check of an operand: memory of q's device holding n elements of `elem` bytes from its
// offset. Without memory: fine when n == 0 and empty_ok, else kiln::invalid_argument.
inline void check_operand(const std::string& fn, const queue_impl& q, const sort_operand& x,
                          std::uint64_t n, std::uint64_t elem, const std::string& name,
                          bool empty_ok = false) {
  if (!x.mem) {
    if (n == 0 && empty_ok) return;
    throw invalid_argument(fn + ": " + name + " has no memory (n is " + std::to_string(n) + ")");
  }
  if (x.mem->dev != q.dev)
    throw device_mismatch(fn + ": " + name + " is memory of " + x.mem->dev->id +
                          ", the queue runs on " + q.dev->id);
  const std::uint64_t have = x.mem->bytes / elem;
  if (x.offset > have || have - x.offset < n)
    throw invalid_argument(fn + ": " + name + " holds " + std::to_string(have) + " elements of " +
                           std::to_string(elem) + " bytes; offset " + std::to_string(x.offset) +
                           " + n " + std::to_string(n) + " does not fit");
}

}  // namespace kiln::detail
