// Shared by the linalg tests: a double-precision reference, random operands, the path each
// device should take, and the error bound each result is held to.
#pragma once

#include <cmath>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "conformance/backends.hpp"
#include "conformance/scoped_env.hpp"
#include "linalg/linalg.hpp"  // the kernel sources (src/linalg)

namespace linalg_test {

// Random values in [-1, -0.25] u [0.25, 1]: never zero, so every product term matters.
template <class T>
std::vector<T> random_values(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> mag(0.25, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>((rng() & 1 ? 1 : -1) * mag(rng));
  return v;
}

// Error bound for one element computed in T from k products: (k + 2) rounding steps of unit
// eps, each relative to the magnitudes summed (|alpha| sum |a||b| + |beta| |c|), times 2 for
// the order of summation (blocked, FMA or not). TF32 rounds inputs to 10 mantissa bits.
template <class T>
double bound(std::uint64_t k, double magnitude, bool tf32 = false) {
  const double eps = tf32 ? std::ldexp(1.0, -10) : std::numeric_limits<T>::epsilon();
  return 2.0 * eps * double(k + 2) * magnitude + std::numeric_limits<T>::min();
}

template <class T>
constexpr bool sixteen_bit = std::is_same_v<T, kiln::half> || std::is_same_v<T, kiln::bfloat16>;

// A NaN of T, to poison C where beta = 0 (numeric_limits knows no 16-bit float).
template <class T>
T poison() {
  if constexpr (std::is_same_v<T, kiln::half>)
    return kiln::half::from_bits(0x7e00);
  else if constexpr (std::is_same_v<T, kiln::bfloat16>)
    return kiln::bfloat16::from_bits(0x7fc0);
  else
    return std::numeric_limits<T>::quiet_NaN();
}

// 16-bit products accumulate in f32 and round once to T (half: 11 bits, bf16: 8); want is the
// exact result.
template <class T>
double tolerance(std::uint64_t k, double magnitude, double want, bool tf32) {
  if constexpr (sixteen_bit<T>)
    return bound<float>(k, magnitude) +
           std::ldexp(std::fabs(want), std::is_same_v<T, kiln::half> ? -11 : -8);
  else
    return bound<T>(k, magnitude, tf32);
}

// The path a device's GEMM takes with the library in place (unless KILN_LINALG_PORTABLE is
// set): PoCL (OpenCL, barriers) must run the tiled kernel.
inline kiln::linalg::path expected_path(const kiln::device& dev) {
  if (*kiln::linalg::vendor_library(dev)) return kiln::linalg::path::vendor;
  return dev.supports(kiln::feature::barrier) ? kiln::linalg::path::tiled
                                              : kiln::linalg::path::simple;
}
// GEMV's portable kernel is the per-element one everywhere.
inline kiln::linalg::path expected_gemv_path(const kiln::device& dev) {
  return *kiln::linalg::vendor_library(dev) ? kiln::linalg::path::vendor
                                            : kiln::linalg::path::simple;
}

using conformance::scoped_env;  // KILN_LINALG_PORTABLE for a scope

}  // namespace linalg_test
