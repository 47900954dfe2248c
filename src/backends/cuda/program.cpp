// NVRTC compilation, module loading, kernel lookup and launch.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_backend.hpp"

namespace kiln_cuda {

namespace {

constexpr uint32_t kMaxArgs = 256;

// Valid until the next compile on this thread, as the ABI promises for *log.
thread_local std::string t_log;

// Splits on whitespace; double quotes group (and are removed), e.g. -I"/a b" -> -I/a b.
std::vector<std::string> split_options(const char* s) {
  std::vector<std::string> out;
  if (!s) return out;
  std::string cur;
  bool in_token = false, quoted = false;
  for (; *s; ++s) {
    const char c = *s;
    if (c == '"') {
      quoted = !quoted;
      in_token = true;
    } else if (!quoted && std::isspace(static_cast<unsigned char>(c))) {
      if (in_token) out.push_back(cur);
      cur.clear();
      in_token = false;
    } else {
      cur += c;
      in_token = true;
    }
  }
  if (in_token) out.push_back(cur);
  return out;
}

// Accepts "sm_90", "sm_90a", "sm_100f" and "compute_90" (the last always yields PTX).
bool parse_arch(const char* arch, int* number, std::string* suffix, bool* ptx_only) {
  const char* p = arch;
  if (std::strncmp(p, "sm_", 3) == 0) {
    p += 3;
    *ptx_only = false;
  } else if (std::strncmp(p, "compute_", 8) == 0) {
    p += 8;
    *ptx_only = true;
  } else {
    return false;
  }
  if (!std::isdigit(static_cast<unsigned char>(*p))) return false;
  char* end = nullptr;
  long n = std::strtol(p, &end, 10);
  if (n < 10 || n > 10000 || (*end && std::strcmp(end, "a") && std::strcmp(end, "f"))) return false;
  *number = static_cast<int>(n);
  *suffix = end;
  return true;
}

struct ProgramGuard {
  nvrtcProgram p = nullptr;
  ~ProgramGuard() {
    if (p) g_rtc.nvrtcDestroyProgram(&p);
  }
};

kiln_status bad_launch(const char* fmt, unsigned long long a = 0, unsigned long long b = 0,
                       unsigned long long c = 0) __attribute__((cold, format(printf, 1, 0)));
kiln_status bad_launch(const char* fmt, unsigned long long a, unsigned long long b,
                       unsigned long long c) {
  char msg[256];
  std::snprintf(msg, sizeof msg, fmt, a, b, c);
  return set_error(KILN_ERR_INVALID_ARGUMENT, "launch: %s", msg);
}

}  // namespace

kiln_status compiler_id(char* out, size_t out_size) {
  if (!out || out_size == 0) return set_error(KILN_ERR_INVALID_ARGUMENT, "compiler_id: no buffer");
  if (!g_rtc.lib) return set_error(KILN_ERR_UNSUPPORTED, "compiler_id: %s", availability());
  int n = std::snprintf(out, out_size, "nvrtc %d.%d", g_rtc.major, g_rtc.minor);
  if (n < 0 || static_cast<size_t>(n) >= out_size)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "compiler_id: buffer of %zu bytes too small",
                     out_size);
  return KILN_OK;
}

