// Buffers (one cl_mem per allocation), host staging memory and copies. Every copy is
// non-blocking on the caller's in-order queue, as on the other backends.
#include <cstdlib>
#include <cstring>

#include "opencl_backend.hpp"

namespace kiln_opencl {

namespace {

cl_mem mem_of(const kiln_mem_ref& m) { return static_cast<cl_mem>(m.base); }

// Transfers and fills go in pieces of at most 1 GiB: NVIDIA's driver failed (and lost the
// context) filling a 2^31 + 123-byte buffer in one call.
constexpr uint64_t kChunk = uint64_t{1} << 30;

template <class Op>
cl_int chunked(uint64_t bytes, uint64_t granule, Op op) {
  const uint64_t step = kChunk / granule * granule;
  for (uint64_t done = 0; done < bytes; done += step)
    if (cl_int e = op(done, bytes - done < step ? bytes - done : step); e != CL_SUCCESS) return e;
  return CL_SUCCESS;
}

// NVIDIA's clEnqueueFillBuffer lost the context filling 2^31 + 123 bytes, even in 1 GiB
// pieces (driver 580); there fills run as these kernels, with 64-bit offsets throughout.
const char* fill_source = R"(
#define KILN_FILL(name, T)                                                                   \
  __kernel void name(__global uchar* base, ulong offset, ulong count, T value) {             \
    __global T* p = (__global T*)(base + offset);                                            \
    for (ulong i = get_global_id(0); i < count; i += get_global_size(0)) p[i] = value;       \
  }
KILN_FILL(kiln_fill1, uchar)
KILN_FILL(kiln_fill2, ushort)
KILN_FILL(kiln_fill4, uint)
KILN_FILL(kiln_fill8, ulong)
)";

kiln_status fill_kernel(kiln_device_s* d, uint32_t pattern_size, cl_kernel* out) {
  const int slot = pattern_size == 1 ? 0 : pattern_size == 2 ? 1 : pattern_size == 4 ? 2 : 3;
  std::lock_guard<std::mutex> lock(d->fill_mu);
  if (!d->fill_program) {
    cl_int e = CL_SUCCESS;
    cl_program p = g_cl.clCreateProgramWithSource(d->ctx, 1, &fill_source, nullptr, &e);
    if (e != CL_SUCCESS) return cl_fail(e, "clCreateProgramWithSource(fill)");
    if ((e = g_cl.clBuildProgram(p, 1, &d->id, "", nullptr, nullptr)) != CL_SUCCESS) {
      g_cl.clReleaseProgram(p);
      return cl_fail(e, "clBuildProgram(fill)");
    }
    const char* names[4] = {"kiln_fill1", "kiln_fill2", "kiln_fill4", "kiln_fill8"};
    for (int i = 0; i < 4; ++i) {
      d->fill_kernels[i] = g_cl.clCreateKernel(p, names[i], &e);
      if (e != CL_SUCCESS) {
        for (int j = 0; j < i; ++j)
          g_cl.clReleaseKernel(d->fill_kernels[j]), d->fill_kernels[j] = nullptr;
        g_cl.clReleaseProgram(p);
        return cl_fail(e, "clCreateKernel(fill)");
      }
    }
    d->fill_program = p;
  }
  *out = d->fill_kernels[slot];
  return KILN_OK;
}

// Called with the kernel's device fill_mu not held; the kernel object's arguments are set and
// enqueued under fill_mu so that concurrent fills do not interleave.
kiln_status fill_by_kernel(kiln_queue_h queue, cl_mem mem, uint64_t offset, const void* pattern,
                           uint32_t pattern_size, uint64_t count) {
  kiln_device_s* d = queue->dev;
  cl_kernel k = nullptr;
  if (kiln_status st = fill_kernel(d, pattern_size, &k); st) return st;
  std::lock_guard<std::mutex> lock(d->fill_mu);
  const cl_ulong off = offset, n = count;
  cl_int e = g_cl.clSetKernelArg(k, 0, sizeof mem, &mem);
  if (e == CL_SUCCESS) e = g_cl.clSetKernelArg(k, 1, sizeof off, &off);
  if (e == CL_SUCCESS) e = g_cl.clSetKernelArg(k, 2, sizeof n, &n);
  if (e == CL_SUCCESS) e = g_cl.clSetKernelArg(k, 3, pattern_size, pattern);
  if (e != CL_SUCCESS) return cl_fail(e, "clSetKernelArg(fill)");
  const size_t local = 256;
  const uint64_t groups = (count + local - 1) / local;
  const size_t global = static_cast<size_t>(local * (groups < 65536 ? groups : 65536));
  e = g_cl.clEnqueueNDRangeKernel(queue->q, k, 1, nullptr, &global, &local, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueNDRangeKernel(fill)");
}

// A non-blocking write may read its host memory as soon as it is enqueued: NVIDIA's driver
// stages pageable memory then, not when the in-order queue reaches the write. A write from
// host memory that an earlier read, still queued on any queue of the device, is to fill would
// then send stale bytes (issue 23: the stress test's device -> host -> device round trip on
// opencl:0/1 under load). Reads into host memory are remembered with their events; a write
// from an overlapping range first waits for them on the host.
void note_host_read(kiln_device_s* d, void* dst, uint64_t bytes, cl_event ev) {
  const auto lo = reinterpret_cast<uintptr_t>(dst);
  std::lock_guard<std::mutex> lock(d->reads_mu);
  // Forget finished reads first, so the list holds only what is in flight.
  std::erase_if(d->host_reads, [](const kiln_device_s::host_read& r) {
    cl_int st = CL_QUEUED;
    if (g_cl.clGetEventInfo(r.ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, nullptr) !=
            CL_SUCCESS ||
        st == CL_COMPLETE || st < 0) {
      g_cl.clReleaseEvent(r.ev);
      return true;
    }
    return false;
  });
  d->host_reads.push_back({lo, lo + bytes, ev});
}

cl_int wait_for_host_reads(kiln_device_s* d, const void* src, uint64_t bytes) {
  const auto lo = reinterpret_cast<uintptr_t>(src), hi = lo + bytes;
  std::vector<cl_event> wait;
  {
    std::lock_guard<std::mutex> lock(d->reads_mu);
    std::erase_if(d->host_reads, [&](const kiln_device_s::host_read& r) {
      if (r.hi <= lo || hi <= r.lo) return false;
      wait.push_back(r.ev);
      return true;
    });
  }
  cl_int e = wait.empty() ? CL_SUCCESS : g_cl.clWaitForEvents(cl_uint(wait.size()), wait.data());
  for (cl_event ev : wait) g_cl.clReleaseEvent(ev);
  return e;
}

}  // namespace

void forget_host_reads(kiln_device_s* d) noexcept {
  std::lock_guard<std::mutex> lock(d->reads_mu);
  for (auto& r : d->host_reads) g_cl.clReleaseEvent(r.ev);
  d->host_reads.clear();
}

kiln_status mem_alloc(kiln_device_h dev, uint64_t bytes, kiln_queue_h, void** out) {
  if (!dev || !out || bytes == 0)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_alloc: NULL argument or zero size");
  if (bytes > dev->info.max_alloc_bytes)
    return set_error(KILN_ERR_OUT_OF_MEMORY,
                     "mem_alloc: %llu bytes exceed CL_DEVICE_MAX_MEM_ALLOC_SIZE (%llu) of %s",
                     static_cast<unsigned long long>(bytes),
                     static_cast<unsigned long long>(dev->info.max_alloc_bytes), dev->info.name);
  cl_int e = CL_SUCCESS;
  cl_mem m = g_cl.clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, bytes, nullptr, &e);
  if (e != CL_SUCCESS) return cl_fail(e, "clCreateBuffer");
  *out = m;
  return KILN_OK;
}

