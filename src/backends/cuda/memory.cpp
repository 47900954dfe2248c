// Device and pinned host memory, copies and fills.
#include <cstring>

#include "cuda_backend.hpp"

namespace kiln_cuda {

namespace {

kiln_status check_queue(kiln_queue_h q, const char* call) {
  if (!q) return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: queue is NULL", call);
  return make_current(q->dev);
}

}  // namespace

// Zero bytes is refused rather than faked with a 1-byte allocation: the core never asks for 0,
// and a unique handle for nothing would only hide bugs.
kiln_status mem_alloc(kiln_device_h dev, uint64_t bytes, kiln_queue_h queue, void** out) {
  if (!dev || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_alloc: NULL device or out");
  if (bytes == 0) return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_alloc: zero-byte allocation");
  if (queue && queue->dev != dev)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_alloc: queue belongs to another device");
  if (kiln_status st = make_current(dev); st) return st;
  CUdeviceptr p = 0;
  if (dev->pool) {
    CUstream s = queue ? queue->stream : dev->internal;
    if (CUresult r = g_cu.cuMemAllocFromPoolAsync(&p, bytes, dev->pool, s); r != CUDA_SUCCESS)
      return cu_fail(r, "cuMemAllocFromPoolAsync");
    // A NULL queue promises memory usable from every queue once we return.
    if (!queue) {
      if (CUresult r = g_cu.cuStreamSynchronize(s); r != CUDA_SUCCESS) {
        g_cu.cuMemFreeAsync(p, s);
        return cu_fail(r, "cuStreamSynchronize");
      }
    }
  } else if (CUresult r = g_cu.cuMemAlloc(&p, bytes); r != CUDA_SUCCESS) {
    return cu_fail(r, "cuMemAlloc");
  }
  *out = reinterpret_cast<void*>(p);
  return KILN_OK;
}

// No status to return: failures only update last_error(). A driver already shut down
// (CUDA_ERROR_DEINITIALIZED) has freed everything, so that is not reported.
void mem_free(kiln_device_h dev, void* mem, kiln_queue_h queue) {
  if (!dev || !mem || make_current(dev) != KILN_OK) return;
  CUdeviceptr p = reinterpret_cast<CUdeviceptr>(mem);
  CUresult r;
  if (dev->pool) {
    r = g_cu.cuMemFreeAsync(p, queue ? queue->stream : dev->internal);
  } else {
    r = queue ? g_cu.cuStreamSynchronize(queue->stream) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) r = g_cu.cuMemFree(p);
  }
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED) cu_fail(r, "mem_free");
}

kiln_status host_alloc(kiln_device_h dev, uint64_t bytes, void** out) {
  if (!dev || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "host_alloc: NULL device or out");
  if (bytes == 0) return set_error(KILN_ERR_INVALID_ARGUMENT, "host_alloc: zero-byte allocation");
  if (kiln_status st = make_current_checked(dev); st) return st;
  unsigned flags = CU_MEMHOSTALLOC_PORTABLE;
  if (dev->info.features & KILN_FEATURE_MAPPED_HOST) flags |= CU_MEMHOSTALLOC_DEVICEMAP;
  if (CUresult r = g_cu.cuMemHostAlloc(out, bytes, flags); r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemHostAlloc");
  return KILN_OK;
}

void host_free(kiln_device_h dev, void* ptr) {
  if (!dev || !ptr || make_current(dev) != KILN_OK) return;
  CUresult r = g_cu.cuMemFreeHost(ptr);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED) cu_fail(r, "cuMemFreeHost");
}

kiln_status mem_address(kiln_device_h dev, kiln_mem_ref mem, void** out) {
  if (!dev || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_address: NULL argument");
  *out = reinterpret_cast<void*>(dptr(mem));
  return KILN_OK;
}

kiln_status copy_h2d(kiln_queue_h queue, kiln_mem_ref dst, const void* src, uint64_t bytes) {
  if (bytes == 0) return KILN_OK;
  if (!src) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_h2d: src is NULL");
  if (kiln_status st = check_queue(queue, "copy_h2d"); st) return st;
  CUresult r = g_cu.cuMemcpyHtoDAsync(dptr(dst), src, bytes, queue->stream);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuMemcpyHtoDAsync");
}

kiln_status copy_d2h(kiln_queue_h queue, void* dst, kiln_mem_ref src, uint64_t bytes) {
  if (bytes == 0) return KILN_OK;
  if (!dst) return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_d2h: dst is NULL");
  if (kiln_status st = check_queue(queue, "copy_d2h"); st) return st;
  CUresult r = g_cu.cuMemcpyDtoHAsync(dst, dptr(src), bytes, queue->stream);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuMemcpyDtoHAsync");
}

kiln_status copy_d2d(kiln_queue_h queue, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes) {
  if (bytes == 0) return KILN_OK;
  if (kiln_status st = check_queue(queue, "copy_d2d"); st) return st;
  CUresult r = g_cu.cuMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, queue->stream);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuMemcpyDtoDAsync");
}