kiln_status compile(kiln_device_h dev, const char* arch, const char* source, const char* options,
                    kiln_blob* out, const char** log) {
  t_log.clear();
  if (log) *log = t_log.c_str();
  if (!source || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "compile: NULL source or out");
  *out = kiln_blob{nullptr, 0};
  if (!g_rtc.lib) return set_error(KILN_ERR_UNSUPPORTED, "compile: %s", availability());

  // Target: the device's compute capability, else the `arch` string.
  int target = 0;
  std::string suffix;
  bool ptx_only = false;
  if (dev) {
    target = static_cast<int>(dev->info.compute_major * 10 + dev->info.compute_minor);
  } else if (!arch || !parse_arch(arch, &target, &suffix, &ptx_only)) {
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "compile: arch '%s' is not of the form sm_XY or compute_XY",
                     arch ? arch : "(null)");
  }
  // A CUBIN when NVRTC knows the exact architecture; otherwise PTX for the newest virtual
  // architecture not above it, which the driver JIT-compiles at load.
  const auto& archs = g_rtc.archs;
  const bool exact = std::find(archs.begin(), archs.end(), target) != archs.end();
  const bool cubin = exact && !ptx_only;
  int chosen = target;
  if (!exact) {
    auto it = std::upper_bound(archs.begin(), archs.end(), target);
    if (it == archs.begin())
      return set_error(KILN_ERR_UNSUPPORTED,
                       "compile: NVRTC %d.%d supports sm_%d to sm_%d, not sm_%d", g_rtc.major,
                       g_rtc.minor, archs.front(), archs.back(), target);
    chosen = *(it - 1);
    suffix.clear();
  }
  std::vector<std::string> opts;
  opts.push_back(std::string("--gpu-architecture=") + (cubin ? "sm_" : "compute_") +
                 std::to_string(chosen) + suffix);
  std::vector<std::string> user = split_options(options);
  const bool has_std = std::any_of(user.begin(), user.end(), [](const std::string& o) {
    return o.rfind("-std=", 0) == 0 || o.rfind("--std=", 0) == 0;
  });
  if (!has_std) opts.push_back("-std=c++17");
  opts.insert(opts.end(), user.begin(), user.end());
  std::vector<const char*> argv;
  for (const auto& o : opts) argv.push_back(o.c_str());

  ProgramGuard prog;
  nvrtcResult r = g_rtc.nvrtcCreateProgram(&prog.p, source, "kiln_kernel.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS) return rtc_fail(r, "nvrtcCreateProgram");
  const nvrtcResult compiled =
      g_rtc.nvrtcCompileProgram(prog.p, static_cast<int>(argv.size()), argv.data());
  size_t log_size = 0;
  if (g_rtc.nvrtcGetProgramLogSize(prog.p, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    t_log.resize(log_size);
    if (g_rtc.nvrtcGetProgramLog(prog.p, t_log.data()) == NVRTC_SUCCESS)
      t_log.resize(std::strlen(t_log.c_str()));
    else
      t_log.clear();
  }
  if (log) *log = t_log.c_str();
  if (compiled != NVRTC_SUCCESS) {
    rtc_fail(compiled, "nvrtcCompileProgram");
    return set_error(KILN_ERR_COMPILE, "nvrtcCompileProgram (%s): %s\n%.1500s", opts[0].c_str(),
                     g_rtc.nvrtcGetErrorString(compiled), t_log.c_str());
  }

  size_t size = 0;
  r = cubin ? g_rtc.nvrtcGetCUBINSize(prog.p, &size) : g_rtc.nvrtcGetPTXSize(prog.p, &size);
  if (r != NVRTC_SUCCESS) return rtc_fail(r, cubin ? "nvrtcGetCUBINSize" : "nvrtcGetPTXSize");
  if (size == 0) return set_error(KILN_ERR_BACKEND, "compile: NVRTC produced an empty image");
  char* data = static_cast<char*>(std::malloc(size));  // PTX size includes its NUL
  if (!data) return set_error(KILN_ERR_OUT_OF_MEMORY, "compile: out of host memory");
  r = cubin ? g_rtc.nvrtcGetCUBIN(prog.p, data) : g_rtc.nvrtcGetPTX(prog.p, data);
  if (r != NVRTC_SUCCESS) {
    std::free(data);
    return rtc_fail(r, cubin ? "nvrtcGetCUBIN" : "nvrtcGetPTX");
  }
  *out = kiln_blob{data, size};
  return KILN_OK;
}

void free_blob(kiln_blob blob) { std::free(blob.data); }

kiln_status program_load(kiln_device_h dev, const void* data, uint64_t size, kiln_program_h* out) {
  if (!dev || !data || !out || size == 0)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "program_load: NULL or empty argument");
  if (kiln_status st = make_current_checked(dev); st) return st;
  // Binary images (cubin ELF, fatbin) load as they are; PTX text must end in NUL.
  const auto* b = static_cast<const unsigned char*>(data);
  uint32_t magic = 0;
  if (size >= 4) std::memcpy(&magic, b, 4);
  const bool binary = magic == 0x464c457fu /* \x7fELF */ || magic == 0xba55ed50u /* fatbin */;
  std::string text;
  const void* image = data;
  if (!binary && b[size - 1] != 0) {
    text.assign(static_cast<const char*>(data), size);
    image = text.c_str();
  }
  char jit_log[8192] = "";
  CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {jit_log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof jit_log))};
  CUmodule module = nullptr;
  if (CUresult r = g_cu.cuModuleLoadDataEx(&module, image, 2, keys, values); r != CUDA_SUCCESS)
    return cu_fail(r, "cuModuleLoadDataEx", jit_log);
  auto* p = new kiln_program_s;
  p->dev = dev;
  p->module = module;
  *out = p;
  return KILN_OK;
}

void program_unload(kiln_program_h program) {
  if (!program) return;
  if (make_current(program->dev) == KILN_OK) {
    CUresult r = g_cu.cuModuleUnload(program->module);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED) cu_fail(r, "cuModuleUnload");
  }
  delete program;
}