// OpenCL deletes a released buffer only after the commands already queued on it finish, so
// releasing at once is the stream-ordered free the ABI asks for.
void mem_free(kiln_device_h, void* mem, kiln_queue_h) {
  if (mem) g_cl.clReleaseMemObject(static_cast<cl_mem>(mem));
}

// Plain page-aligned host memory: OpenCL 1.2 has no portable pinned allocation that is not
// also a buffer object, and the copies below accept any host pointer.
kiln_status host_alloc(kiln_device_h, uint64_t bytes, void** out) {
  if (!out || bytes == 0) return set_error(KILN_ERR_INVALID_ARGUMENT, "host_alloc: zero size");
  void* p = nullptr;
  if (posix_memalign(&p, 4096, bytes) != 0)
    return set_error(KILN_ERR_OUT_OF_MEMORY, "host_alloc: %llu bytes",
                     static_cast<unsigned long long>(bytes));
  *out = p;
  return KILN_OK;
}

void host_free(kiln_device_h, void* ptr) { std::free(ptr); }

kiln_status mem_address(kiln_device_h, kiln_mem_ref, void**) {
  return set_error(KILN_ERR_UNSUPPORTED,
                   "mem_address: OpenCL buffers have no device address visible to the host");
}

kiln_status copy_h2d(kiln_queue_h queue, kiln_mem_ref dst, const void* src, uint64_t bytes) {
  if (!queue || !src) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_h2d: NULL argument");
  if (bytes == 0) return KILN_OK;
  if (cl_int e = wait_for_host_reads(queue->dev, src, bytes); e != CL_SUCCESS)
    return cl_fail(e, "clWaitForEvents(reads into the source)");
  cl_int e = chunked(bytes, 1, [&](uint64_t at, uint64_t n) {
    return g_cl.clEnqueueWriteBuffer(queue->q, mem_of(dst), CL_FALSE, dst.offset + at, n,
                                     static_cast<const char*>(src) + at, 0, nullptr, nullptr);
  });
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueWriteBuffer");
}

