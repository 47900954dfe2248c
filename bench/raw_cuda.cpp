// Raw driver-API baselines: launch loop over an embedded PTX kernel, cuMemAlloc/cuMemFree.
#include "raw_cuda.hpp"

#include <dlfcn.h>

#include <stdexcept>
#include <vector>

#include "bench_report.hpp"

namespace kiln_bench {

namespace {

// The driver's ABI, as far as these baselines use it (cuda.h spells the same types).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = void*;
using CUmodule = void*;
using CUfunction = void*;
using CUstream = void*;
constexpr CUresult cuda_success = 0;
constexpr unsigned stream_non_blocking = 0x1;

// An empty kernel with the parameters Kiln renders for `empty(KILN_GLOBAL float* p)`: the
// pointer, then the 24-byte launch range Kiln appends to every entry. PTX ISA 8.0 (CUDA 12.0)
// is the oldest that any CUDA 12/13 driver JITs for sm_90; `ptxas -arch=sm_90` accepts it.
constexpr const char* empty_ptx = R"(
.version 8.0
.target sm_90
.address_size 64

.visible .entry empty(
  .param .u64 empty_param_p,
  .param .align 8 .b8 empty_param_range[24]
)
{
  ret;
}
)";

}  // namespace

struct raw_cuda::api {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxSetCurrent)(CUcontext);
  CUresult (*cuModuleLoadData)(CUmodule*, const void*);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void**, void**);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr*, std::size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  // The graph API, optional: graph_replay_median refuses without it.
  CUresult (*cuStreamBeginCapture)(CUstream, int) = nullptr;
  CUresult (*cuStreamEndCapture)(CUstream, void**) = nullptr;
  CUresult (*cuGraphInstantiateWithFlags)(void**, void*, unsigned long long) = nullptr;
  CUresult (*cuGraphLaunch)(void*, CUstream) = nullptr;
  CUresult (*cuGraphDestroy)(void*) = nullptr;
  CUresult (*cuGraphExecDestroy)(void*) = nullptr;
};