kiln_status kernel_get(kiln_program_h program, const char* name, kiln_kernel_h* out) {
  if (!program || !name || !out)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "kernel_get: NULL argument");
  std::lock_guard<std::mutex> lock(program->mu);
  for (const auto& k : program->kernels) {
    if (k->name == name) {
      *out = k.get();
      return KILN_OK;
    }
  }
  if (kiln_status st = make_current(program->dev); st) return st;
  CUfunction fn = nullptr;
  CUresult r = g_cu.cuModuleGetFunction(&fn, program->module, name);
  if (r == CUDA_ERROR_NOT_FOUND)
    return set_error(KILN_ERR_NOT_FOUND,
                     "kernel_get: no kernel '%s' in the program (entry points must be "
                     "extern \"C\" __global__)",
                     name);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuModuleGetFunction", name);
  int max_threads = 0, min_grid = 0, block = 0;
  r = g_cu.cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuFuncGetAttribute(MAX_THREADS_PER_BLOCK)", name);
  r = g_cu.cuOccupancyMaxPotentialBlockSize(&min_grid, &block, fn, nullptr, 0, 0);
  if (r != CUDA_SUCCESS) return cu_fail(r, "cuOccupancyMaxPotentialBlockSize", name);
  auto k = std::make_unique<kiln_kernel_s>();
  k->dev = program->dev;
  k->fn = fn;
  k->max_threads = static_cast<uint32_t>(max_threads);
  k->preferred = static_cast<uint32_t>(block > 0 ? block : max_threads);
  k->name = name;
  *out = k.get();
  program->kernels.push_back(std::move(k));
  return KILN_OK;
}

kiln_status kernel_limits(kiln_kernel_h kernel, uint32_t* max_size, uint32_t* preferred) {
  if (!kernel) return set_error(KILN_ERR_INVALID_ARGUMENT, "kernel_limits: kernel is NULL");
  if (max_size) *max_size = kernel->max_threads;
  if (preferred) *preferred = kernel->preferred;
  return KILN_OK;
}

// The hot path: validation against cached limits, no allocation, no formatting unless failing.
kiln_status launch(kiln_kernel_h kernel, kiln_queue_h queue, const kiln_launch_dims* dims,
                   const kiln_kernel_arg* args, uint32_t num_args) {
  if (!kernel || !queue || !dims) [[unlikely]]
    return bad_launch("NULL kernel, queue or dims");
  if (kernel->dev != queue->dev) [[unlikely]]
    return bad_launch("kernel and queue belong to different devices");
  if (num_args > kMaxArgs) [[unlikely]]
    return bad_launch("%llu arguments, at most %llu supported", num_args, kMaxArgs);
  if (num_args && !args) [[unlikely]]
    return bad_launch("args is NULL");
  const uint32_t nd = dims->dims;
  if (nd < 1 || nd > 3) [[unlikely]]
    return bad_launch("dims is %llu, must be 1, 2 or 3", nd);
  const kiln_device_info& info = queue->dev->info;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  for (uint32_t i = 0; i < nd; ++i) {
    if (dims->groups[i] < 1 || dims->groups[i] > info.max_groups[i]) [[unlikely]]
      return bad_launch("groups[%llu] = %llu outside 1..%llu", i, dims->groups[i],
                        info.max_groups[i]);
    if (dims->local[i] < 1 || dims->local[i] > info.max_work_item_sizes[i]) [[unlikely]]
      return bad_launch("local[%llu] = %llu outside 1..%llu", i, dims->local[i],
                        info.max_work_item_sizes[i]);
    grid[i] = static_cast<unsigned>(dims->groups[i]);
    block[i] = dims->local[i];
  }
  const uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  if (threads > kernel->max_threads) [[unlikely]]
    return bad_launch("work-group of %llu items exceeds this kernel's limit of %llu", threads,
                      kernel->max_threads);
  if (kiln_status st = make_current(queue->dev); st) [[unlikely]]
    return st;

  // cuLaunchKernel wants a pointer to each argument value; buffers become device addresses.
  void* params[kMaxArgs];
  CUdeviceptr addrs[kMaxArgs];
  for (uint32_t i = 0; i < num_args; ++i) {
    if (!args[i].value) [[unlikely]]
      return bad_launch("argument %llu has a NULL value", i);
    if (args[i].is_mem) {
      addrs[i] = dptr(*static_cast<const kiln_mem_ref*>(args[i].value));
      params[i] = &addrs[i];
    } else {
      params[i] = const_cast<void*>(args[i].value);
    }
  }
  CUresult r = g_cu.cuLaunchKernel(kernel->fn, grid[0], grid[1], grid[2], block[0], block[1],
                                   block[2], dims->dynamic_local_bytes, queue->stream,
                                   num_args ? params : nullptr, nullptr);
  if (r != CUDA_SUCCESS) [[unlikely]]
    return cu_fail(r, "cuLaunchKernel", kernel->name.c_str());
  return KILN_OK;
}

}  // namespace kiln_cuda