kiln_status copy_d2h(kiln_queue_h queue, void* dst, kiln_mem_ref src, uint64_t bytes) {
  if (!queue || !dst) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_d2h: NULL argument");
  if (bytes == 0) return KILN_OK;
  cl_event last = nullptr;
  cl_int e = chunked(bytes, 1, [&](uint64_t at, uint64_t n) {
    if (last) g_cl.clReleaseEvent(last), last = nullptr;
    return g_cl.clEnqueueReadBuffer(queue->q, mem_of(src), CL_FALSE, src.offset + at, n,
                                    static_cast<char*>(dst) + at, 0, nullptr, &last);
  });
  if (e != CL_SUCCESS) {
    if (last) g_cl.clReleaseEvent(last);
    return cl_fail(e, "clEnqueueReadBuffer");
  }
  note_host_read(queue->dev, dst, bytes, last);  // in-order: the last piece ends the read
  return KILN_OK;
}

kiln_status copy_d2d(kiln_queue_h queue, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes) {
  if (!queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_d2d: NULL queue");
  if (bytes == 0) return KILN_OK;
  cl_int e = chunked(bytes, 1, [&](uint64_t at, uint64_t n) {
    return g_cl.clEnqueueCopyBuffer(queue->q, mem_of(src), mem_of(dst), src.offset + at,
                                    dst.offset + at, n, 0, nullptr, nullptr);
  });
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueCopyBuffer");
}

kiln_status fill(kiln_queue_h queue, kiln_mem_ref dst, const void* pattern, uint32_t pattern_size,
                 uint64_t count) {
  if (!queue || !pattern) return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: NULL argument");
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: pattern of %u bytes (1, 2, 4 or 8)",
                     pattern_size);
  if (count == 0) return KILN_OK;
  arm_exit_guard();
  if (dst.offset % pattern_size != 0)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "fill: offset %llu is not a multiple of the %u-byte pattern (OpenCL)",
                     static_cast<unsigned long long>(dst.offset), pattern_size);
  if (queue->dev->nvidia)
    return fill_by_kernel(queue, mem_of(dst), dst.offset, pattern, pattern_size, count);
  cl_int e = chunked(count * pattern_size, pattern_size, [&](uint64_t at, uint64_t n) {
    return g_cl.clEnqueueFillBuffer(queue->q, mem_of(dst), pattern, pattern_size, dst.offset + at,
                                    n, 0, nullptr, nullptr);
  });
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueFillBuffer");
}

}  // namespace kiln_opencl
