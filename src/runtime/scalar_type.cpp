#include "kiln/scalar_type.hpp"

namespace kiln {

const char* type_name(scalar_type t) noexcept {
  switch (t) {
    case scalar_type::boolean: return "bool";
    case scalar_type::i8: return "int8_t";
    case scalar_type::i16: return "int16_t";
    case scalar_type::i32: return "int32_t";
    case scalar_type::i64: return "int64_t";
    case scalar_type::u8: return "uint8_t";
    case scalar_type::u16: return "uint16_t";
    case scalar_type::u32: return "uint32_t";
    case scalar_type::u64: return "uint64_t";
    case scalar_type::f32: return "float";
    case scalar_type::f64: return "double";
    case scalar_type::f16: return "half";
    case scalar_type::bf16: return "bfloat16";
  }
  return "?";
}

std::size_t size_of(scalar_type t) noexcept {
  switch (t) {
    case scalar_type::boolean:
    case scalar_type::i8:
    case scalar_type::u8: return 1;
    case scalar_type::i16:
    case scalar_type::u16:
    case scalar_type::f16:
    case scalar_type::bf16: return 2;
    case scalar_type::i32:
    case scalar_type::u32:
    case scalar_type::f32: return 4;
    default: return 8;
  }
}

}  // namespace kiln
