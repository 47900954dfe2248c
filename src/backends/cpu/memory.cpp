// CPU "device" memory is host memory: 64-byte aligned so kernels vectorise; copies and fills run
// in queue order on the queue's thread, large ones split over the thread pool.
#include <unistd.h>

#include <algorithm>
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

// One core's memcpy moves ~20 GB/s, far below what the memory system gives all cores. A copy or
// fill is split when every thread gets at least this much (smaller pieces cost more to hand
// out than they save).
constexpr uint64_t split_bytes_per_thread = 1ull << 20;

// Runs body(lo, hi) over [0, bytes) in one piece per pool thread, the pieces cut at 64-byte
// boundaries of dst (no two threads write one cache line); one call when bytes is small.
template <class Body>
void split(char* dst, uint64_t bytes, bool splittable, Body body) {
  thread_pool& tp = pool();
  const uint64_t parts =
      splittable ? std::min<uint64_t>(tp.size(), bytes / split_bytes_per_thread) : 1;
  if (parts <= 1) return body(0, bytes);
  const auto cut = [&](uint64_t p) -> uint64_t {
    if (p == parts) return bytes;
    const uint64_t at = reinterpret_cast<uintptr_t>(dst) + bytes / parts * p;
    return std::max<uint64_t>(at / alignment * alignment, reinterpret_cast<uintptr_t>(dst)) -
           reinterpret_cast<uintptr_t>(dst);
  };
  tp.run(parts, [&](uint64_t p) { body(cut(p), cut(p + 1)); });
}

void copy_bytes(char* d, const char* s, uint64_t bytes) {
  if (d < s + bytes && s < d + bytes) return void(std::memmove(d, s, bytes));  // overlapping
  split(d, bytes, true, [&](uint64_t lo, uint64_t hi) { std::memcpy(d + lo, s + lo, hi - lo); });
}

// Large blocks are kept after free and reused for the same size class: a fresh block costs a
// page fault per 4 KiB on first touch, which costs more than a query over it.
class block_pool {
 public:
  static constexpr uint64_t min_pooled = 1ull << 20, max_cached = 2ull << 30;
  static uint64_t size_class(uint64_t b) {  // 1/8 steps between powers of two
    uint64_t p = 1;
    while (p <= b / 2) p *= 2;  // not p * 2 <= b: that wraps to 0 for b >= 2^63 (a hang)
    const uint64_t step = p >= 8 ? p / 8 : 1;  // sizes below 8 bytes: their own class
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
  uint64_t cached() {
    std::lock_guard lock(mu_);
    return cached_;
  }
  // Frees every idle block (kiln's out-of-memory retry, device::trim).
  void trim() {
    std::lock_guard lock(mu_);
    for (auto& [bytes, p] : free_) {
      sizes_.erase(p);
      std::free(p);
    }
    free_.clear();
    cached_ = 0;
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

uint64_t pooled_bytes() { return pool_of_blocks().cached(); }
void trim_pool() { pool_of_blocks().trim(); }

kiln_status mem_alloc(kiln_device_h, uint64_t bytes, kiln_queue_h, void** out) {
  if (bytes == 0) return fail(KILN_ERR_INVALID_ARGUMENT, "zero-byte allocation");
  // More than the machine has can never succeed: refused before the allocator sees it (some
  // allocators, ASan's among them, abort on such a request instead of returning null).
  static const uint64_t physical =
      static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (physical && bytes > physical)
    return set_error(KILN_ERR_OUT_OF_MEMORY, "%llu bytes is more than the host's %llu bytes",
                     static_cast<unsigned long long>(bytes),
                     static_cast<unsigned long long>(physical));
  // A size class below bytes: rounding up wrapped (bytes near 2^64), so no pooled block fits.
  if (const uint64_t cls = bytes >= block_pool::min_pooled ? block_pool::size_class(bytes) : 0;
      cls >= bytes) {
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

// host_alloc's memory comes from mem_alloc, whose large blocks the pool tracks by address: it
// must go back through release(). Freed straight to libc, the pool kept the block's size under
// an address libc then handed out again, and a later release of a smaller buffer there filed
// it under the larger size class: the next allocation of that class overran it (issue 23).
void host_free(kiln_device_h, void* p) { release(p); }

kiln_status mem_address(kiln_device_h, kiln_mem_ref mem, void** out) {
  *out = at(mem);
  return KILN_OK;
}

kiln_status copy_h2d(kiln_queue_h q, kiln_mem_ref dst, const void* src, uint64_t bytes) {
  q->q.push([d = at(dst), s = static_cast<const char*>(src), bytes] { copy_bytes(d, s, bytes); });
  return KILN_OK;
}

kiln_status copy_d2h(kiln_queue_h q, void* dst, kiln_mem_ref src, uint64_t bytes) {
  q->q.push([d = static_cast<char*>(dst), s = at(src), bytes] { copy_bytes(d, s, bytes); });
  return KILN_OK;
}

kiln_status copy_d2d(kiln_queue_h q, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes) {
  q->q.push([d = at(dst), s = at(src), bytes] { copy_bytes(d, s, bytes); });
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
    // The pieces' 64-byte cuts fall on pattern boundaries when d does, as at element offsets.
    const bool splittable = reinterpret_cast<uintptr_t>(d) % size == 0;
    split(d, count * size, splittable, [&](uint64_t lo, uint64_t hi) {
      char* p = d + lo;
      const uint64_t n = (hi - lo) / size;
      switch (size) {
        case 1: std::memset(p, static_cast<int>(v & 0xff), n); break;
        case 2: fill_with<uint16_t>(p, &v, n); break;
        case 4: fill_with<uint32_t>(p, &v, n); break;
        default: fill_with<uint64_t>(p, &v, n); break;
      }
    });
  });
  return KILN_OK;
}

}  // namespace kiln::cpu::abi
