// Driver loading, device enumeration and primary-context management.
#include <cstdio>
#include <cstring>
#include <limits>

#include "cuda_backend.hpp"

namespace kiln_cuda {

std::atomic<uint64_t> g_ctx_generation{1};  // bumped whenever a context is released
thread_local CtxCache t_ctx;

State& state() {
  static State* s = new State;
  return *s;
}

kiln_status set_current_slow(kiln_device_s* d) noexcept {
  if (!d->ctx)
    return d->lost.load(std::memory_order_acquire)
               ? set_error(KILN_ERR_DEVICE_LOST, "cuda:%d is lost; a reset could not recover it",
                           d->index)
               : set_error(KILN_ERR_INVALID_ARGUMENT, "device %d is not open", d->index);
  uint64_t gen = g_ctx_generation.load(std::memory_order_acquire);
  if (CUresult r = g_cu.cuCtxSetCurrent(d->ctx); r != CUDA_SUCCESS)
    return cu_fail(r, "cuCtxSetCurrent");
  t_ctx = {d->ctx, gen};
  return KILN_OK;
}

kiln_status make_current_checked(kiln_device_s* d) noexcept {
  if (!d->ctx) return set_current_slow(d);  // says why
  CUcontext cur = nullptr;
  if (CUresult r = g_cu.cuCtxGetCurrent(&cur); r != CUDA_SUCCESS)
    return cu_fail(r, "cuCtxGetCurrent");
  // After a primary-context reset the driver hands out the same handle again while the thread's
  // slot still names the destroyed context: trust an equal handle only within one generation.
  const uint64_t gen = g_ctx_generation.load(std::memory_order_acquire);
  if (cur == d->ctx && t_ctx.ctx == d->ctx && t_ctx.generation == gen) return KILN_OK;
  return set_current_slow(d);
}

namespace {

kiln_status attr(CUdevice dev, CUdevice_attribute a, int* out, const char* what) {
  CUresult r = g_cu.cuDeviceGetAttribute(out, a, dev);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuDeviceGetAttribute", what);
}

#define KILN_ATTR(a, var)                                       \
  do {                                                          \
    if (kiln_status st = attr(dev, a, &var, #a); st) return st; \
  } while (0)

kiln_status query_info(CUdevice dev, kiln_device_info* info) {
  *info = kiln_device_info{};
  if (CUresult r = g_cu.cuDeviceGetName(info->name, sizeof info->name, dev); r != CUDA_SUCCESS)
    return cu_fail(r, "cuDeviceGetName");
  size_t total = 0;
  if (CUresult r = g_cu.cuDeviceTotalMem(&total, dev); r != CUDA_SUCCESS)
    return cu_fail(r, "cuDeviceTotalMem");
  int major = 0, minor = 0, sms = 0, warp = 0, threads = 0, bx = 0, by = 0, bz = 0, gx = 0, gy = 0,
      gz = 0, smem = 0, clock_khz = 0, coop = 0, map_host = 0, unified = 0;
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, major);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, minor);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, sms);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_WARP_SIZE, warp);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, threads);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, bx);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, by);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, bz);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, gx);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, gy);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, gz);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, smem);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_CLOCK_RATE, clock_khz);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, coop);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, map_host);
  KILN_ATTR(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, unified);

  std::snprintf(info->arch, sizeof info->arch, "sm_%d%d", major, minor);
  std::snprintf(info->vendor, sizeof info->vendor, "NVIDIA");
  std::snprintf(info->driver_version, sizeof info->driver_version, "%d.%d", g_cu.version / 1000,
                (g_cu.version % 1000) / 10);
  info->type = KILN_DEVICE_GPU;
  info->global_mem_bytes = total;
  info->max_alloc_bytes = total;  // CUDA has no per-allocation cap below device memory
  info->local_mem_bytes = static_cast<uint64_t>(smem);
  info->compute_units = static_cast<uint32_t>(sms);
  info->simd_width = static_cast<uint32_t>(warp);
  info->max_work_group_size = static_cast<uint32_t>(threads);
  info->max_work_item_sizes[0] = static_cast<uint32_t>(bx);
  info->max_work_item_sizes[1] = static_cast<uint32_t>(by);
  info->max_work_item_sizes[2] = static_cast<uint32_t>(bz);
  info->max_groups[0] = static_cast<uint64_t>(gx);
  info->max_groups[1] = static_cast<uint64_t>(gy);
  info->max_groups[2] = static_cast<uint64_t>(gz);
  info->clock_mhz = static_cast<uint32_t>(clock_khz / 1000);
  info->features = KILN_FEATURE_BARRIER | KILN_FEATURE_ATOMICS | KILN_FEATURE_DOUBLE |
                   KILN_FEATURE_FLOAT_ATOMICS | KILN_FEATURE_WARP32;
  if (coop) info->features |= KILN_FEATURE_COOPERATIVE;
  if (map_host) info->features |= KILN_FEATURE_MAPPED_HOST;
  if (unified) info->features |= KILN_FEATURE_UNIFIED_ADDR;
  info->compute_major = static_cast<uint32_t>(major);
  info->compute_minor = static_cast<uint32_t>(minor);
  return KILN_OK;
}

