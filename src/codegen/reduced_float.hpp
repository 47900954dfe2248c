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
// Without branches: every case is computed and masks pick one (not `?:`, whose if-converted
// form g++ 12 refused to vectorise), so a CPU kernel's loop vectorises; a chain over halves went
// from ~13x float's time to ~1.3x. The subnormal cases add in float: exact, or rounded to
// nearest even in the FPU's default mode. Results match the former branchy form bit for bit,
// NaN payloads included (checked over all 2^32 floats).
KILN_FUNC uint16_t kiln__soft_f32_to_f16(float f) {
  const uint32_t x = kiln__as_uint(f), sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  const uint32_t nan = 0x7e00u | ((a >> 13) & 0x3ffu);
  const uint32_t sub = kiln__as_uint(kiln__as_float(a) + 0.5f) - 0x3f000000u;  // below 2^-14
  const uint32_t normal = (a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13;  // rebiased, ties to even
  const uint32_t is_nan = 0u - (uint32_t)(a > 0x7f800000u);
  const uint32_t is_inf = (0u - (uint32_t)(a >= 0x477ff000u)) & ~is_nan;
  const uint32_t is_sub = 0u - (uint32_t)(a < 0x38800000u);
  return (uint16_t)(sign | (nan & is_nan) | (0x7c00u & is_inf) | (sub & is_sub) |
                    (normal & ~(is_nan | is_inf | is_sub)));
}
KILN_FUNC float kiln__soft_f16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16, em = (uint32_t)(h & 0x7fffu) << 13;
  const uint32_t e = em & 0x0f800000u;
  const uint32_t normal = em + 0x38000000u;   // exponent rebiased from 15 to 127
  const uint32_t special = em | 0x7f800000u;  // infinity, NaN
  const uint32_t sub = kiln__as_uint(kiln__as_float(em + 0x38800000u) - kiln__as_float(0x38800000u));
  const uint32_t is_special = 0u - (uint32_t)(e == 0x0f800000u), is_sub = 0u - (uint32_t)(e == 0u);
  return kiln__as_float(sign | (special & is_special) | (sub & is_sub) |
                        (normal & ~(is_special | is_sub)));
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