std::unique_ptr<raw_cuda> raw_cuda::open(int ordinal, std::string* why) {
  // NODELETE, as Kiln's plugin does: the driver keeps threads that must not be unmapped.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char* e = dlerror();
    *why = std::string("no NVIDIA driver (") + (e ? e : "libcuda.so.1 not found") + ")";
    return nullptr;
  }
  auto a = std::make_unique<api>();
  a->lib = lib;
  std::string missing;
  auto load = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  load(a->cuInit, "cuInit");
  load(a->cuDeviceGetCount, "cuDeviceGetCount");
  load(a->cuDeviceGet, "cuDeviceGet");
  load(a->cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
  load(a->cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2");
  load(a->cuCtxSetCurrent, "cuCtxSetCurrent");
  load(a->cuModuleLoadData, "cuModuleLoadData");
  load(a->cuModuleUnload, "cuModuleUnload");
  load(a->cuModuleGetFunction, "cuModuleGetFunction");
  load(a->cuLaunchKernel, "cuLaunchKernel");
  load(a->cuStreamCreate, "cuStreamCreate");
  load(a->cuStreamDestroy, "cuStreamDestroy_v2");
  load(a->cuStreamSynchronize, "cuStreamSynchronize");
  load(a->cuMemAlloc, "cuMemAlloc_v2");
  load(a->cuMemFree, "cuMemFree_v2");
  load(a->cuGetErrorString, "cuGetErrorString");
  if (!missing.empty()) {
    *why = "libcuda.so.1 lacks " + missing;
    return nullptr;
  }
  auto load_optional = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
  };
  load_optional(a->cuStreamBeginCapture, "cuStreamBeginCapture_v2");
  load_optional(a->cuStreamEndCapture, "cuStreamEndCapture");
  load_optional(a->cuGraphInstantiateWithFlags, "cuGraphInstantiateWithFlags");
  load_optional(a->cuGraphLaunch, "cuGraphLaunch");
  load_optional(a->cuGraphDestroy, "cuGraphDestroy");
  load_optional(a->cuGraphExecDestroy, "cuGraphExecDestroy");
  int count = 0;
  if (a->cuInit(0) != cuda_success || a->cuDeviceGetCount(&count) != cuda_success ||
      count <= ordinal) {
    *why = "CUDA driver present but no usable GPU " + std::to_string(ordinal);
    return nullptr;
  }

  std::unique_ptr<raw_cuda> r(new raw_cuda);
  r->api_ = std::move(a);
  try {
    api& d = *r->api_;
    r->check(d.cuDeviceGet(&r->device_, ordinal), "cuDeviceGet");
    r->check(d.cuDevicePrimaryCtxRetain(&r->ctx_, r->device_), "cuDevicePrimaryCtxRetain");
    r->check(d.cuCtxSetCurrent(r->ctx_), "cuCtxSetCurrent");
    r->check(d.cuModuleLoadData(&r->module_, empty_ptx), "cuModuleLoadData");
    r->check(d.cuModuleGetFunction(&r->kernel_, r->module_, "empty"), "cuModuleGetFunction");
    r->check(d.cuStreamCreate(&r->stream_, stream_non_blocking), "cuStreamCreate");
    r->check(d.cuMemAlloc(&r->arg_mem_, 256), "cuMemAlloc");
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
  return r;
}

raw_cuda::~raw_cuda() {
  if (!api_) return;
  api& d = *api_;
  if (ctx_) d.cuCtxSetCurrent(ctx_);
  if (arg_mem_) d.cuMemFree(arg_mem_);
  if (stream_) d.cuStreamDestroy(stream_);
  if (module_) d.cuModuleUnload(module_);
  if (ctx_) d.cuDevicePrimaryCtxRelease(device_);
}

void raw_cuda::check(int result, const char* call) const {
  if (result == cuda_success) return;
  const char* text = nullptr;
  if (api_->cuGetErrorString) api_->cuGetErrorString(result, &text);
  throw std::runtime_error(std::string(call) + " failed: " + (text ? text : "unknown error") +
                           " (" + std::to_string(result) + ")");
}

double raw_cuda::launch_loop(int n, bool sync_each, unsigned block) {
  api& d = *api_;
  check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");  // Kiln may have made its own current
  CUdeviceptr p = arg_mem_;
  struct {
    std::uint64_t n[3];
  } range = {{1, 1, 1}};
  void* params[] = {&p, &range};
  const auto t0 = clock_type::now();
  for (int i = 0; i < n; ++i) {
    check(d.cuLaunchKernel(kernel_, 1, 1, 1, block, 1, 1, 0, stream_, params, nullptr),
          "cuLaunchKernel");
    if (sync_each) check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  }
  check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
  return seconds_since(t0);
}

double raw_cuda::graph_replay_median(int stages, int replays, unsigned block) {
  api& d = *api_;
  if (!d.cuStreamBeginCapture || !d.cuStreamEndCapture || !d.cuGraphInstantiateWithFlags ||
      !d.cuGraphLaunch || !d.cuGraphDestroy || !d.cuGraphExecDestroy)
    throw std::runtime_error("libcuda.so.1 lacks the graph API");
  check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  CUdeviceptr p = arg_mem_;
  struct {
    std::uint64_t n[3];
  } range = {{1, 1, 1}};
  void* params[] = {&p, &range};
  constexpr int capture_relaxed = 2;  // CU_STREAM_CAPTURE_MODE_RELAXED
  check(d.cuStreamBeginCapture(stream_, capture_relaxed), "cuStreamBeginCapture");
  for (int i = 0; i < stages; ++i)
    check(d.cuLaunchKernel(kernel_, 1, 1, 1, block, 1, 1, 0, stream_, params, nullptr),
          "cuLaunchKernel (captured)");
  void* graph = nullptr;
  void* exec = nullptr;
  check(d.cuStreamEndCapture(stream_, &graph), "cuStreamEndCapture");
  const int made = d.cuGraphInstantiateWithFlags(&exec, graph, 0);
  d.cuGraphDestroy(graph);
  check(made, "cuGraphInstantiateWithFlags");
  std::vector<double> samples;
  try {
    for (int i = 0; i < replays + 3; ++i) {
      const auto t0 = clock_type::now();
      check(d.cuGraphLaunch(exec, stream_), "cuGraphLaunch");
      check(d.cuStreamSynchronize(stream_), "cuStreamSynchronize");
      if (i >= 3) samples.push_back(seconds_since(t0));
    }
  } catch (...) {
    d.cuGraphExecDestroy(exec);
    throw;
  }
  d.cuGraphExecDestroy(exec);
  return median(samples);
}

double raw_cuda::alloc_free_median(int n, std::uint64_t bytes) {
  api& d = *api_;
  check(d.cuCtxSetCurrent(ctx_), "cuCtxSetCurrent");
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto t0 = clock_type::now();
    CUdeviceptr p = 0;
    check(d.cuMemAlloc(&p, bytes), "cuMemAlloc");
    check(d.cuMemFree(p), "cuMemFree");
    samples.push_back(seconds_since(t0));
  }
  return median(std::move(samples));
}

}  // namespace kiln_bench
