// Loading the OpenCL ICD loader, error names and the plugin's thread-local error message.
#include "driver_api.hpp"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace kiln_opencl {

ClApi g_cl;

namespace {
thread_local char t_error[4096] = "";
}

bool load_opencl(std::string* why) {
  if (g_cl.lib) return true;
  const char* env = std::getenv("KILN_OPENCL_LIBRARY");
  const char* name = env && *env ? env : "libOpenCL.so.1";
  // RTLD_NODELETE: vendor drivers keep threads and atexit handlers that outlive an unload.
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    const char* e = dlerror();
    *why = std::string("no OpenCL ICD loader (") + (e ? e : name) +
           "; on Debian: apt-get install ocl-icd-libopencl1 and a driver such as pocl-opencl-icd)";
    return false;
  }
  ClApi api;
  api.lib = lib;
  api.path = name;
#define KILN_CL_LOAD(fn)                                                          \
  api.fn = reinterpret_cast<decltype(api.fn)>(dlsym(lib, #fn));                   \
  if (!api.fn) {                                                                  \
    *why = std::string(name) + " lacks " #fn " (an OpenCL 1.2 loader is needed)"; \
    dlclose(lib);                                                                 \
    return false;                                                                 \
  }
  KILN_CL_FUNCS(KILN_CL_LOAD)
#undef KILN_CL_LOAD
  g_cl = api;
  return true;
}

void unload_opencl() {
  if (g_cl.lib) dlclose(g_cl.lib);
  g_cl = ClApi{};
}

const char* cl_error_name(cl_int e) noexcept {
  switch (e) {
#define KILN_CL_ERR(c) \
  case c: return #c;
    KILN_CL_ERR(CL_SUCCESS)
    KILN_CL_ERR(CL_DEVICE_NOT_FOUND)
    KILN_CL_ERR(CL_DEVICE_NOT_AVAILABLE)
    KILN_CL_ERR(CL_COMPILER_NOT_AVAILABLE)
    KILN_CL_ERR(CL_MEM_OBJECT_ALLOCATION_FAILURE)
    KILN_CL_ERR(CL_OUT_OF_RESOURCES)
    KILN_CL_ERR(CL_OUT_OF_HOST_MEMORY)
    KILN_CL_ERR(CL_PROFILING_INFO_NOT_AVAILABLE)
    KILN_CL_ERR(CL_MEM_COPY_OVERLAP)
    KILN_CL_ERR(CL_BUILD_PROGRAM_FAILURE)
    KILN_CL_ERR(CL_MAP_FAILURE)
    KILN_CL_ERR(CL_EXEC_STATUS_ERROR_FOR_EVENTS_IN_WAIT_LIST)
    KILN_CL_ERR(CL_INVALID_VALUE)
    KILN_CL_ERR(CL_INVALID_DEVICE_TYPE)
    KILN_CL_ERR(CL_INVALID_PLATFORM)
    KILN_CL_ERR(CL_INVALID_DEVICE)
    KILN_CL_ERR(CL_INVALID_CONTEXT)
    KILN_CL_ERR(CL_INVALID_COMMAND_QUEUE)
    KILN_CL_ERR(CL_INVALID_HOST_PTR)
    KILN_CL_ERR(CL_INVALID_MEM_OBJECT)
    KILN_CL_ERR(CL_INVALID_BINARY)
    KILN_CL_ERR(CL_INVALID_BUILD_OPTIONS)
    KILN_CL_ERR(CL_INVALID_PROGRAM)
    KILN_CL_ERR(CL_INVALID_PROGRAM_EXECUTABLE)
    KILN_CL_ERR(CL_INVALID_KERNEL_NAME)
    KILN_CL_ERR(CL_INVALID_KERNEL)
    KILN_CL_ERR(CL_INVALID_ARG_INDEX)
    KILN_CL_ERR(CL_INVALID_ARG_VALUE)
    KILN_CL_ERR(CL_INVALID_ARG_SIZE)
    KILN_CL_ERR(CL_INVALID_KERNEL_ARGS)
    KILN_CL_ERR(CL_INVALID_WORK_DIMENSION)
    KILN_CL_ERR(CL_INVALID_WORK_GROUP_SIZE)
    KILN_CL_ERR(CL_INVALID_WORK_ITEM_SIZE)
    KILN_CL_ERR(CL_INVALID_GLOBAL_OFFSET)
    KILN_CL_ERR(CL_INVALID_EVENT_WAIT_LIST)
    KILN_CL_ERR(CL_INVALID_EVENT)
    KILN_CL_ERR(CL_INVALID_OPERATION)
    KILN_CL_ERR(CL_INVALID_BUFFER_SIZE)
    KILN_CL_ERR(CL_INVALID_GLOBAL_WORK_SIZE)
#undef KILN_CL_ERR
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR (no OpenCL driver registered)";
    default: return "unknown OpenCL error";
  }
}

const char* last_error() noexcept { return t_error; }

kiln_status set_error(kiln_status status, const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return status;
}

kiln_status cl_fail(cl_int e, const char* call, const char* detail) noexcept {
  kiln_status s = KILN_ERR_BACKEND;
  if (e == CL_OUT_OF_HOST_MEMORY || e == CL_MEM_OBJECT_ALLOCATION_FAILURE ||
      e == CL_INVALID_BUFFER_SIZE)
    s = KILN_ERR_OUT_OF_MEMORY;
  else if (e == CL_INVALID_WORK_GROUP_SIZE || e == CL_INVALID_WORK_ITEM_SIZE ||
           e == CL_INVALID_GLOBAL_WORK_SIZE || e == CL_INVALID_ARG_SIZE ||
           e == CL_INVALID_ARG_VALUE || e == CL_INVALID_VALUE)
    s = KILN_ERR_INVALID_ARGUMENT;
  else if (e == CL_BUILD_PROGRAM_FAILURE || e == CL_INVALID_BUILD_OPTIONS)
    s = KILN_ERR_COMPILE;
  return set_error(s, "%s: %s (%d)%s%s", call, cl_error_name(e), static_cast<int>(e),
                   detail ? ": " : "", detail ? detail : "");
}

}  // namespace kiln_opencl
