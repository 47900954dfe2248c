// Buffers (one cl_mem per allocation), host staging memory and copies. Every copy is
// non-blocking on the caller's in-order queue, as on the other backends.
#include <cstdlib>
#include <cstring>

#include "opencl_backend.hpp"

namespace kiln_opencl {

namespace {
cl_mem mem_of(const kiln_mem_ref& m) { return static_cast<cl_mem>(m.base); }
}  // namespace

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
  cl_int e = g_cl.clEnqueueWriteBuffer(queue->q, mem_of(dst), CL_FALSE, dst.offset, bytes, src, 0,
                                       nullptr, nullptr);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueWriteBuffer");
}

kiln_status copy_d2h(kiln_queue_h queue, void* dst, kiln_mem_ref src, uint64_t bytes) {
  if (!queue || !dst) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_d2h: NULL argument");
  if (bytes == 0) return KILN_OK;
  cl_int e = g_cl.clEnqueueReadBuffer(queue->q, mem_of(src), CL_FALSE, src.offset, bytes, dst, 0,
                                      nullptr, nullptr);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueReadBuffer");
}

kiln_status copy_d2d(kiln_queue_h queue, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes) {
  if (!queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_d2d: NULL queue");
  if (bytes == 0) return KILN_OK;
  cl_int e = g_cl.clEnqueueCopyBuffer(queue->q, mem_of(src), mem_of(dst), src.offset, dst.offset,
                                      bytes, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueCopyBuffer");
}

kiln_status fill(kiln_queue_h queue, kiln_mem_ref dst, const void* pattern, uint32_t pattern_size,
                 uint64_t count) {
  if (!queue || !pattern) return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: NULL argument");
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: pattern of %u bytes (1, 2, 4 or 8)",
                     pattern_size);
  if (count == 0) return KILN_OK;
  if (dst.offset % pattern_size != 0)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "fill: offset %llu is not a multiple of the %u-byte pattern (OpenCL)",
                     static_cast<unsigned long long>(dst.offset), pattern_size);
  cl_int e = g_cl.clEnqueueFillBuffer(queue->q, mem_of(dst), pattern, pattern_size, dst.offset,
                                      count * pattern_size, 0, nullptr, nullptr);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueFillBuffer");
}

}  // namespace kiln_opencl
