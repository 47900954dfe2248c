// Shared state and helpers of the CUDA plugin tests (cuda_plugin_test.cpp, cuda_device_test.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "backend_abi.h"

namespace kiln_test {

// Set by the global test environment in cuda_plugin_test.cpp.
inline void* g_lib = nullptr;
inline kiln_backend_entry_fn g_entry = nullptr;
inline const kiln_backend* g_be = nullptr;
inline kiln_status g_init = KILN_ERR_UNSUPPORTED;

inline bool has_nvrtc() {
  char id[64];
  return g_init == KILN_OK && g_be->compiler_id(id, sizeof id) == KILN_OK;
}

#define REQUIRE_NVRTC() \
  if (!has_nvrtc()) GTEST_SKIP() << "no NVRTC: " << g_be->availability()
#define REQUIRE_DEVICE()                              \
  if (g_init != KILN_OK || g_be->device_count() == 0) \
  GTEST_SKIP() << "no CUDA device: " << g_be->availability()

#define EXPECT_KILN_OK(expr) EXPECT_EQ((expr), KILN_OK) << g_be->last_error()
#define ASSERT_KILN_OK(expr) ASSERT_EQ((expr), KILN_OK) << g_be->last_error()

inline const char* kTinyKernel =
    R"(extern "C" __global__ void k(float* p) { p[threadIdx.x] = 1.f; })";

inline const char* kKernels = R"(
extern "C" __global__ void axpb(const float* x, float* y, float a, float b, unsigned n) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b;
}
extern "C" __global__ void spin(long long cycles) {
  long long start = clock64();
  while (clock64() - start < cycles) {}
}
extern "C" __global__ void empty() {}
extern "C" __global__ void index2d(unsigned* out, unsigned w) {
  unsigned x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  out[y * w + x] = y * 1000u + x;
}
)";

// RAII helpers over the C handles.
struct Device {
  kiln_device_h h = nullptr;
  kiln_queue_h q = nullptr;
  Device() {
    EXPECT_KILN_OK(g_be->device_open(0, &h));
    if (h) {
      EXPECT_KILN_OK(g_be->queue_create(h, &q));
    }
  }
  ~Device() {
    if (q) g_be->queue_destroy(q);
    if (h) g_be->device_close(h);
  }
};

struct Program {
  kiln_program_h h = nullptr;
  Program(kiln_device_h dev, const char* src) {
    kiln_blob blob{};
    const char* log = nullptr;
    EXPECT_KILN_OK(g_be->compile(dev, nullptr, src, "", &blob, &log)) << log;
    if (!blob.data) return;
    EXPECT_KILN_OK(g_be->program_load(dev, blob.data, blob.size, &h));
    g_be->free_blob(blob);
  }
  ~Program() {
    if (h) g_be->program_unload(h);
  }
  kiln_kernel_h kernel(const char* name) {
    kiln_kernel_h k = nullptr;
    EXPECT_KILN_OK(g_be->kernel_get(h, name, &k));
    return k;
  }
};

inline kiln_launch_dims dims1(uint64_t groups, uint32_t local) {
  kiln_launch_dims d{};
  d.dims = 1;
  d.groups[0] = groups;
  d.local[0] = local;
  return d;
}

inline kiln_kernel_arg mem_arg(const kiln_mem_ref* m) { return {m, sizeof(kiln_mem_ref), 1}; }
template <class T>
kiln_kernel_arg val_arg(const T* v) {
  return {v, sizeof(T), 0};
}

}  // namespace kiln_test
