// Fixture machinery of the conformance suite: every device test runs once per device present
// (kiln::device::all(): "cpu:0" always, "cuda:N" with a GPU), named after the device
// (".../cpu_0"), and every kernel source goes through compile_everywhere() so that a machine
// with NVRTC but no GPU still checks the CUDA dialect of every kernel.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <kiln/kiln.hpp>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace conformance {

// The architecture compile_everywhere() targets through NVRTC (the H100's).
inline constexpr const char* cuda_check_arch = "sm_90";

// Ids of every device present ("cpu:0", "cuda:0", ...), in kiln::device::all() order.
std::vector<std::string> device_ids();
// "cpu:0" -> "cpu_0": GoogleTest names allow only letters, digits and '_'.
std::string device_param_name(const ::testing::TestParamInfo<std::string>& info);

// True when the CUDA backend is loaded but has no device (NVRTC only: compile-only).
bool cuda_compile_only();
// In a test that compiles CUDA sources through NVRTC: skips it unless CUDA is compile-only.
#define KILN_SKIP_UNLESS_CUDA_COMPILE_ONLY()                                                 \
  if (!::conformance::cuda_compile_only())                                                   \
  GTEST_SKIP() << "CUDA is not in compile-only mode here: with a GPU, the per-device tests " \
                  "run the CUDA kernels"
// Compiles source for CUDA with kiln::compile_only("cuda", "sm_90", ...) when the CUDA backend
// is loaded without a device; a no-op otherwise (a GPU compiles it in its own tests). Throws
// what compile_only throws (kiln::compile_error with NVRTC's log). Each (source, options) is
// compiled once per process.
void compile_everywhere(std::string_view source, std::string_view options = {});
// compile_everywhere(), then kiln::program::compile for dev.
kiln::program compile(const kiln::device& dev, std::string_view source,
                      std::string_view options = {});

// Base of every per-device test: GetParam() is the device id.
class DeviceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { dev_.emplace(kiln::device::get(GetParam())); }
  const kiln::device& dev() const { return *dev_; }
  bool is_gpu() const { return dev().info().type == kiln::device_type::gpu; }
  // Problem sizes: small on the CPU (2 cores run the whole suite), large on GPUs.
  std::uint64_t size_for(std::uint64_t cpu_n, std::uint64_t gpu_n) const {
    return is_gpu() ? gpu_n : cpu_n;
  }
  kiln::program compile(std::string_view source, std::string_view options = {}) const {
    return conformance::compile(dev(), source, options);
  }
  // Another device to fall back to: the host's CPU device, or for the CPU device any other.
  std::optional<kiln::device> other() const {
    if (!(kiln::device::host() == dev())) return kiln::device::host();
    for (const kiln::device& d : kiln::device::all())
      if (!(d == dev())) return d;
    return std::nullopt;
  }

 private:
  std::optional<kiln::device> dev_;
};

// Instantiates a DeviceTest-derived suite once per device, e.g.
// "conformance/MemoryTest.X/cpu_0". Every test name of the suite contains "conformance", so
// `ctest -R conformance` selects exactly this binary's tests.
#define KILN_INSTANTIATE_PER_DEVICE(Suite)                                                       \
  INSTANTIATE_TEST_SUITE_P(conformance, Suite, ::testing::ValuesIn(::conformance::device_ids()), \
                           ::conformance::device_param_name)

// Skips the current test when the device lacks a feature, saying which and why it matters.
#define KILN_REQUIRE_FEATURE(dev, feat, why)                                    \
  do {                                                                          \
    if (!(dev).supports(::kiln::feature::feat))                                 \
      GTEST_SKIP() << (dev).id() << " (" << (dev).backend()                     \
                   << " backend) lacks kiln::feature::" #feat << ": " << (why); \
  } while (0)

// Skips the current test on devices that are not GPUs (large problem sizes).
#define KILN_REQUIRE_GPU(dev)                                                               \
  do {                                                                                      \
    if ((dev).info().type != ::kiln::device_type::gpu)                                      \
      GTEST_SKIP() << (dev).id() << " is not a GPU: the large-size case runs on GPUs only"; \
  } while (0)

// --- data --------------------------------------------------------------------------------