// Enumerates devices after cuInit; false with *why when none is usable.
bool enumerate(State& s, std::string* why) {
  int n = 0;
  if (CUresult r = g_cu.cuDeviceGetCount(&n); r != CUDA_SUCCESS) {
    *why = "CUDA driver unusable (cuDeviceGetCount: " + cu_error_text(r) + ")";
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device (driver loaded, cuDeviceGetCount = 0)";
    return false;
  }
  for (int i = 0; i < n; ++i) {
    auto d = std::make_unique<kiln_device_s>();
    d->index = i;
    CUresult r = g_cu.cuDeviceGet(&d->dev, i);
    if (r != CUDA_SUCCESS) {
      *why = "cuDeviceGet(" + std::to_string(i) + "): " + cu_error_text(r);
      return false;
    }
    if (query_info(d->dev, &d->info) != KILN_OK) {
      *why = last_error();
      return false;
    }
    s.devices.push_back(std::move(d));
  }
  return true;
}

kiln_status open_device(kiln_device_s* d) {
  CUresult r = g_cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
  if (r != CUDA_SUCCESS) {
    d->ctx = nullptr;
    return cu_fail(r, "cuDevicePrimaryCtxRetain");
  }
  kiln_status st = make_current_checked(d);
  int pools = 0;
  if (!st) st = attr(d->dev, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, &pools, "pools");
  if (!st && pools) {
    if (r = g_cu.cuDeviceGetDefaultMemPool(&d->pool, d->dev); r != CUDA_SUCCESS) {
      st = cu_fail(r, "cuDeviceGetDefaultMemPool");
    } else {
      // Keep freed memory cached in the pool: re-allocation then costs microseconds.
      cuuint64_t keep = std::numeric_limits<cuuint64_t>::max();
      r = g_cu.cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
      if (r != CUDA_SUCCESS) st = cu_fail(r, "cuMemPoolSetAttribute(RELEASE_THRESHOLD)");
    }
  }
  if (!st) {
    r = g_cu.cuStreamCreate(&d->internal, CU_STREAM_NON_BLOCKING);
    if (r != CUDA_SUCCESS) st = cu_fail(r, "cuStreamCreate");
  }
  if (st) {
    d->internal = nullptr;
    d->pool = nullptr;
    g_cu.cuDevicePrimaryCtxRelease(d->dev);
    d->ctx = nullptr;
    g_ctx_generation.fetch_add(1, std::memory_order_acq_rel);
  }
  return st;
}

// Errors are ignored: this also runs while the driver is being torn down.
void close_device(kiln_device_s* d) {
  if (d->internal && make_current_checked(d) == KILN_OK) {
    g_cu.cuStreamSynchronize(d->internal);
    g_cu.cuStreamDestroy(d->internal);
  }
  d->internal = nullptr;
  d->pool = nullptr;
  if (d->ctx) g_cu.cuDevicePrimaryCtxRelease(d->dev);
  d->ctx = nullptr;
  d->refs = 0;
  g_ctx_generation.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace

kiln_status init() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.initialized) {
    if (s.init_status) set_error(s.init_status, "%s", s.init_error.c_str());
    return s.init_status;
  }
  std::string driver_why, rtc_why;
  s.driver_ok = load_driver(&driver_why) && enumerate(s, &driver_why);
  if (!s.driver_ok) s.devices.clear();
  bool rtc_ok = load_nvrtc(&rtc_why);

  char buf[512];
  std::string rtc_text = "NVRTC " + std::to_string(g_rtc.major) + "." + std::to_string(g_rtc.minor);
  if (s.driver_ok) {
    const kiln_device_info& i0 = s.devices[0]->info;
    std::snprintf(buf, sizeof buf, "CUDA driver %s, %zu device(s) (first: %s, %s); %s",
                  i0.driver_version, s.devices.size(), i0.name, i0.arch,
                  rtc_ok ? (rtc_text + " loaded").c_str()
                         : (rtc_why + ": can only load precompiled programs").c_str());
    s.availability = buf;
    s.init_status = KILN_OK;
  } else if (rtc_ok) {
    s.availability = driver_why + "; " + rtc_text + " loaded: compile-only";
    s.init_status = KILN_OK;
  } else {
    s.availability = driver_why + "; " + rtc_why;
    s.init_status = KILN_ERR_UNSUPPORTED;
    unload_driver();
  }
  s.init_error = s.availability;
  s.initialized = true;
  if (s.init_status) set_error(s.init_status, "%s", s.init_error.c_str());
  return s.init_status;
}

