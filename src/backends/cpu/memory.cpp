// CPU "device" memory is host memory: 64-byte aligned so kernels vectorise; copies and fills run
// in queue order on the queue's thread.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

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

// Large blocks are kept after free and reused for the same size class: a fresh block costs a
// page fault per 4 KiB on first touch, which costs more than a query over it.
class block_pool {
 public:
  static constexpr uint64_t min_pooled = 1ull << 20, max_cached = 2ull << 30;
  static uint64_t size_class(uint64_t b) {  // 1/8 steps between powers of two
    uint64_t p = 1;
    while (p * 2 <= b) p *= 2;
    const uint64_t step = p / 8;
    return (b + step - 1) / step * step;
  }
  void* take(uint64_t bytes) {
    std::lock_guard lock(mu_);
    auto it = free_.find(bytes);
    if (it == free_.end()) return nullptr;
    void* p = it->second;
    free_.erase(it);
    cached_ -= bytes;
    return p;
  }
  void note(void* p, uint64_t bytes) {
    std::lock_guard lock(mu_);
    sizes_[p] = bytes;
  }
  // True when p was pooled (the pool keeps or frees it).
  bool give(void* p) {
    std::lock_guard lock(mu_);
    auto s = sizes_.find(p);
    if (s == sizes_.end()) return false;
    free_.emplace(s->second, p);
    cached_ += s->second;
    while (cached_ > max_cached && !free_.empty()) {  // drop the largest first
      auto last = std::prev(free_.end());
      cached_ -= last->first;
      sizes_.erase(last->second);
      std::free(last->second);
      free_.erase(last);
    }
    return true;
  }

 private:
  std::mutex mu_;
  std::multimap<uint64_t, void*> free_;
  std::unordered_map<void*, uint64_t> sizes_;
  uint64_t cached_ = 0;
};
block_pool& pool_of_blocks() {
  static auto* p = new block_pool;  // never destroyed: frees may come from queue threads at exit
  return *p;
}

void release(void* mem) {
  if (!pool_of_blocks().give(mem)) std::free(mem);
}
}  // namespace

kiln_status mem_alloc(kiln_device_h, uint64_t bytes, kiln_queue_h, void** out) {
  if (bytes == 0) return fail(KILN_ERR_INVALID_ARGUMENT, "zero-byte allocation");
  if (bytes >= block_pool::min_pooled) {
    const uint64_t cls = block_pool::size_class(bytes);
    if ((*out = pool_of_blocks().take(cls))) return KILN_OK;
    if ((*out = aligned(cls))) {
      pool_of_blocks().note(*out, cls);
      return KILN_OK;
    }
  }
  *out = aligned(bytes);
  if (!*out)
    return fail(KILN_ERR_OUT_OF_MEMORY, "cannot allocate " + std::to_string(bytes) + " bytes");
  return KILN_OK;
}

void mem_free(kiln_device_h, void* mem, kiln_queue_h queue) {
  // An idle queue has no work left that could touch mem: release it now, so that the next
  // allocation of the same size finds it in the pool.
  if (queue)
    queue->q.run_or_push([mem] { release(mem); });
  else
    release(mem);
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
