// Fixture machinery of the kiln::query tests: the conformance suite's per-device fixture
// (every test runs once per device present, named after it), instantiated under the prefix
// "query" so that `ctest -R query` selects exactly these tests; element type lists; seeded
// input data; host references in the spec's result types; float tolerances.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "conformance/backends.hpp"

namespace query_test {

using conformance::elements_equal;
using conformance::printable;

// Instantiates a DeviceTest-derived suite once per device: "query/OperatorsTest.X/cpu_0".
#define KILN_INSTANTIATE_QUERY_PER_DEVICE(Suite)                                           \
  INSTANTIATE_TEST_SUITE_P(query, Suite, ::testing::ValuesIn(::conformance::device_ids()), \
                           ::conformance::device_param_name)

class QueryTest : public conformance::DeviceTest {
 protected:
  // The sizes every stage and terminal is run at: empty, tiny, odd sizes around powers of two
  // (no multiple of any work-group or chunk size), and on GPUs one size of several blocks'
  // worth of work per SM.
  std::vector<std::uint64_t> sizes() const {
    std::vector<std::uint64_t> s = {0, 1, 2, 255, 257, 4097, 100003};
    if (is_gpu()) s.push_back(3000017);
    return s;
  }
  kiln::query_stats stats() const { return kiln::last_query_stats(); }
};

// ---- element types --------------------------------------------------------------------------

template <class... T>
struct type_list {};
using all_types =
    type_list<bool, std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
              std::uint16_t, std::uint32_t, std::uint64_t, float, double>;
// Two disjoint sets of four types, one of each kind and several sizes, for the checks whose
// generated code varies less with the element type (the all_types checks cover the rest).
// Every CPU query shape is a host-compiler run (~0.25 s on 2 cores), so the suite spends its
// type coverage where the generated code differs most: loads, promotions, accumulators.
using types_a = type_list<bool, std::int16_t, std::uint64_t, float>;
using types_b = type_list<std::int8_t, std::uint32_t, std::int64_t, double>;
using types_ab = type_list<bool, std::int16_t, std::uint64_t, float, std::int8_t, std::uint32_t,
                           std::int64_t, double>;

template <class T>
std::string name_of() {
  return kiln::type_name(kiln::scalar_type_of<T>);
}

// Calls f.template operator()<T>() for every T of the list, each under a SCOPED_TRACE naming T.
template <class... T, class F>
void for_each_type(type_list<T...>, F&& f) {
  (
      [&] {
        SCOPED_TRACE("element type " + name_of<T>());
        f.template operator()<T>();
      }(),
      ...);
}

template <class T, class... U>
constexpr bool type_in(type_list<U...>) {
  return (std::is_same_v<T, U> || ...);
}

// The spec's sum type: int64 for signed integers and bool, uint64 for unsigned, T for floats.
template <class T>
using sum_type =
    std::conditional_t<std::is_floating_point_v<T>, T,
                       std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>,
                                          std::uint64_t, std::int64_t>>;

// ---- data -----------------------------------------------------------------------------------

// n seeded random values, never all zero: full range for 8/16-bit integers and unsigned types,
// |x| < 2^40 for int64 and full range for int32 (so sums of up to 2^23 elements fit int64),
// [-100, 100] for floating point, fair coin flips (at least one true) for bool.
template <class T>
std::vector<T> data(std::size_t n, std::uint64_t seed) {
  if constexpr (std::is_same_v<T, bool>) {
    std::mt19937_64 rng(seed);
    std::vector<bool> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = (rng() >> 17) & 1;
    if (n) out[n / 2] = true;
    return out;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return conformance::random_values<T>(n, seed, -(std::int64_t{1} << 40), std::int64_t{1} << 40);
  } else {
    return conformance::random_values<T>(n, seed);
  }
}

// n values from a small set (1..5 and, for signed types, their negatives), so that minima and
// maxima occur many times: first-position-on-ties checks.
template <class T>
std::vector<T> tie_data(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    int k = static_cast<int>(rng() % 5) + 1;
    if (std::is_signed_v<T> && (rng() & 1)) k = -k;
    if constexpr (std::is_same_v<T, bool>)
      out[i] = k > 2;
    else if constexpr (std::is_floating_point_v<T>)
      out[i] = static_cast<T>(k) * T(0.75);
    else
      out[i] = static_cast<T>(k);
  }
  return out;
}

// Copies host data to dev (std::vector<bool> included).
template <class T>
kiln::buffer<T> upload(const kiln::device& dev, const std::vector<T>& v) {
  return kiln::buffer<T>(dev, v);
}

// ---- references and comparisons -------------------------------------------------------------

// Exact integer sum in the sum type: wraps modulo 2^64 like the device's 64-bit accumulator
// (the inputs of the signed cases are chosen so that nothing overflows: the reference is then
// the exact value). Floating point: see ref_fsum.
template <class T>
sum_type<T> ref_sum(const std::vector<T>& v) {
  static_assert(!std::is_floating_point_v<T>);
  std::uint64_t s = 0;
  for (T x : v) s += static_cast<std::uint64_t>(static_cast<sum_type<T>>(x));
  return static_cast<sum_type<T>>(s);
}

// Floating-point reference sum, in long double.
template <class T>
double ref_fsum(const std::vector<T>& v) {
  long double s = 0;
  for (T x : v) s += x;
  return static_cast<double>(s);
}

template <class T>
double max_abs_of(const std::vector<T>& v) {
  double m = 0;
  for (T x : v) m = std::max(m, std::fabs(static_cast<double>(x)));
  return m;
}

// Tolerance of a floating-point sum of n terms against a double-precision reference:
// 1e-5 (float) or 1e-13 (double) relative, times a sqrt(n) scale:
//   rel * sqrt(n) * max(max|term|, |reference| / sqrt(n)).
// A device sums in its own association (chunks, trees); rounding errors of random sign grow
// like eps * sqrt(n) times the partial sums' size, which is about max|term| for terms of mixed
// sign and |sum| / sqrt(n) per chunk for terms of one sign. The bound is ~10x that for float
// (eps 6e-8) and ~500x for double, and still well below one missing or doubled term of
// typical size.
template <class T>
double sum_tolerance(std::uint64_t n, double max_abs, double reference = 0) {
  const double rel = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  const double root = std::sqrt(static_cast<double>(std::max<std::uint64_t>(n, 1)));
  return rel * root * std::max(max_abs, std::fabs(reference) / root) + 1e-300;
}

// Element-wise comparison of a floating-point scan with double references: element i is a sum
// of i + 1 terms of magnitude at most max_abs, so it gets sum_tolerance(i + 1), times 4 because
// a scan's later elements carry the rounding of every earlier partial sum.
template <class T>
::testing::AssertionResult scan_near(const std::vector<T>& got, const std::vector<double>& want,
                                     double max_abs) {
  return conformance::elements_near(
      got, want, [&](std::uint64_t i) { return 4 * sum_tolerance<T>(i + 1, max_abs, want[i]); });
}

// Bits of a value as text, for messages.
template <class T>
std::string show(T v) {
  std::ostringstream s;
  s.precision(17);
  s << printable(v);
  return s.str();
}

// The expected number of generated-kernel launches for a fully fused chain (see the spec:
// GPUs run any fused chain plus its terminal in one launch; the CPU backend runs map chains in
// one launch and filter-collect, reductions and scans in a chunk pass plus a finishing pass).
struct launches {
  std::uint64_t gpu, cpu;
};

// RAII: sets an environment variable for the scope of a test, restoring the old value after.
class scoped_env {
 public:
  scoped_env(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace query_test