void shutdown() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.initialized) return;
  for (auto& d : s.devices)
    if (d->refs > 0) close_device(d.get());
  s.devices.clear();
  unload_nvrtc();
  unload_driver();
  s.driver_ok = false;
  s.initialized = false;
  s.init_status = KILN_ERR_UNSUPPORTED;
  s.availability = "shut down";
  g_ctx_generation.fetch_add(1, std::memory_order_acq_rel);
}

const char* availability() noexcept { return state().availability.c_str(); }

int device_count() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.driver_ok ? static_cast<int>(s.devices.size()) : 0;
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

void note_device_lost() noexcept {
  // Lock-free: cu_fail may run under state().mu. The device list is fixed after init.
  const CUcontext cur = t_ctx.ctx;
  if (!cur) return;
  for (auto& d : state().devices)
    if (d->ctx == cur) d->lost.store(true, std::memory_order_release);
}

kiln_status device_status(kiln_device_h dev) {
  if (!dev) return set_error(KILN_ERR_INVALID_ARGUMENT, "device_status: dev is NULL");
  if (dev->lost.load(std::memory_order_acquire))
    return set_error(KILN_ERR_DEVICE_LOST, "cuda:%d hit a sticky error; reset the device",
                     dev->index);
  return KILN_OK;
}

// cuDevicePrimaryCtxReset destroys every allocation, stream, event and module of the context,
// then the context is made again for the references Kiln still holds. The core never passes a
// handle from before the reset again; the plugin's own per-queue state (cuBLAS, cuDNN) dies
// with the queues, which the core stops destroying once their generation is gone.
kiln_status device_reset(kiln_device_h dev) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!dev || dev->refs <= 0) return set_error(KILN_ERR_INVALID_ARGUMENT, "device_reset: not open");
  // Not current on this thread while it is destroyed: the slot would keep naming the old one.
  g_cu.cuCtxSetCurrent(nullptr);
  t_ctx = {};
  if (CUresult r = g_cu.cuDevicePrimaryCtxReset(dev->dev); r != CUDA_SUCCESS)
    return cu_fail(r, "cuDevicePrimaryCtxReset");
  // The reset dropped the primary context's references: retain it again for ours.
  const int refs = dev->refs;
  dev->internal = nullptr;
  dev->pool = nullptr;
  dev->ctx = nullptr;
  g_ctx_generation.fetch_add(1, std::memory_order_acq_rel);
  t_ctx = {};
  if (kiln_status st = open_device(dev); st) {
    // The driver keeps a sticky error for the rest of the process on current drivers: the
    // context was destroyed, but neither the primary context nor a new cuCtxCreate context can
    // be made again (measured on CUDA 13; docs/resilience.md). The device stays lost and open.
    dev->lost.store(true, std::memory_order_release);
    const std::string why = last_error();
    return set_error(KILN_ERR_DEVICE_LOST,
                     "cuda:%d: the driver keeps the sticky error for the rest of the process "
                     "(%s); restart the process, or run the work under kiln::fallback",
                     dev->index, why.c_str());
  }
  dev->refs = refs;
  dev->lost.store(false, std::memory_order_release);
  return KILN_OK;
}

void device_close(kiln_device_h dev) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (!dev || dev->refs <= 0) return;
  if (--dev->refs == 0) close_device(dev);
}

}  // namespace kiln_cuda
