#include "query/scratch.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "kiln/buffer.hpp"

namespace kiln::detail::q {

struct device_scratch {
  std::mutex mu;
  std::vector<std::unique_ptr<scratch>> sets;
  std::vector<unsigned char*> free_slots;
  std::vector<std::pair<unsigned char*, event>> retired;  // given back while in flight
};

namespace {

constexpr std::size_t preferred_sets = 8;      // beyond this, a set moves between queues
constexpr std::uint64_t slots_per_chunk = 64;  // pinned result slots per host allocation

void zero(queue& q, memory_impl& m, std::uint64_t bytes) {
  const std::uint32_t z = 0;
  detail::fill(*q.impl(), m, 0, &z, sizeof z, bytes / sizeof z);
}

// Replaces m with `bytes` of new memory ordered on q; the old block is freed on q, after the
// work that used it (every earlier user is ordered before q: see scratch_lease).
void reallocate(std::shared_ptr<memory_impl>& m, queue& q, std::uint64_t bytes) {
  if (m) note_queue_use(*m, *q.impl());
  m = allocate_on(*q.impl(), bytes);
}

// Out of memory: sets nobody leases give their memory back (after their last queue's work).
// Device reset: every set and slot belongs to the old generation; forget them (their memory
// went with the reset; the core never frees stale memory).
void drop_sets(device_scratch& ds, bool reset, bool destroyed) {
  // Each dropped set with the queue it must wait for (locked here: once `last` has expired, only
  // `last_drained` tells whether the queue's destructor still waits for its kernels).
  std::vector<std::pair<std::unique_ptr<scratch>, std::shared_ptr<queue_impl>>> dropped;
  {
    std::lock_guard lock(ds.mu);
    for (auto& s : ds.sets) {
      if (!reset && s->leased) continue;
      std::shared_ptr<queue_impl> last = s->last.lock();
      if (!reset && !last && !s->last_drained.expired()) continue;  // still draining
      dropped.emplace_back(std::move(s), std::move(last));
    }
    std::erase(ds.sets, nullptr);
    if (reset && destroyed) {  // pinned slots died with the context; else they stay usable
      ds.free_slots.clear();
      ds.retired.clear();
    }
  }
  if (reset) return;
  for (auto& [s, last] : dropped)
    if (last) try {
        queue(last).finish();
      } catch (...) {  // a failed queue ran nothing more: the memory is free to go
      }
}

std::mutex& scratch_mu() {
  static std::mutex mu;
  return mu;
}
std::map<const device_impl*, std::unique_ptr<device_scratch>>& all_scratch() {
  // Never destroyed, like the devices: no device memory is freed after a driver shut down.
  static auto* all = new std::map<const device_impl*, std::unique_ptr<device_scratch>>;
  return *all;
}
void drop_for(const device_impl* dev, bool reset) {
  device_scratch* ds = nullptr;
  {
    std::lock_guard lock(scratch_mu());
    auto it = all_scratch().find(dev);
    if (it == all_scratch().end()) return;
    ds = it->second.get();
  }
  drop_sets(*ds, reset, dev->reset_destroys.load());
}

device_scratch& scratch_of(const device_impl* dev) {
  // Devices and their scratch live until exit: the last lookup of a thread stays valid.
  thread_local std::pair<const device_impl*, device_scratch*> last{nullptr, nullptr};
  if (last.first == dev) return *last.second;
  static const bool hooked = [] {
    on_memory_pressure([](const device_impl* d) { drop_for(d, false); });
    on_device_reset([](const device_impl* d) { drop_for(d, true); });
    return true;
  }();
  (void)hooked;
  auto* all = &all_scratch();
  std::lock_guard lock(scratch_mu());
  auto& s = (*all)[dev];
  if (!s) s = std::make_unique<device_scratch>();
  last = {dev, s.get()};
  return *s;
}

bool done_or_failed(const event& e) noexcept {
  try {
    return e.done();
  } catch (...) {
    return true;  // the query failed; nothing writes the slot any more
  }
}

}  // namespace

std::uint32_t scratch::prepare_lookback(queue& q, std::uint64_t n) {
  if (n > tiles) {
    const std::uint64_t cap = std::max<std::uint64_t>(n, tiles * 2);
    reallocate(status, q, cap * 4);
    reallocate(agg, q, cap * lb_value_bytes);
    reallocate(incl, q, cap * lb_value_bytes);
    zero(q, *status, cap * 4);
    zero(q, *incl, cap * lb_value_bytes);  // packed status words live here
    tiles = cap;
    epoch = 0;
  }
  if (epoch >= max_epoch) {  // epochs wrapped: clear, so no stale word matches a new epoch
    zero(q, *status, tiles * 4);
    zero(q, *incl, tiles * lb_value_bytes);
    epoch = 0;
  }
  return ++epoch;
}

void scratch::prepare_parts(queue& q, std::uint64_t n) {
  if (n <= parts) return;
  parts = std::max<std::uint64_t>(n, 1024);
  reallocate(part, q, parts * 24);
}

void scratch::prepare_small(queue& q) {
  if (small) return;
  reallocate(small, q, 256);
  zero(q, *small, 256);  // the reduce ticket starts at 0; the last block resets it
}

scratch_lease::scratch_lease(queue& q) : q_(q), s_(nullptr) {
  queue_impl* const qi = q.impl().get();
  device_scratch& ds = scratch_of(qi->dev.get());
  ds_ = &ds;
  std::shared_ptr<queue_impl> wait_for;  // released after the lock: it may be the last owner
  bool waits = false;
  {
    std::lock_guard lock(ds.mu);
    scratch* spare = nullptr;  // a free set last used by another queue
    scratch* idle = nullptr;   // a free set whose last queue is gone (its work is done)
    for (auto& s : ds.sets) {
      if (s->leased) continue;
      const std::shared_ptr<queue_impl> last = s->last.lock();
      if (last.get() == qi) {
        s_ = s.get();
        break;
      }
      if (!last && !s->last_drained.expired()) continue;  // its queue is still draining
      if (!last && !idle) idle = s.get();
      if (last && !spare) {
        spare = s.get();
        wait_for = last;  // held: it cannot expire before q waits for it
      }
    }
    if (!s_) s_ = idle;
    if (!s_ && (ds.sets.size() < preferred_sets || !spare)) {
      ds.sets.push_back(std::make_unique<scratch>());
      s_ = ds.sets.back().get();
    }
    if (!s_) {
      s_ = spare;
      waits = true;
    }
    s_->leased = true;
  }
  // The set's last queue may still be using it: q waits for that work on the device.
  if (waits && wait_for.get() != qi) {
    try {
      q.wait(queue(wait_for).record());
    } catch (...) {
      std::lock_guard lock(ds.mu);
      s_->leased = false;
      throw;
    }
  }
}

scratch_lease::~scratch_lease() {
  // The set no longer names q as a user of its memory: a set must not keep user queues (CPU
  // threads) alive. `last` orders the next lease on another queue after this one instead.
  for (memory_impl* m :
       {s_->status.get(), s_->agg.get(), s_->incl.get(), s_->part.get(), s_->small.get()}) {
    if (!m) continue;
    std::lock_guard lock(m->mu);
    m->users.clear();
  }
  std::lock_guard lock(ds_->mu);
  s_->last = q_.impl();
  s_->last_drained = q_.impl()->drained;
  s_->leased = false;
}

result_slot acquire_slot(const device& dev) {
  device_scratch& ds = scratch_of(dev.impl().get());
  {
    std::lock_guard lock(ds.mu);
    if (ds.free_slots.empty()) {
      // Slots given back in flight return once their query is done.
      auto done = std::partition(ds.retired.begin(), ds.retired.end(),
                                 [](const auto& r) { return !done_or_failed(r.second); });
      for (auto it = done; it != ds.retired.end(); ++it) ds.free_slots.push_back(it->first);
      ds.retired.erase(done, ds.retired.end());
    }
    if (!ds.free_slots.empty()) {
      result_slot s{ds.free_slots.back()};
      ds.free_slots.pop_back();
      return s;
    }
  }
  // A new chunk, never freed (kept with the device, like the scratch sets).
  auto* chunk = static_cast<unsigned char*>(host_alloc(dev, slots_per_chunk * result_slot::bytes));
  std::lock_guard lock(ds.mu);
  for (std::uint64_t i = 1; i < slots_per_chunk; ++i)
    ds.free_slots.push_back(chunk + i * result_slot::bytes);
  return result_slot{chunk};
}

void release_slot(const device& dev, result_slot s, std::optional<event> pending) noexcept {
  if (!s.host) return;
  try {
    device_scratch& ds = scratch_of(dev.impl().get());
    std::lock_guard lock(ds.mu);
    if (pending)
      ds.retired.emplace_back(s.host, std::move(*pending));
    else
      ds.free_slots.push_back(s.host);
  } catch (...) {  // out of memory for the lists: the slot is lost, nothing worse
  }
}

}  // namespace kiln::detail::q
