// Loading the ICD loader, enumerating every platform's devices, and per-device contexts.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "opencl_backend.hpp"

namespace kiln_opencl {

State& state() {
  static State* s = new State;  // never destroyed: shutdown may run from a static destructor
  return *s;
}

namespace {

// NVIDIA's cl_nv_device_attribute_query.
constexpr cl_device_info kComputeCapabilityMajorNV = 0x4000;
constexpr cl_device_info kComputeCapabilityMinorNV = 0x4001;
constexpr cl_device_info kWarpSizeNV = 0x4003;

std::string platform_string(cl_platform_id p, cl_platform_info what) {
  size_t n = 0;
  if (g_cl.clGetPlatformInfo(p, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  if (g_cl.clGetPlatformInfo(p, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

std::string device_string(cl_device_id d, cl_device_info what) {
  size_t n = 0;
  if (g_cl.clGetDeviceInfo(d, what, 0, nullptr, &n) != CL_SUCCESS || n == 0) return {};
  std::string s(n, '\0');
  if (g_cl.clGetDeviceInfo(d, what, n, s.data(), nullptr) != CL_SUCCESS) return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

template <class T>
T device_value(cl_device_id d, cl_device_info what, T fallback = T{}) {
  T v{};
  return g_cl.clGetDeviceInfo(d, what, sizeof v, &v, nullptr) == CL_SUCCESS ? v : fallback;
}

void copy_text(char* dst, size_t size, const std::string& s) {
  std::snprintf(dst, size, "%s", s.c_str());
}

bool has_extension(const std::string& list, const char* ext) {
  const size_t n = std::strlen(ext);
  for (size_t p = list.find(ext); p != std::string::npos; p = list.find(ext, p + 1))
    if ((p == 0 || list[p - 1] == ' ') && (p + n == list.size() || list[p + n] == ' ')) return true;
  return false;
}

void query_info(kiln_device_s& d) {
  kiln_device_info& info = d.info;
  info = kiln_device_info{};
  const cl_device_id id = d.id;
  const std::string ext = device_string(id, CL_DEVICE_EXTENSIONS);
  copy_text(info.name, sizeof info.name, device_string(id, CL_DEVICE_NAME));
  copy_text(info.vendor, sizeof info.vendor, device_string(id, CL_DEVICE_VENDOR));
  copy_text(info.driver_version, sizeof info.driver_version, device_string(id, CL_DRIVER_VERSION));
  d.nvidia = d.platform_name.find("NVIDIA") != std::string::npos;
  if (d.nvidia && has_extension(ext, "cl_nv_device_attribute_query")) {
    info.compute_major = device_value<cl_uint>(id, kComputeCapabilityMajorNV);
    info.compute_minor = device_value<cl_uint>(id, kComputeCapabilityMinorNV);
    std::snprintf(info.arch, sizeof info.arch, "sm_%u%u", info.compute_major, info.compute_minor);
    info.simd_width = device_value<cl_uint>(id, kWarpSizeNV, 32);
  } else {
    // The device name is the most specific architecture string OpenCL offers (PoCL:
    // "cpu-skylake-avx512-..."); the cache key adds platform, vendor and driver version.
    copy_text(info.arch, sizeof info.arch, device_string(id, CL_DEVICE_NAME));
    info.simd_width =
        std::max<cl_uint>(1, device_value<cl_uint>(id, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT));
  }
  const cl_device_type type = device_value<cl_device_type>(id, CL_DEVICE_TYPE);
  info.type = (type & CL_DEVICE_TYPE_GPU)           ? KILN_DEVICE_GPU
              : (type & CL_DEVICE_TYPE_ACCELERATOR) ? KILN_DEVICE_ACCELERATOR
                                                    : KILN_DEVICE_CPU;
  info.global_mem_bytes = device_value<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE);
  info.max_alloc_bytes = device_value<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE);
  info.local_mem_bytes = device_value<cl_ulong>(id, CL_DEVICE_LOCAL_MEM_SIZE);
  info.compute_units = device_value<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS);
  info.max_work_group_size =
      static_cast<uint32_t>(device_value<size_t>(id, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  size_t items[3] = {1, 1, 1};
  const cl_uint dims = device_value<cl_uint>(id, CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS);
  if (dims >= 3)
    g_cl.clGetDeviceInfo(id, CL_DEVICE_MAX_WORK_ITEM_SIZES, sizeof items, items, nullptr);
  for (int k = 0; k < 3; ++k) {
    info.max_work_item_sizes[k] =
        static_cast<uint32_t>(std::min<size_t>(items[k], info.max_work_group_size));
    // OpenCL states no grid limit; NVIDIA's driver maps the range onto a CUDA grid.
    info.max_groups[k] = d.nvidia ? (k == 0 ? 2147483647u : 65535u) : 4294967295u;
  }
  info.clock_mhz = device_value<cl_uint>(id, CL_DEVICE_MAX_CLOCK_FREQUENCY);
  info.features = KILN_FEATURE_BARRIER;
  // NVIDIA's compiler takes inline PTX: the OpenCL target's warp primitives (warps of 32).
  if (d.nvidia) info.features |= KILN_FEATURE_WARP32;
  if (has_extension(ext, "cl_khr_int64_base_atomics") &&
      has_extension(ext, "cl_khr_int64_extended_atomics"))
    info.features |= KILN_FEATURE_ATOMICS | KILN_FEATURE_FLOAT_ATOMICS;
  if (has_extension(ext, "cl_khr_fp64") ||
      device_value<cl_device_fp_config>(id, CL_DEVICE_DOUBLE_FP_CONFIG) != 0)
    info.features |= KILN_FEATURE_DOUBLE;
  d.exact_div_sqrt = (device_value<cl_device_fp_config>(id, CL_DEVICE_SINGLE_FP_CONFIG) &
                      CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT) != 0;
}

void enumerate(State& s, std::string* summary) {
  cl_uint np = 0;
  cl_int e = g_cl.clGetPlatformIDs(0, nullptr, &np);
  if (e != CL_SUCCESS || np == 0) {
    *summary = std::string("no OpenCL platform (clGetPlatformIDs: ") +
               (e == CL_SUCCESS ? "0 platforms" : cl_error_name(e)) +
               "; install a driver such as pocl-opencl-icd, or register one with "
               "OCL_ICD_VENDORS)";
    return;
  }
  std::vector<cl_platform_id> platforms(np);
  std::string platforms_text;
  g_cl.clGetPlatformIDs(np, platforms.data(), nullptr);
  for (cl_platform_id p : platforms) {
    const std::string name = platform_string(p, CL_PLATFORM_NAME);
    const std::string version = platform_string(p, CL_PLATFORM_VERSION);
    s.compiler_id += (s.compiler_id.empty() ? "" : "; ") + name + " (" + version + ")";
    platforms_text += (platforms_text.empty() ? "" : ", ") + name;
    cl_uint nd = 0;
    if (g_cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, 0, nullptr, &nd) != CL_SUCCESS || nd == 0)
      continue;
    std::vector<cl_device_id> ids(nd);
    g_cl.clGetDeviceIDs(p, CL_DEVICE_TYPE_ALL, nd, ids.data(), nullptr);
    for (cl_device_id id : ids) {
      auto d = std::make_unique<kiln_device_s>();
      d->index = static_cast<int>(s.devices.size());
      d->platform = p;
      d->id = id;
      d->platform_name = name;
      query_info(*d);
      s.devices.push_back(std::move(d));
    }
  }
  char buf[512];
  std::snprintf(buf, sizeof buf, "OpenCL: %u platform(s) [%s], %zu device(s)", np,
                platforms_text.c_str(), s.devices.size());
  *summary = buf;
}

kiln_status open_device(kiln_device_s* d) {
  cl_int e = CL_SUCCESS;
  const cl_context_properties props[] = {CL_CONTEXT_PLATFORM,
                                         reinterpret_cast<cl_context_properties>(d->platform), 0};
  d->ctx = g_cl.clCreateContext(props, 1, &d->id, nullptr, nullptr, &e);
  if (e != CL_SUCCESS) {
    d->ctx = nullptr;
    return cl_fail(e, "clCreateContext", d->info.name);
  }
  d->internal = g_cl.clCreateCommandQueue(d->ctx, d->id, 0, &e);
  if (e != CL_SUCCESS) {
    g_cl.clReleaseContext(d->ctx);
    d->ctx = nullptr;
    d->internal = nullptr;
    return cl_fail(e, "clCreateCommandQueue", d->info.name);
  }
  return KILN_OK;
}

void close_device(kiln_device_s* d) {
  forget_host_reads(d);
  for (cl_kernel& k : d->fill_kernels) {
    if (k) g_cl.clReleaseKernel(k);
    k = nullptr;
  }
  if (d->fill_program) g_cl.clReleaseProgram(d->fill_program);
  d->fill_program = nullptr;
  if (d->internal) {
    g_cl.clFinish(d->internal);
    g_cl.clReleaseCommandQueue(d->internal);
  }
  if (d->ctx) g_cl.clReleaseContext(d->ctx);
  d->internal = nullptr;
  d->ctx = nullptr;
  d->refs = 0;
}

}  // namespace

// Kiln's registry (and with it the default queues) lives until the process ends, so work may
// still be queued when main() returns. PoCL compiles a kernel's work-group function with LLVM
// on its worker thread when the command runs, so every queue must be finished before exit()
// destroys anything LLVM or PoCL use. An atexit handler alone is too late: exit() runs the
// handlers and static destructors in reverse order of registration, and LLVM registers
// function-local statics at its first code generation, after init() registered this one;
// those ran first while a worker still compiled the last launch (SIGSEGV in
// SelectionDAG::LegalizeTypes after "[  PASSED  ]", issue 23). The main thread's
// thread_local destructors run before every static destructor and atexit handler
// ([basic.start.term]), so exit_guard (armed by each thread that enqueues) finishes the
// queues there; the atexit handler stays for exit() called from another thread.
void finish_queues_at_exit() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized || !g_cl.lib) return;
  for (kiln_queue_s* q : s.queues) g_cl.clFinish(q->q);
  for (auto& d : s.devices)
    if (d->internal) g_cl.clFinish(d->internal);
}

namespace {

struct exit_guard {
  bool armed = false;
  // Another thread ending is no exit: only the main thread's end finishes every queue.
  ~exit_guard() {
    if (armed && gettid() == getpid()) finish_queues_at_exit();
  }
};
thread_local exit_guard t_exit_guard;

}  // namespace

void arm_exit_guard() noexcept { t_exit_guard.armed = true; }

kiln_status init() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.initialized) {
    if (s.init_status) set_error(s.init_status, "%s", s.availability.c_str());
    return s.init_status;
  }
  std::string why;
  if (!load_opencl(&why)) {
    s.availability = why;
    s.init_status = KILN_ERR_UNSUPPORTED;
  } else {
    enumerate(s, &s.availability);
    if (!s.at_exit_registered) s.at_exit_registered = std::atexit(finish_queues_at_exit) == 0;
    arm_exit_guard();
    // Loaded without devices is still "loaded": `kiln info` then shows the reason.
    s.init_status = KILN_OK;
  }
  s.initialized = true;
  if (s.init_status) set_error(s.init_status, "%s", s.availability.c_str());
  return s.init_status;
}

void shutdown() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return;
  for (auto& d : s.devices)
    if (d->refs > 0) close_device(d.get());
  s.devices.clear();
  unload_opencl();
  s.initialized = false;
  s.init_status = KILN_ERR_UNSUPPORTED;
  s.availability = "shut down";
}

