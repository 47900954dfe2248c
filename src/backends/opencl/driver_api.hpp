// The OpenCL entry points the plugin calls, resolved with dlopen/dlsym from the ICD loader
// (libOpenCL.so.1, Debian's ocl-icd), so that the plugin loads, and says why OpenCL is
// unavailable, on machines without it. CL/cl.h is included for types only.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <string>

#include "backend_abi.h"

namespace kiln_opencl {

#define KILN_CL_FUNCS(X)          \
  X(clGetPlatformIDs)             \
  X(clGetPlatformInfo)            \
  X(clGetDeviceIDs)               \
  X(clGetDeviceInfo)              \
  X(clCreateContext)              \
  X(clReleaseContext)             \
  X(clCreateCommandQueue)         \
  X(clReleaseCommandQueue)        \
  X(clFlush)                      \
  X(clFinish)                     \
  X(clCreateBuffer)               \
  X(clReleaseMemObject)           \
  X(clEnqueueReadBuffer)          \
  X(clEnqueueWriteBuffer)         \
  X(clEnqueueCopyBuffer)          \
  X(clEnqueueFillBuffer)          \
  X(clEnqueueMarkerWithWaitList)  \
  X(clEnqueueBarrierWithWaitList) \
  X(clWaitForEvents)              \
  X(clGetEventInfo)               \
  X(clGetEventProfilingInfo)      \
  X(clRetainEvent)                \
  X(clReleaseEvent)               \
  X(clCreateProgramWithSource)    \
  X(clCreateProgramWithBinary)    \
  X(clBuildProgram)               \
  X(clGetProgramInfo)             \
  X(clGetProgramBuildInfo)        \
  X(clReleaseProgram)             \
  X(clCreateKernel)               \
  X(clReleaseKernel)              \
  X(clSetKernelArg)               \
  X(clGetKernelWorkGroupInfo)     \
  X(clEnqueueNDRangeKernel)

struct ClApi {
  void* lib = nullptr;
  std::string path;
#define KILN_CL_MEMBER(name) decltype(&::name) name = nullptr;
  KILN_CL_FUNCS(KILN_CL_MEMBER)
#undef KILN_CL_MEMBER
};

extern ClApi g_cl;

// Loads the ICD loader (KILN_OPENCL_LIBRARY overrides the name); false with *why on failure.
bool load_opencl(std::string* why);
void unload_opencl();

// "CL_OUT_OF_RESOURCES" for -5, ...
const char* cl_error_name(cl_int e) noexcept;

// Thread-local last error for the ABI's last_error().
const char* last_error() noexcept;
kiln_status set_error(kiln_status status, const char* fmt, ...) noexcept
    __attribute__((format(printf, 2, 3)));
// Maps a failed OpenCL call to a kiln_status and records "call: CL_NAME (code) detail".
kiln_status cl_fail(cl_int e, const char* call, const char* detail = nullptr) noexcept;

}  // namespace kiln_opencl
