// Can a CUDA device be used again, in the same process, after a sticky error? Each strategy
// runs in its own child process: fault the context (a wild store, or a trap), try one recovery
// sequence of the driver API, then run a small kernel and check its result. docs/resilience.md
// has the answer measured on the H200 (none recovers); rerun this on a new driver.
//
//   g++ -std=c++20 -O1 scripts/cuda_sticky_probe.cpp -I/usr/local/cuda/include
//       -L/usr/local/cuda/lib64/stubs -lcuda -pthread -o cuda_sticky_probe   (one line)
//   ./cuda_sticky_probe
#include <cuda.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

namespace {

// Prints a call and what it returned.
#define SHOW(call)                                        \
  do {                                                    \
    const CUresult r_ = (call);                           \
    const char* s_ = nullptr;                             \
    cuGetErrorName(r_, &s_);                              \
    std::printf("  %-50s -> %s\n", #call, s_ ? s_ : "?"); \
  } while (0)

const char* ptx = R"(
.version 7.0
.target sm_52
.address_size 64
.visible .entry wild(.param .u64 p) { .reg .u64 a; .reg .u32 v; mov.u64 a, 16; mov.u32 v, 1; st.global.u32 [a], v; ret; }
.visible .entry trapk(.param .u64 p) { trap; }
.visible .entry fill(.param .u64 p, .param .u32 v) { .reg .u64 a; .reg .u32 x; ld.param.u64 a, [p]; ld.param.u32 x, [v]; st.global.u32 [a], x; ret; }
)";

// Loads the module, fills one word on the device and reads it back.
bool small_kernel_works(const char* tag) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr d = 0;
  unsigned v = 1234, out = 0;
  CUresult r = cuModuleLoadData(&m, ptx);
  if (!r) r = cuModuleGetFunction(&f, m, "fill");
  if (!r) r = cuMemAlloc(&d, 4);
  void* args[] = {&d, &v};
  if (!r) r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
  if (!r) r = cuCtxSynchronize();
  if (!r) r = cuMemcpyDtoH(&out, d, 4);
  const char* s = nullptr;
  cuGetErrorName(r, &s);
  std::printf("  [%s] small kernel: %s, value %u\n", tag, s ? s : "?", out);
  return r == CUDA_SUCCESS && out == 1234;
}

void fault(const char* kernel) {
  CUmodule m;
  CUfunction f;
  CUdeviceptr d;
  cuMemAlloc(&d, 1024);
  cuModuleLoadData(&m, ptx);
  cuModuleGetFunction(&f, m, kernel);
  void* args[] = {&d};
  SHOW(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr));
  SHOW(cuCtxSynchronize());
  SHOW(cuMemAlloc(&d, 4));
}

enum strategy { reset_retain = 1, release_reset_retain, release_retain, own_ctx, count };
const char* names[] = {"", "primary reset, retain", "release, primary reset, retain",
                       "release, retain", "cuCtxDestroy, cuCtxCreate"};

int run(int s, const char* kernel) {
  cuInit(0);
  CUdevice dev;
  cuDeviceGet(&dev, 0);
  CUcontext c = nullptr, c2 = nullptr;
  if (s == own_ctx) {
    SHOW(cuCtxCreate(&c, nullptr, 0, dev));
  } else {
    SHOW(cuDevicePrimaryCtxRetain(&c, dev));
    SHOW(cuCtxSetCurrent(c));
  }
  std::thread([&] { cuCtxSetCurrent(c); }).join();  // current on another thread too, as in Kiln
  if (!small_kernel_works("before")) return 2;
  fault(kernel);
  switch (s) {
    case reset_retain:
      SHOW(cuCtxSetCurrent(nullptr));
      SHOW(cuDevicePrimaryCtxReset(dev));
      SHOW(cuDevicePrimaryCtxRetain(&c2, dev));
      SHOW(cuCtxSetCurrent(c2));
      break;
    case release_reset_retain:
      SHOW(cuCtxSetCurrent(nullptr));
      SHOW(cuDevicePrimaryCtxRelease(dev));
      SHOW(cuDevicePrimaryCtxReset(dev));
      SHOW(cuDevicePrimaryCtxRetain(&c2, dev));
      SHOW(cuCtxSetCurrent(c2));
      break;
    case release_retain:
      SHOW(cuCtxSetCurrent(nullptr));
      SHOW(cuDevicePrimaryCtxRelease(dev));
      SHOW(cuDevicePrimaryCtxRetain(&c2, dev));
      SHOW(cuCtxSetCurrent(c2));
      break;
    case own_ctx:
      SHOW(cuCtxDestroy(c));
      SHOW(cuCtxCreate(&c2, nullptr, 0, dev));
      break;
  }
  return small_kernel_works("after") ? 0 : 1;
}

}  // namespace

int main() {
  int recovered = 0;
  for (const char* kernel : {"wild", "trapk"})
    for (int s = reset_retain; s < count; ++s) {
      std::printf("== %s after %s\n", names[s], kernel);
      std::fflush(stdout);
      const pid_t p = fork();
      if (p == 0) {
        const int rc = run(s, kernel);
        std::fflush(stdout);
        _exit(rc);
      }
      int st = 0;
      waitpid(p, &st, 0);
      const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
      recovered += ok;
      std::printf("== %s after %s: %s\n", names[s], kernel, ok ? "RECOVERED" : "not recovered");
    }
  std::printf("%d of %d recovered\n", recovered, 2 * (count - 1));
}