const char* availability() noexcept { return state().availability.c_str(); }

kiln_status compiler_id(char* out, size_t out_size) {
  if (!out || out_size == 0) return set_error(KILN_ERR_INVALID_ARGUMENT, "compiler_id: no buffer");
  // The suffix names what the plugin adds to every program (local_probe.cpp): binaries cached
  // before it lack the probes, so they must not be found by the new key.
  const std::string id = "opencl: " + state().compiler_id + "; kiln local-memory probes 1";
  if (id.size() >= out_size)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "compiler_id: buffer of %zu bytes too small",
                     out_size);
  std::memcpy(out, id.c_str(), id.size() + 1);
  return KILN_OK;
}

int device_count() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return static_cast<int>(s.devices.size());
}

kiln_status device_info(int index, kiln_device_info* out) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!out) return set_error(KILN_ERR_INVALID_ARGUMENT, "device_info: out is NULL");
  if (index < 0 || static_cast<size_t>(index) >= s.devices.size())
    return set_error(KILN_ERR_INVALID_ARGUMENT, "device_info: index %d out of range (%zu devices)",
                     index, s.devices.size());
  *out = s.devices[static_cast<size_t>(index)]->info;
  return KILN_OK;
}

kiln_status device_open(int index, kiln_device_h* out) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!out) return set_error(KILN_ERR_INVALID_ARGUMENT, "device_open: out is NULL");
  if (index < 0 || static_cast<size_t>(index) >= s.devices.size())
    return set_error(KILN_ERR_INVALID_ARGUMENT, "device_open: index %d out of range (%zu devices)",
                     index, s.devices.size());
  kiln_device_s* d = s.devices[static_cast<size_t>(index)].get();
  if (d->refs == 0)
    if (kiln_status st = open_device(d); st) return st;
  ++d->refs;
  *out = d;
  return KILN_OK;
}

void device_close(kiln_device_h dev) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!dev || dev->refs <= 0) return;
  if (--dev->refs == 0) close_device(dev);
}

}  // namespace kiln_opencl
