// The machinery under kiln::query's host data (host_input.cpp in, host_output.cpp out): a
// bounded pool of pinned staging buffers per device, reused across queries and shared by
// concurrent ones; a copy queue per direction, so transfers overlap other queries' kernels; and
// memcpy split across a few threads, since one core's memcpy is slower than PCIe.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "kiln/buffer.hpp"
#include "kiln/queue.hpp"

namespace kiln::detail::q {

struct host_transfer_config {
  // Bytes per DMA. Environment: KILN_HOST_CHUNK_BYTES. A staging buffer holds one chunk.
  std::uint64_t chunk_bytes = 8ull << 20;
  // A memcpy is split across threads from this size on.
  std::uint64_t parallel_min_bytes = 2ull << 20;
  // Threads of a split memcpy, the caller's included. 0: min(8, hardware threads).
  // Environment: KILN_HOST_COPY_THREADS.
  unsigned copy_threads = 0;
  // Tests: CPU devices take the staged path too (one copy otherwise).
  bool stage_cpu_devices = false;
};
host_transfer_config host_transfer();
// For tests (small chunks cross many boundaries); applies to transfers that start afterwards.
void set_host_transfer(const host_transfer_config& c);

// memcpy, split across c.copy_threads threads when bytes >= c.parallel_min_bytes.
void parallel_copy(void* dst, const void* src, std::uint64_t bytes, const host_transfer_config& c);

// Where the host can write device memory `m` directly (the CPU backend's), else null.
void* host_address(memory_impl& m, const host_transfer_config& c);

// Whether copies with dev take one copy rather than staging: a CPU device (OpenCL on the CPU).
bool direct_device(const device& dev, const host_transfer_config& c);

// Whether [p, p + bytes) lies in pinned memory a DMA of `dev` can use without staging.
bool pinned_for(const device& dev, const void* p, std::uint64_t bytes);

struct staging_slot {
  void* p = nullptr;
  std::uint64_t bytes = 0;
  std::optional<event> busy;  // the last DMA that used it
};

// A device's staging buffers: at most max_slots of slot_bytes each, made on demand. A slot is
// held only while its holder fills or drains it; it goes back with the event of its DMA, and
// the next holder waits for that event, so no query waits for another's kernels.
class staging_pool {
 public:
  static staging_pool& of(const device& dev);  // made on first use, never destroyed
  static constexpr int max_slots = 8;

  // A slot whose last DMA has finished; blocks while all are held.
  staging_slot* acquire();
  // A slot if one is not held now (waits for its last DMA), else null.
  staging_slot* try_acquire();
  void release(staging_slot* s) noexcept;  // s->busy: its DMA, possibly still running

  queue& h2d() { return h2d_; }
  queue& d2h() { return d2h_; }
  std::uint64_t slot_bytes() const { return slot_bytes_; }

  explicit staging_pool(const device& dev);

 private:
  staging_slot* take(bool block);
  device dev_;
  queue h2d_, d2h_;
  std::uint64_t slot_bytes_;
  struct state;
  state* st_;  // never destroyed, as the pool
};

// Holds a slot; gives it back when destroyed. After an exception between a DMA's submission
// and its event, finishes the queue first so that the next holder cannot overwrite live data.
class slot_lease {
 public:
  slot_lease(staging_pool& p, staging_slot* s) : pool_(&p), slot_(s) {}
  slot_lease(slot_lease&& o) noexcept
      : pool_(o.pool_), slot_(std::exchange(o.slot_, nullptr)), pending_(o.pending_) {}
  slot_lease(const slot_lease&) = delete;
  slot_lease& operator=(const slot_lease&) = delete;
  slot_lease& operator=(slot_lease&&) = delete;
  ~slot_lease();

  staging_slot* get() const { return slot_; }
  staging_slot* operator->() const { return slot_; }
  // A DMA on q uses the slot; done() records its event.
  void submitted(queue& q) { pending_ = &q; }
  void done(queue& q);

 private:
  staging_pool* pool_;
  staging_slot* slot_;
  queue* pending_ = nullptr;
};

}  // namespace kiln::detail::q
