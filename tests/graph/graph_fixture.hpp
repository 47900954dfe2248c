// Shared by the kiln::graph tests: per-device instantiation ("graph/Suite.Test/cpu_0", so
// `ctest -R graph` selects them), the kernels the stages run, and host references.
#pragma once

#include <kiln/testing/fault_injection.hpp>

#include "conformance/backends.hpp"

#define KILN_INSTANTIATE_GRAPH_PER_DEVICE(Suite)                                           \
  INSTANTIATE_TEST_SUITE_P(graph, Suite, ::testing::ValuesIn(::conformance::device_ids()), \
                           ::conformance::device_param_name)

namespace graph_test {

constexpr const char* kernels = R"(
KILN_KERNEL void scale(KILN_GLOBAL float* out, KILN_GLOBAL const float* in, float a) {
  const uint64_t i = kiln_global_id(0);
  out[i] = in[i] * a;
}
KILN_KERNEL void add(KILN_GLOBAL float* out, KILN_GLOBAL const float* x, KILN_GLOBAL const float* y) {
  const uint64_t i = kiln_global_id(0);
  out[i] = x[i] + y[i];
}
KILN_KERNEL void plus(KILN_GLOBAL float* x, float c) {
  const uint64_t i = kiln_global_id(0);
  x[i] = x[i] + c;
}
KILN_KERNEL void produce(KILN_GLOBAL uint32_t* out, uint32_t seed, uint32_t rounds) {
  const uint64_t i = kiln_global_id(0);
  uint32_t v = (uint32_t)i ^ seed;
  for (uint32_t r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
  out[i] = v;
}
KILN_KERNEL void blend(KILN_GLOBAL uint32_t* out, KILN_GLOBAL const uint32_t* a, KILN_GLOBAL const uint32_t* b) {
  const uint64_t i = kiln_global_id(0);
  out[i] = a[i] ^ (b[i] * 3u);
})";

// `rounds` LCG steps of (i ^ seed), as `produce` computes them.
inline std::vector<std::uint32_t> produced(std::uint64_t n, std::uint32_t seed,
                                           std::uint32_t rounds) {
  std::vector<std::uint32_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint32_t x = std::uint32_t(i) ^ seed;
    for (std::uint32_t r = 0; r < rounds; ++r) x = x * 1664525u + 1013904223u;
    v[i] = x;
  }
  return v;
}

class GraphTest : public conformance::DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    prog_.emplace(compile(kernels));
  }
  void TearDown() override { kiln::testing::clear_faults(); }
  kiln::kernel k(const char* name) const { return prog_->get_kernel(name); }
  std::vector<float> random(std::size_t n, std::uint64_t seed) const {
    return conformance::random_values<float>(n, seed, -100.f, 100.f);
  }
  template <class T>
  kiln::buffer<T> poisoned(std::size_t n) const {
    return kiln::buffer<T>(dev(), std::vector<T>(n, conformance::poison<T>()));
  }
  // Another device for fallbacks and foreign-device checks, if the machine has one.
  std::optional<kiln::device> other() const {
    for (const kiln::device& d : kiln::device::all())
      if (!(d == dev())) return d;
    return std::nullopt;
  }

 private:
  std::optional<kiln::program> prog_;
};

}  // namespace graph_test
