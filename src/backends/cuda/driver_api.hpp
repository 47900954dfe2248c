// Function tables for the CUDA driver API and NVRTC, resolved with dlopen/dlsym so the plugin
// links neither libcuda nor libnvrtc. cuda.h and nvrtc.h are included for types only.
#pragma once

#include <cuda.h>
#include <nvrtc.h>

#include <string>
#include <vector>

#include "backend_abi.h"

namespace kiln_cuda {

// Every driver entry point the plugin calls. cuda.h #defines versioned names (cuMemAlloc ->
// cuMemAlloc_v2, cuEventElapsedTime -> cuEventElapsedTime_v2, ...); the X-macro argument is
// expanded before use, so each member is named, typed and looked up under exactly the versioned
// symbol whose prototype this header declares.
#define KILN_CU_FUNCS(X)              \
  X(cuInit)                           \
  X(cuDriverGetVersion)               \
  X(cuGetErrorName)                   \
  X(cuGetErrorString)                 \
  X(cuDeviceGetCount)                 \
  X(cuDeviceGet)                      \
  X(cuDeviceGetName)                  \
  X(cuDeviceGetAttribute)             \
  X(cuDeviceTotalMem)                 \
  X(cuDevicePrimaryCtxRetain)         \
  X(cuDevicePrimaryCtxRelease)        \
  X(cuCtxSetCurrent)                  \
  X(cuCtxGetCurrent)                  \
  X(cuCtxSynchronize)                 \
  X(cuDeviceGetDefaultMemPool)        \
  X(cuMemPoolSetAttribute)            \
  X(cuMemAllocFromPoolAsync)          \
  X(cuMemFreeAsync)                   \
  X(cuMemAlloc)                       \
  X(cuMemFree)                        \
  X(cuMemHostAlloc)                   \
  X(cuMemFreeHost)                    \
  X(cuMemcpyHtoDAsync)                \
  X(cuMemcpyDtoHAsync)                \
  X(cuMemcpyDtoDAsync)                \
  X(cuMemsetD8Async)                  \
  X(cuMemsetD16Async)                 \
  X(cuMemsetD32Async)                 \
  X(cuMemsetD2D32Async)               \
  X(cuStreamCreate)                   \
  X(cuStreamDestroy)                  \
  X(cuStreamSynchronize)              \
  X(cuStreamQuery)                    \
  X(cuStreamWaitEvent)                \
  X(cuEventCreate)                    \
  X(cuEventDestroy)                   \
  X(cuEventRecord)                    \
  X(cuEventSynchronize)               \
  X(cuEventQuery)                     \
  X(cuEventElapsedTime)               \
  X(cuModuleLoadDataEx)               \
  X(cuModuleUnload)                   \
  X(cuModuleGetFunction)              \
  X(cuFuncGetAttribute)               \
  X(cuOccupancyMaxPotentialBlockSize) \
  X(cuLaunchKernel)                   \
  X(cuMemGetInfo)                     \
  X(cuMemPoolGetAttribute)            \
  X(cuMemPoolTrimTo)                  \
  X(cuDevicePrimaryCtxReset)          \
  X(cuDeviceCanAccessPeer)            \
  X(cuCtxEnablePeerAccess)            \
  X(cuMemcpyPeerAsync)

// The graph API (kiln::graph): optional, so that a driver without one still runs everything
// else; DriverApi::has_graphs says whether all of them resolved. cuGraphInstantiate is
// cuGraphInstantiateWithFlags and cuGraphExecUpdate is cuGraphExecUpdate_v2 through cuda.h.
#define KILN_CU_GRAPH_FUNCS(X) \
  X(cuStreamBeginCapture)      \
  X(cuStreamEndCapture)        \
  X(cuGraphInstantiate)        \
  X(cuGraphExecUpdate)         \
  X(cuGraphLaunch)             \
  X(cuGraphDestroy)            \
  X(cuGraphExecDestroy)

#define KILN_NVRTC_FUNCS(X)    \
  X(nvrtcVersion)              \
  X(nvrtcGetErrorString)       \
  X(nvrtcGetNumSupportedArchs) \
  X(nvrtcGetSupportedArchs)    \
  X(nvrtcCreateProgram)        \
  X(nvrtcDestroyProgram)       \
  X(nvrtcCompileProgram)       \
  X(nvrtcGetProgramLogSize)    \
  X(nvrtcGetProgramLog)        \
  X(nvrtcGetPTXSize)           \
  X(nvrtcGetPTX)               \
  X(nvrtcGetCUBINSize)         \
  X(nvrtcGetCUBIN)

#define KILN_API_MEMBER(name) decltype(&::name) name = nullptr;

struct DriverApi {
  void* lib = nullptr;
  int version = 0;  // cuDriverGetVersion, e.g. 13000
  KILN_CU_FUNCS(KILN_API_MEMBER)
  KILN_CU_GRAPH_FUNCS(KILN_API_MEMBER)
  bool has_graphs = false;  // every KILN_CU_GRAPH_FUNCS entry resolved
};

struct NvrtcApi {
  void* lib = nullptr;
  std::string path;  // the name or path that dlopen accepted
  int major = 0, minor = 0;
  std::vector<int> archs;  // nvrtcGetSupportedArchs, ascending (e.g. 75, 80, ..., 120)
  KILN_NVRTC_FUNCS(KILN_API_MEMBER)
};

#undef KILN_API_MEMBER

// The tables. A null `lib` means not loaded; members are valid only when it is set.
extern DriverApi g_cu;
extern NvrtcApi g_rtc;

// dlopen libcuda.so.1, resolve every symbol and cuInit(0). On failure returns false and sets
// *why to one human-readable clause ("no NVIDIA driver (libcuda.so.1: ...)"); the library may
// stay loaded when only cuInit failed, so that error names can still be printed.
bool load_driver(std::string* why);
// dlopen NVRTC from the usual sonames, then from $CUDA_PATH/lib64 and /usr/local/cuda/lib64.
bool load_nvrtc(std::string* why);
void unload_driver();
void unload_nvrtc();

// Thread-local last error. All setters return `status` so that call sites can `return` them.
const char* last_error() noexcept;
kiln_status set_error(kiln_status status, const char* fmt, ...) noexcept
    __attribute__((format(printf, 2, 3)));
// Maps a failed driver call to a kiln_status and records "call: NAME (string)".
kiln_status cu_fail(CUresult r, const char* call) noexcept;
kiln_status cu_fail(CUresult r, const char* call, const char* detail) noexcept;
kiln_status rtc_fail(nvrtcResult r, const char* call) noexcept;
// Marks the device whose context this thread last made current as lost (device.cpp): called
// by cu_fail on a sticky error.
void note_device_lost() noexcept;
// "CUDA_ERROR_NO_DEVICE (no CUDA-capable device is detected)" without touching the error slot.
std::string cu_error_text(CUresult r);

}  // namespace kiln_cuda
