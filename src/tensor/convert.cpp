#include "tensor/convert.hpp"

#include <cstring>

namespace kiln::detail {
namespace {

template <class T>
T as(std::uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

template <class T, class V>
std::uint64_t store(V v) {
  const T x = static_cast<T>(v);
  std::uint64_t b = 0;
  std::memcpy(&b, &x, sizeof x);
  return b;
}

template <class V>
std::uint64_t store_as(scalar_type to, V v) {
  switch (to) {
    case scalar_type::boolean: return store<bool>(v);
    case scalar_type::i8: return store<std::int8_t>(v);
    case scalar_type::i16: return store<std::int16_t>(v);
    case scalar_type::i32: return store<std::int32_t>(v);
    case scalar_type::i64: return store<std::int64_t>(v);
    case scalar_type::u8: return store<std::uint8_t>(v);
    case scalar_type::u16: return store<std::uint16_t>(v);
    case scalar_type::u32: return store<std::uint32_t>(v);
    case scalar_type::u64: return store<std::uint64_t>(v);
    case scalar_type::f32: return store<float>(v);
    case scalar_type::f64: return store<double>(v);
    case scalar_type::f16: return store<half>(v);
    case scalar_type::bf16: return store<bfloat16>(v);
  }
  return 0;
}

}  // namespace

std::uint64_t convert_bits(scalar_type from, std::uint64_t bits, scalar_type to) {
  switch (from) {
    case scalar_type::boolean: return store_as(to, as<bool>(bits));
    case scalar_type::i8: return store_as(to, as<std::int8_t>(bits));
    case scalar_type::i16: return store_as(to, as<std::int16_t>(bits));
    case scalar_type::i32: return store_as(to, as<std::int32_t>(bits));
    case scalar_type::i64: return store_as(to, as<std::int64_t>(bits));
    case scalar_type::u8: return store_as(to, as<std::uint8_t>(bits));
    case scalar_type::u16: return store_as(to, as<std::uint16_t>(bits));
    case scalar_type::u32: return store_as(to, as<std::uint32_t>(bits));
    case scalar_type::u64: return store_as(to, as<std::uint64_t>(bits));
    case scalar_type::f32: return store_as(to, as<float>(bits));
    case scalar_type::f64: return store_as(to, as<double>(bits));
    case scalar_type::f16: return store_as(to, as<half>(bits));
    case scalar_type::bf16: return store_as(to, as<bfloat16>(bits));
  }
  return 0;
}

}  // namespace kiln::detail
