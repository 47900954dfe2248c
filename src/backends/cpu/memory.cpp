// CPU "device" memory is host memory: 64-byte aligned so kernels vectorise; copies and fills run
// in queue order on the queue's thread.
#include <cstdlib>
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"

namespace kiln::cpu::abi {
namespace {
constexpr std::uint64_t alignment = 64;
char* at(kiln_mem_ref r) { return static_cast<char*>(r.base) + r.offset; }

void* aligned(uint64_t bytes) {
  const uint64_t rounded = (bytes + alignment - 1) / alignment * alignment;
  return rounded < bytes ? nullptr : std::aligned_alloc(alignment, rounded);
}

template <class T>
void fill_with(void* dst, const void* pattern, uint64_t count) {
  T v;
  std::memcpy(&v, pattern, sizeof v);
  T* p = static_cast<T*>(dst);
  for (uint64_t i = 0; i < count; ++i) p[i] = v;
}
}  // namespace

kiln_status mem_alloc(kiln_device_h, uint64_t bytes, kiln_queue_h, void** out) {
  if (bytes == 0) return fail(KILN_ERR_INVALID_ARGUMENT, "zero-byte allocation");
  *out = aligned(bytes);
  if (!*out)
    return fail(KILN_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes");
  return KILN_OK;
}

void mem_free(kiln_device_h, void* mem, kiln_queue_h queue) {
  if (queue)
    queue->q.push([mem] { std::free(mem); });
  else
    std::free(mem);
}

kiln_status host_alloc(kiln_device_h d, uint64_t bytes, void** out) {
  return mem_alloc(d, bytes, nullptr, out);
}

void host_free(kiln_device_h, void* p) { std::free(p); }

kiln_status mem_address(kiln_device_h, kiln_mem_ref mem, void** out) {
  *out = at(mem);
  return KILN_OK;
}

kiln_status copy_h2d(kiln_queue_h q, kiln_mem_ref dst, const void* src, uint64_t bytes) {
  q->q.push([d = at(dst), src, bytes] { std::memcpy(d, src, bytes); });
  return KILN_OK;
}

kiln_status copy_d2h(kiln_queue_h q, void* dst, kiln_mem_ref src, uint64_t bytes) {
  q->q.push([dst, s = at(src), bytes] { std::memcpy(dst, s, bytes); });
  return KILN_OK;
}

kiln_status copy_d2d(kiln_queue_h q, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes) {
  q->q.push([d = at(dst), s = at(src), bytes] { std::memmove(d, s, bytes); });
  return KILN_OK;
}

kiln_status fill(kiln_queue_h q, kiln_mem_ref dst, const void* pattern, uint32_t size,
                 uint64_t count) {
  uint64_t v = 0;
  switch (size) {
    case 1:
    case 2:
    case 4:
    case 8: std::memcpy(&v, pattern, size); break;
    default: return fail(KILN_ERR_INVALID_ARGUMENT, "fill pattern must be 1, 2, 4 or 8 bytes");
  }
  q->q.push([d = at(dst), v, size, count] {
    switch (size) {
      case 1: std::memset(d, static_cast<int>(v & 0xff), count); break;
      case 2: fill_with<uint16_t>(d, &v, count); break;
      case 4: fill_with<uint32_t>(d, &v, count); break;
      default: fill_with<uint64_t>(d, &v, count); break;
    }
  });
  return KILN_OK;
}

}  // namespace kiln::cpu::abi
