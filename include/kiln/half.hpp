// 16-bit floating-point storage types on the host: kiln::half (IEEE binary16, scalar_type::f16)
// and kiln::bfloat16 (the top half of a binary32, scalar_type::bf16). They hold bits and convert
// to and from float; arithmetic happens in float, as it does inside Kiln's kernels (DESIGN 12).
//
//   kiln::half h(0.1f);                       // rounded to nearest, ties to even
//   float f = h;                              // exact widening: 0.0999755859375f
//   auto t = kiln::tensor::from(dev, std::vector<kiln::bfloat16>{1.5f, -2.f}, {2});
//   auto u = (t * 2).to(kiln::scalar_type::f32);   // computed in f32, stored as bf16 before to()
#pragma once

#include <bit>
#include <cstdint>
#include <type_traits>

namespace kiln {

namespace detail {
// binary32 -> binary16, round to nearest even; NaN stays NaN (quiet), overflow gives infinity.
constexpr std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // rounds past 65504
  if (a < 0x38800000u) {  // below 2^-14: a subnormal half (or zero)
    if (a < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the least one
    const std::uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24: puts the value in units of 2^-24
    const std::uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1);
    return static_cast<std::uint16_t>(sign | (q + (rem > half || (rem == half && (q & 1u)))));
  }
  const std::uint32_t r = a - 0x38000000u;  // rebias the exponent from 127 to 15
  const std::uint32_t q = r >> 13, rem = r & 0x1fffu;
  return static_cast<std::uint16_t>(sign | (q + (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))));
}

// Branch-free (selects, not jumps), so loops over arrays of halves vectorise.
constexpr float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  const std::uint32_t normal = ((e + 112u) << 23) | (m << 13);
  const std::uint32_t special = 0x7f800000u | (m << 13);  // infinity, NaN (payload kept)
  // Zero or subnormal: m * 2^-24, exact in binary32.
  const std::uint32_t small =
      std::bit_cast<std::uint32_t>(static_cast<float>(m) * 5.9604644775390625e-8f);
  // Masks, not ternaries: GCC leaves a select chain as jumps, which stops vectorisation.
  const std::uint32_t is_small = 0u - std::uint32_t(e == 0),
                      is_special = 0u - std::uint32_t(e == 0x1fu);
  const std::uint32_t bits =
      (small & is_small) | (special & is_special) | (normal & ~(is_small | is_special));
  return std::bit_cast<float>(sign | bits);
}

// binary32 -> bfloat16, round to nearest even; NaN stays NaN (quiet).
constexpr std::uint16_t f32_to_bf16_bits(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((x >> 16) | 0x40u);
  return static_cast<std::uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

constexpr float bf16_bits_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(std::uint32_t(b) << 16);
}
}  // namespace detail

// A 16-bit float: `bits` in the format, conversions from every arithmetic type (through
// float) and to float; arithmetic and comparisons happen on the float value.
#define KILN_FLOAT16_TYPE(name, to_bits, to_float)                                     \
  struct name {                                                                        \
    std::uint16_t bits; /* trivial, as float is: uninitialised unless given a value */ \
    constexpr name() = default;                                                        \
    template <class T> /* arithmetic types, and the other 16-bit float */              \
    requires std::is_convertible_v<T, float>                                           \
    constexpr name(T v) : bits(detail::to_bits(static_cast<float>(v))) {}              \
    static constexpr name from_bits(std::uint16_t b) {                                 \
      name r;                                                                          \
      r.bits = b;                                                                      \
      return r;                                                                        \
    }                                                                                  \
    constexpr operator float() const { return detail::to_float(bits); }                \
  };
KILN_FLOAT16_TYPE(half, f32_to_f16_bits, f16_bits_to_f32)
KILN_FLOAT16_TYPE(bfloat16, f32_to_bf16_bits, bf16_bits_to_f32)
#undef KILN_FLOAT16_TYPE

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2);

}  // namespace kiln
