// The kernel language's 16-bit float storage types, text shared by every dialect's prelude
// (DESIGN 12: stored in 16 bits, computed in float, rounded once at the store):
//
//   KILN_GLOBAL const half* x;  KILN_GLOBAL bfloat16* y;
//   const float v = kiln_half_to_float(x[i]) * 2.0f;
//   y[i] = kiln_float_to_bfloat16(v);              // round to nearest, ties to even
//   kiln_round_half(v)                              // v rounded to half precision, as a float
//
// `half` and `bfloat16` are structs of 16 bits (`bits`), so they copy everywhere and never do
// arithmetic by accident. A dialect defines kiln__as_uint(f) and kiln__as_float(u) (bit casts)
// and KILN_FUNC before this text; it may define KILN__F16_TO_F32(bits)/KILN__F32_TO_F16(f) (and
// the BF16 pair) to use its hardware conversions, else the software ones below are used.
// A dialect where `half` is a keyword (OpenCL C) defines KILN__HALF_IS_KEYWORD: the name is
// then a macro for the struct.
#pragma once

namespace kiln::codegen {

inline constexpr const char reduced_float_text[] = R"KILN(
KILN_FUNC uint16_t kiln__soft_f32_to_f16(float f) {
  const uint32_t x = kiln__as_uint(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return (uint16_t)sign;
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126u - e;
    const uint32_t q = m >> sh, rem = m & ((1u << sh) - 1u), hf = 1u << (sh - 1u);
    return (uint16_t)(sign | (q + ((rem > hf || (rem == hf && (q & 1u))) ? 1u : 0u)));
  }
  const uint32_t r = a - 0x38000000u, q = r >> 13, rem = r & 0x1fffu;
  return (uint16_t)(sign | (q + ((rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ? 1u : 0u)));
}
KILN_FUNC float kiln__soft_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return kiln__as_float(sign | 0x7f800000u | (m << 13));
  if (e != 0u) return kiln__as_float(sign | ((e + 112u) << 23) | (m << 13));
  const float v = (float)m * 5.9604644775390625e-8f;
  return sign ? -v : v;
}
KILN_FUNC uint16_t kiln__soft_f32_to_bf16(float f) {
  const uint32_t x = kiln__as_uint(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
  return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}
KILN_FUNC float kiln__soft_bf16_to_f32(uint16_t b) { return kiln__as_float((uint32_t)b << 16); }
#ifndef KILN__F16_TO_F32
#define KILN__F16_TO_F32 kiln__soft_f16_to_f32
#define KILN__F32_TO_F16 kiln__soft_f32_to_f16
#endif
#ifndef KILN__BF16_TO_F32
#define KILN__BF16_TO_F32 kiln__soft_bf16_to_f32
#define KILN__F32_TO_BF16 kiln__soft_f32_to_bf16
#endif
typedef struct { uint16_t bits; } kiln_half_t;
typedef struct { uint16_t bits; } kiln_bfloat16_t;
#ifdef KILN__HALF_IS_KEYWORD
#define half kiln_half_t
#else
typedef kiln_half_t half;
#endif
typedef kiln_bfloat16_t bfloat16;
KILN_FUNC float kiln_half_to_float(half h) { return KILN__F16_TO_F32(h.bits); }
KILN_FUNC half kiln_float_to_half(float f) { half h; h.bits = KILN__F32_TO_F16(f); return h; }
KILN_FUNC float kiln_round_half(float f) { return KILN__F16_TO_F32(KILN__F32_TO_F16(f)); }
KILN_FUNC float kiln_bfloat16_to_float(bfloat16 b) { return KILN__BF16_TO_F32(b.bits); }
KILN_FUNC bfloat16 kiln_float_to_bfloat16(float f) {
  bfloat16 b; b.bits = KILN__F32_TO_BF16(f); return b;
}
KILN_FUNC float kiln_round_bfloat16(float f) { return KILN__BF16_TO_F32(KILN__F32_TO_BF16(f)); }
)KILN";

}  // namespace kiln::codegen
