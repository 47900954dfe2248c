#include "driver_api.hpp"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#define KILN_STR2(x) #x
#define KILN_STR(x) KILN_STR2(x)

namespace kiln_cuda {

DriverApi g_cu;
NvrtcApi g_rtc;

namespace {

// A fixed buffer: setting an error never allocates, so it is safe inside catch handlers and
// leaves no TLS destructor behind.
thread_local char t_error[2048] = "";

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// cuEventElapsedTime_v2 appeared in CUDA 12.8; older 12.x drivers only have the unversioned
// symbol, which has the same prototype.
void* find_symbol(void* lib, const char* name, const char** missing) {
  void* p = dlsym(lib, name);
  if (!p && std::strcmp(name, "cuEventElapsedTime_v2") == 0) p = dlsym(lib, "cuEventElapsedTime");
  if (!p && !*missing) *missing = name;
  return p;
}

kiln_status map_cu(CUresult r) {
  switch (r) {
    case CUDA_ERROR_OUT_OF_MEMORY:
      return KILN_ERR_OUT_OF_MEMORY;
    case CUDA_ERROR_INVALID_VALUE:
      return KILN_ERR_INVALID_ARGUMENT;
    // Sticky errors: the context is poisoned and every later call on it fails the same way.
    case CUDA_ERROR_ILLEGAL_ADDRESS:
    case CUDA_ERROR_ASSERT:
    case CUDA_ERROR_LAUNCH_TIMEOUT:
    case CUDA_ERROR_HARDWARE_STACK_ERROR:
    case CUDA_ERROR_ILLEGAL_INSTRUCTION:
    case CUDA_ERROR_MISALIGNED_ADDRESS:
    case CUDA_ERROR_INVALID_ADDRESS_SPACE:
    case CUDA_ERROR_INVALID_PC:
    case CUDA_ERROR_LAUNCH_FAILED:
    case CUDA_ERROR_ECC_UNCORRECTABLE:
    case CUDA_ERROR_CONTEXT_IS_DESTROYED:
      return KILN_ERR_DEVICE_LOST;
    default:
      return KILN_ERR_BACKEND;
  }
}

kiln_status map_rtc(nvrtcResult r) {
  switch (r) {
    case NVRTC_ERROR_OUT_OF_MEMORY:
      return KILN_ERR_OUT_OF_MEMORY;
    case NVRTC_ERROR_COMPILATION:
    case NVRTC_ERROR_INVALID_OPTION:
      return KILN_ERR_COMPILE;
    case NVRTC_ERROR_INVALID_INPUT:
      return KILN_ERR_INVALID_ARGUMENT;
    default:
      return KILN_ERR_BACKEND;
  }
}

}  // namespace

const char* last_error() noexcept { return t_error; }

kiln_status set_error(kiln_status status, const char* fmt, ...) noexcept {
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(t_error, sizeof t_error, fmt, ap);
  va_end(ap);
  return status;
}

std::string cu_error_text(CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_cu.cuGetErrorName) g_cu.cuGetErrorName(r, &name);
  if (g_cu.cuGetErrorString) g_cu.cuGetErrorString(r, &text);
  std::string s = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text) s += std::string(" (") + text + ")";
  return s;
}

kiln_status cu_fail(CUresult r, const char* call, const char* detail) noexcept {
  const char* name = nullptr;
  const char* text = nullptr;
  if (g_cu.cuGetErrorName) g_cu.cuGetErrorName(r, &name);
  if (g_cu.cuGetErrorString) g_cu.cuGetErrorString(r, &text);
  char num[32];
  if (!name) {
    std::snprintf(num, sizeof num, "CUresult %d", static_cast<int>(r));
    name = num;
  }
  set_error(map_cu(r), "%s: %s (%s)%s%s", call, name, text ? text : "no description",
            detail && *detail ? ": " : "", detail ? detail : "");
  if (map_cu(r) == KILN_ERR_DEVICE_LOST) note_device_lost();
  return map_cu(r);
}

kiln_status cu_fail(CUresult r, const char* call) noexcept { return cu_fail(r, call, nullptr); }

