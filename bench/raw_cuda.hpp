// The raw CUDA driver-API baselines, loaded with dlopen("libcuda.so.1") so that the benchmark
// runs (CPU rows only) where there is no driver. The few driver types are declared here
// instead of including cuda.h: the benchmark then builds without the CUDA toolkit.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace kiln_bench {

class raw_cuda {
 public:
  // nullptr with *why set when the driver or a GPU is missing.
  static std::unique_ptr<raw_cuda> open(int ordinal, std::string* why);
  ~raw_cuda();
  raw_cuda(const raw_cuda&) = delete;
  raw_cuda& operator=(const raw_cuda&) = delete;

  // Seconds for n back-to-back cuLaunchKernel of an empty kernel (same parameter bytes as
  // Kiln's rendered kernel) plus one final stream sync; with sync_each, a sync after each.
  double launch_loop(int n, bool sync_each, unsigned block);
  // Median seconds of one replay (cuGraphLaunch + stream sync) of a CUDA graph of `stages`
  // dependent empty-kernel launches captured from the stream, after 3 warm-up replays.
  // Throws std::runtime_error when the driver lacks the graph API.
  double graph_replay_median(int stages, int replays, unsigned block);
  // Median seconds of one cuMemAlloc + cuMemFree of `bytes`, over n iterations.
  double alloc_free_median(int n, std::uint64_t bytes);

  struct api;  // function pointers, defined in raw_cuda.cpp

 private:
  raw_cuda() = default;
  void check(int result, const char* call) const;  // throws std::runtime_error

  std::unique_ptr<api> api_;
  int device_ = 0;
  void* ctx_ = nullptr;             // CUcontext: the device's primary context, as Kiln uses
  void* module_ = nullptr;          // CUmodule
  void* kernel_ = nullptr;          // CUfunction
  void* stream_ = nullptr;          // CUstream, non-blocking like Kiln's queues
  unsigned long long arg_mem_ = 0;  // CUdeviceptr passed as the kernel's pointer argument
};

}  // namespace kiln_bench