// Like OpenCL's clEnqueueFillBuffer, dst must be aligned to the pattern size.
kiln_status fill(kiln_queue_h queue, kiln_mem_ref dst, const void* pattern, uint32_t pattern_size,
                 uint64_t count) {
  if (pattern_size != 1 && pattern_size != 2 && pattern_size != 4 && pattern_size != 8)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: pattern size %u is not 1, 2, 4 or 8",
                     pattern_size);
  if (!pattern) return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: pattern is NULL");
  if (count == 0) return KILN_OK;
  if (count > UINT64_MAX / pattern_size)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "fill: count overflows");
  const CUdeviceptr p = dptr(dst);
  if (p % pattern_size != 0)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "fill: destination 0x%llx is not aligned to the %u-byte pattern",
                     static_cast<unsigned long long>(p), pattern_size);
  if (kiln_status st = check_queue(queue, "fill"); st) return st;
  CUstream s = queue->stream;
  CUresult r = CUDA_SUCCESS;
  const char* call = "cuMemsetD32Async";
  switch (pattern_size) {
    case 1:
      call = "cuMemsetD8Async";
      r = g_cu.cuMemsetD8Async(p, *static_cast<const unsigned char*>(pattern), count, s);
      break;
    case 2: {
      unsigned short v;
      std::memcpy(&v, pattern, 2);
      call = "cuMemsetD16Async";
      r = g_cu.cuMemsetD16Async(p, v, count, s);
      break;
    }
    case 4: {
      unsigned int v;
      std::memcpy(&v, pattern, 4);
      r = g_cu.cuMemsetD32Async(p, v, count, s);
      break;
    }
    case 8: {
      unsigned int w[2];  // w[0] sits at the lower address
      std::memcpy(w, pattern, 8);
      if (w[0] == w[1]) {
        r = g_cu.cuMemsetD32Async(p, w[0], count * 2, s);
      } else {
        // No 64-bit memset in the driver: write each 32-bit half as a column of a
        // "2D" region one element wide whose rows are 8 bytes apart.
        call = "cuMemsetD2D32Async";
        r = g_cu.cuMemsetD2D32Async(p, 8, w[0], 1, count, s);
        if (r == CUDA_SUCCESS) r = g_cu.cuMemsetD2D32Async(p + 4, 8, w[1], 1, count, s);
      }
      break;
    }
  }
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, call);
}

}  // namespace kiln_cuda

namespace kiln_cuda {

kiln_status mem_info(kiln_device_h dev, uint64_t* free_bytes, uint64_t* total_bytes,
                     uint64_t* cached_bytes) {
  if (!dev) return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_info: dev is NULL");
  if (kiln_status st = make_current_checked(dev); st) return st;
  size_t f = 0, t = 0;
  if (CUresult r = g_cu.cuMemGetInfo(&f, &t); r != CUDA_SUCCESS) return cu_fail(r, "cuMemGetInfo");
  cuuint64_t reserved = 0, used = 0;
  if (dev->pool) {
    if (CUresult r =
            g_cu.cuMemPoolGetAttribute(dev->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved);
        r != CUDA_SUCCESS)
      return cu_fail(r, "cuMemPoolGetAttribute(RESERVED_MEM_CURRENT)");
    if (CUresult r = g_cu.cuMemPoolGetAttribute(dev->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used);
        r != CUDA_SUCCESS)
      return cu_fail(r, "cuMemPoolGetAttribute(USED_MEM_CURRENT)");
  }
  if (free_bytes) *free_bytes = f;
  if (total_bytes) *total_bytes = t;
  if (cached_bytes) *cached_bytes = reserved > used ? reserved - used : 0;
  return KILN_OK;
}

// Trims what the pool can release now. No synchronisation: a context-wide wait would hang
// behind a resident ring kernel, and frees still queued are released by the next trim.
kiln_status mem_trim(kiln_device_h dev) {
  if (!dev) return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_trim: dev is NULL");
  if (!dev->pool) return KILN_OK;
  if (kiln_status st = make_current_checked(dev); st) return st;
  if (CUresult r = g_cu.cuMemPoolTrimTo(dev->pool, 0); r != CUDA_SUCCESS)
    return cu_fail(r, "cuMemPoolTrimTo");
  return KILN_OK;
}

}  // namespace kiln_cuda

namespace kiln_cuda {

// Asked before every peer copy rather than remembered: a device reset destroys the context
// and its peer mappings, and both calls are cheap next to a copy worth doing.
kiln_status peer_access(kiln_device_h dev, kiln_device_h peer) {
  if (!dev || !peer) return set_error(KILN_ERR_INVALID_ARGUMENT, "peer_access: NULL device");
  if (dev == peer) return KILN_OK;
  if (!peer->ctx)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "peer_access: cuda:%d is not open", peer->index);
  int can = 0;
  if (CUresult r = g_cu.cuDeviceCanAccessPeer(&can, dev->dev, peer->dev); r != CUDA_SUCCESS)
    return cu_fail(r, "cuDeviceCanAccessPeer");
  if (!can)
    return set_error(KILN_ERR_UNSUPPORTED,
                     "cuda:%d cannot access cuda:%d's memory (cuDeviceCanAccessPeer says no)",
                     dev->index, peer->index);
  if (kiln_status st = make_current_checked(dev); st) return st;
  CUresult r = g_cu.cuCtxEnablePeerAccess(peer->ctx, 0);
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED)
    return cu_fail(r, "cuCtxEnablePeerAccess");
  return KILN_OK;
}

kiln_status copy_peer(kiln_queue_h queue, kiln_device_h dst_dev, kiln_mem_ref dst,
                      kiln_device_h src_dev, kiln_mem_ref src, uint64_t bytes) {
  if (!queue || !dst_dev || !src_dev)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_peer: NULL queue or device");
  if (queue->dev != dst_dev && queue->dev != src_dev)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "copy_peer: the queue is on neither device");
  if (bytes == 0) return KILN_OK;
  kiln_device_h other = queue->dev == dst_dev ? src_dev : dst_dev;
  if (kiln_status st = peer_access(queue->dev, other); st) return st;
  if (kiln_status st = make_current(queue->dev); st) return st;
  CUresult r = g_cu.cuMemcpyPeerAsync(dptr(dst), dst_dev->ctx, dptr(src), src_dev->ctx, bytes,
                                      queue->stream);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuMemcpyPeerAsync");
}

}  // namespace kiln_cuda