kiln_status rtc_fail(nvrtcResult r, const char* call) noexcept {
  const char* text = g_rtc.nvrtcGetErrorString ? g_rtc.nvrtcGetErrorString(r) : nullptr;
  return set_error(map_rtc(r), "%s: %s", call, text ? text : "unknown NVRTC error");
}

bool load_driver(std::string* why) {
  dlerror();
  // NODELETE: the driver keeps threads and atexit hooks; unmapping it under them would crash.
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) {
    *why = "no NVIDIA driver (" + dl_error() + ")";
    return false;
  }
  DriverApi api;
  api.lib = lib;
  const char* missing = nullptr;
#define KILN_LOAD(name) \
  api.name = reinterpret_cast<decltype(api.name)>(find_symbol(lib, KILN_STR(name), &missing));
  KILN_CU_FUNCS(KILN_LOAD)
#undef KILN_LOAD
  if (missing) {
    *why = std::string("NVIDIA driver too old (libcuda.so.1 lacks ") + missing + ")";
    dlclose(lib);
    return false;
  }
  const char* missing_graph = nullptr;
#define KILN_LOAD(name) \
  api.name = reinterpret_cast<decltype(api.name)>(find_symbol(lib, KILN_STR(name), &missing_graph));
  KILN_CU_GRAPH_FUNCS(KILN_LOAD)
#undef KILN_LOAD
  api.has_graphs = missing_graph == nullptr;
  g_cu = api;  // keep it even if cuInit fails, so error names can be printed
  // Eager module loading: with CUDA's default lazy loading, the first launch of a kernel loads
  // it and may wait for running kernels, which never finish while a ring kernel is resident.
  // The user's own setting wins.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  CUresult r = g_cu.cuDriverGetVersion(&g_cu.version);
  if (r == CUDA_SUCCESS) r = g_cu.cuInit(0);
  if (r != CUDA_SUCCESS) {
    *why = "CUDA driver unusable (cuInit: " + cu_error_text(r) + ")";
    return false;
  }
  return true;
}

bool load_nvrtc(std::string* why) {
  std::vector<std::string> candidates = {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"};
  std::vector<std::string> dirs;
  if (const char* cp = std::getenv("CUDA_PATH"); cp && *cp)
    dirs.push_back(std::string(cp) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const auto& d : dirs)
    for (const char* n : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
      candidates.push_back(d + "/" + n);

  std::string first_error;
  for (const auto& name : candidates) {
    dlerror();
    // NODELETE: NVRTC keeps process-wide state (its own C++ runtime's pools); reloading it after
    // a dlclose is fragile, and leak checkers cannot attribute memory of an unmapped library.
    void* lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!lib) {
      if (first_error.empty()) first_error = dl_error();
      continue;
    }
    NvrtcApi api;
    api.lib = lib;
    api.path = name;
    const char* missing = nullptr;
#define KILN_LOAD(fn) \
  api.fn = reinterpret_cast<decltype(api.fn)>(find_symbol(lib, KILN_STR(fn), &missing));
    KILN_NVRTC_FUNCS(KILN_LOAD)
#undef KILN_LOAD
    int n = 0;
    if (missing || api.nvrtcVersion(&api.major, &api.minor) != NVRTC_SUCCESS ||
        api.nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) {
      if (first_error.empty())
        first_error = name + (missing ? std::string(" lacks ") + missing : " is unusable");
      dlclose(lib);
      continue;
    }
    api.archs.resize(static_cast<size_t>(n));
    if (api.nvrtcGetSupportedArchs(api.archs.data()) != NVRTC_SUCCESS) {
      dlclose(lib);
      continue;
    }
    g_rtc = std::move(api);
    return true;
  }
  std::string tried = "libnvrtc.so.{13,12,}";
  for (const auto& d : dirs) tried += ", " + d + "/libnvrtc.so.{13,12,}";
  *why = "NVRTC not found (tried " + tried +
         "; first error: " + (first_error.empty() ? "none reported" : first_error) + ")";
  return false;
}

void unload_driver() {
  if (g_cu.lib) dlclose(g_cu.lib);
  g_cu = DriverApi{};
}

void unload_nvrtc() {
  if (g_rtc.lib) dlclose(g_rtc.lib);
  g_rtc = NvrtcApi{};
}

}  // namespace kiln_cuda
