// f16/bf16 arrays moved as 32-bit words (uint32_t, or the fields of a uint2 / uint4), two
// elements per word with the lower address in the low half (every device Kiln targets is
// little-endian). The generated kernels that load or store 16-bit data in 16-byte words (the
// elementwise chains, layer norm, the row kernels) spell their unpacking and packing here:
//
//   "const uint4 q = ((KILN_GLOBAL const uint4*)p)[i];"
//   half_of_word(scalar_type::bf16, cat("q", word_field(4, 1)), true)
//       -> "KILN__BF16_TO_F32((uint16_t)(q.y >> 16))"          // element 3 of the word, as float
//   pack_bits(bits_of(t, "a"), bits_of(t, "b"))                 // two floats -> one uint32_t
#pragma once

#include <string>

#include "codegen/text.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln::codegen {

// The field of 32-bit word w in a word type of `words` 32-bit words ("" for a uint32_t).
inline std::string word_field(unsigned words, unsigned w) {
  return words == 1 ? std::string() : std::string(".") + "xyzw"[w];
}

// The type holding `words` 32-bit words: uint32_t, uint2 or uint4 (CUDA's and OpenCL's).
inline const char* word_type(unsigned words) {
  return words == 1 ? "uint32_t" : words == 2 ? "uint2" : "uint4";
}

// 16-bit pattern `bits` (a uint16_t expression) of type t widened to float, through
// reduced_float.hpp's conversions.
inline std::string widen_bits(scalar_type t, const std::string& bits) {
  return cat(t == scalar_type::f16 ? "KILN__F16_TO_F32(" : "KILN__BF16_TO_F32(", bits, ")");
}

// The bits (uint16_t) of the 16-bit element in a 32-bit word expression: its high or low half.
inline std::string half_bits(const std::string& word, bool high) {
  return cat("(uint16_t)(", word, high ? " >> 16)" : " & 0xffffu)");
}

// The same element as float.
inline std::string half_of_word(scalar_type t, const std::string& word, bool high) {
  return widen_bits(t, half_bits(word, high));
}

// Float value v rounded to t's bits (uint16_t).
inline std::string bits_of(scalar_type t, const std::string& v) {
  return cat(t == scalar_type::f16 ? "KILN__F32_TO_F16(" : "KILN__F32_TO_BF16(", v, ")");
}

// Two elements' bits as one 32-bit word, lo at the lower address.
inline std::string pack_bits(const std::string& lo, const std::string& hi) {
  return cat("(uint32_t)", lo, " | ((uint32_t)", hi, " << 16)");
}

}  // namespace kiln::codegen