// A value no correct kernel in the suite writes, stored in outputs before a run so that an
// element left unwritten shows up. NaN for floating point (never equal to anything).
template <class T>
T poison() {
  if constexpr (std::is_floating_point_v<T>)
    return std::numeric_limits<T>::quiet_NaN();
  else if constexpr (std::is_same_v<T, bool>)
    return true;
  else
    return static_cast<T>(0x5a5a5a5a5a5a5a5aull);
}

template <class T>
bool is_poison(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  else
    return v == poison<T>();
}

// n seeded random values in [lo, hi], never zero (a zero would hide a missing write or add).
template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed, T lo, T hi) {
  std::mt19937_64 rng(seed);
  std::vector<T> out(n);
  for (T& v : out) {
    do {
      if constexpr (std::is_floating_point_v<T>) {
        v = static_cast<T>(std::uniform_real_distribution<double>(double(lo), double(hi))(rng));
      } else if constexpr (std::is_unsigned_v<T>) {
        v = static_cast<T>(std::uniform_int_distribution<std::uint64_t>(lo, hi)(rng));
      } else {
        v = static_cast<T>(std::uniform_int_distribution<std::int64_t>(lo, hi)(rng));
      }
    } while (v == T(0));
  }
  return out;
}

template <class T>
std::vector<T> random_values(std::size_t n, std::uint64_t seed) {
  if constexpr (std::is_floating_point_v<T>)
    return random_values<T>(n, seed, T(-100), T(100));
  else
    return random_values<T>(n, seed, std::numeric_limits<T>::lowest(),
                            std::numeric_limits<T>::max());
}

// Prints small integer types as numbers, not characters.
template <class T>
auto printable(T v) {
  if constexpr (std::is_integral_v<T> && sizeof(T) == 1)
    return static_cast<int>(v);
  else
    return v;
}

// Checks ok(i) for i in [0, n): reports how many failed and describe(i) for the first few, so a
// broken million-element result gives one readable failure.
template <class Ok, class Describe>
::testing::AssertionResult all_indices(std::uint64_t n, Ok ok, Describe describe) {
  std::uint64_t bad = 0;
  std::ostringstream first;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (ok(i)) continue;
    if (bad++ < 8) first << "\n  [" << i << "] " << describe(i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << n << " elements wrong:" << first.str() << (bad > 8 ? "\n  ..." : "");
}

// Exact element-wise equality (bit patterns for floating point, so NaN == NaN).
template <class T>
::testing::AssertionResult elements_equal(const std::vector<T>& got, const std::vector<T>& want) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  return all_indices(
      got.size(),
      [&](std::uint64_t i) {
        if constexpr (std::is_floating_point_v<T>)
          return std::memcmp(&got[i], &want[i], sizeof(T)) == 0;
        else
          return got[i] == want[i];
      },
      [&](std::uint64_t i) {
        std::ostringstream s;
        s << "got " << printable(got[i]) << (is_poison(got[i]) ? " (poison: never written)" : "")
          << ", expected " << printable(want[i]);
        return s.str();
      });
}

// |got - want| <= tol(i) element-wise; NaN in got always fails.
template <class T, class Tol>
::testing::AssertionResult elements_near(const std::vector<T>& got, const std::vector<double>& want,
                                         Tol tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  return all_indices(
      got.size(),
      [&](std::uint64_t i) {
        return !std::isnan(double(got[i])) && std::fabs(double(got[i]) - want[i]) <= tol(i);
      },
      [&](std::uint64_t i) {
        std::ostringstream s;
        s.precision(17);
        s << "got " << got[i] << ", expected " << want[i] << " +- " << tol(i);
        return s.str();
      });
}

// True when text has a line marked '>' (kiln's excerpt format, ">   12 | code") with that
// line number and code.
inline bool has_marked_line(const std::string& text, int line, std::string_view code) {
  std::istringstream in(text);
  const std::string number = " " + std::to_string(line) + " | ";
  for (std::string l; std::getline(in, l);)
    if (l.starts_with(">") && l.find(number) != std::string::npos &&
        l.find(code) != std::string::npos)
      return true;
  return false;
}

// Replaces every occurrence of `from` in `text` (kernel generation by substitution).
inline std::string substitute(std::string text, std::string_view from, std::string_view to) {
  for (std::size_t p = text.find(from); p != std::string::npos; p = text.find(from, p + to.size()))
    text.replace(p, from.size(), to);
  return text;
}

}  // namespace conformance
