#include <algorithm>
#include <cstdio>

#include "kiln/buffer.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/log.hpp"
#include "runtime/pinned.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {

namespace {
device_hooks& pressure_hooks() {
  static auto* hooks = new device_hooks;
  return *hooks;
}
}  // namespace

namespace {

// Frees `handle` on the last queue that used it, after every other user's work too.
void release_device_memory(device_impl& dev, void* handle,
                           const std::vector<std::shared_ptr<queue_impl>>& users) {
  const kiln_backend& api = *dev.api;
  if (users.empty()) {
    api.mem_free(dev.handle(), handle, nullptr);
    return;
  }
  queue_impl& last = *users.back();
  for (std::size_t i = 0; i + 1 < users.size(); ++i) {
    kiln_event_h e = nullptr;
    if (api.event_create(dev.handle(), &e) == KILN_OK) {
      if (api.event_record(e, users[i]->handle) == KILN_OK)
        api.queue_wait_event(last.handle, e);
      else
        api.queue_finish(users[i]->handle);
      api.event_destroy(e);
    } else {
      api.queue_finish(users[i]->handle);
    }
  }
  api.mem_free(dev.handle(), handle, last.handle);
}

// Parks `release` in the first live hold; when that hold goes, it parks itself in the next live
// one, so memory shared by several captured graphs outlives all of them.
void park(std::vector<std::weak_ptr<capture_hold>> holds, std::function<void()> release) {
  while (!holds.empty()) {
    std::shared_ptr<capture_hold> h = holds.back().lock();
    holds.pop_back();
    if (!h) continue;
    std::lock_guard lock(h->mu);
    h->parked.push_back([rest = std::move(holds), r = std::move(release)]() mutable {
      park(std::move(rest), std::move(r));
    });
    return;
  }
  release();
}

void join_capture(memory_impl& m, const std::shared_ptr<capture_hold>& h) {
  for (const auto& w : m.holds)
    if (w.lock() == h) return;
  m.holds.push_back(h);
}

}  // namespace

capture_hold::~capture_hold() {
  for (auto& release : parked) {
    try {
      release();
    } catch (...) {  // a destructor never throws (DESIGN 8)
    }
  }
}

memory_impl::~memory_impl() {
  if (std::shared_ptr<capture_hold> h = dev->active_capture()) join_capture(*this, h);
  if (external_release) {  // not Kiln's: its owner frees it once Kiln's work on it is done
    auto release = [dev = dev, gen = gen, users = std::move(users),
                    ext = std::move(external_release)] {
      if (!dev->stale(gen))
        for (const auto& q : users) dev->api->queue_finish(q->handle);
      try {
        ext();
      } catch (...) {  // a destructor never throws (DESIGN 8)
      }
    };
    park(std::move(holds), std::move(release));
    return;
  }
  if (!handle || dev->stale(gen)) return;  // a reset freed it with the old generation
  park(std::move(holds),
       [dev = dev, handle = handle, bytes = bytes, gen = gen, users = std::move(users)] {
         if (dev->stale(gen)) return;
         dev->bytes_in_use -= bytes;
         release_device_memory(*dev, handle, users);
       });
}

namespace {

std::string mib(std::uint64_t b) {
  char s[48];
  std::snprintf(s, sizeof s, "%.1f MiB", double(b) / (1 << 20));
  return s;
}

// The out-of-memory message: what was asked, what the device has, what Kiln holds.
[[noreturn]] void throw_oom(const device_impl& d, std::uint64_t bytes, const std::string& why) {
  std::string msg = "out of memory on " + d.id + ": asked for " + std::to_string(bytes) +
                    " bytes (" + mib(bytes) + ")";
  const memory_statistics st = query_memory_stats(const_cast<device_impl&>(d));
  if (st.total)
    msg += "; device free " + (st.free == UINT64_MAX ? std::string("unknown") : mib(st.free)) +
           " of " + mib(st.total);
  msg += "; Kiln holds " + mib(st.in_use) + " in use (peak " + mib(st.peak) + ") and " +
         mib(st.cached) + " cached in the pool, released and retried once before failing (" + why +
         ")";
  throw out_of_memory(msg);
}

// `q` null: usable by every queue when this returns; else ordered on q (no host wait).
std::shared_ptr<memory_impl> allocate_impl(const device& dev, std::uint64_t bytes, queue_impl* q) {
  auto m = std::make_shared<memory_impl>();
  m->dev = dev.impl();
  m->public_device = dev;
  m->bytes = bytes;
  m->gen = m->dev->generation.load(std::memory_order_acquire);
  if (bytes == 0) return m;
  m->dev->check_alive(q ? q->gen : m->gen, "allocating device memory");
  const device_info& info = dev.info();
  if (info.max_alloc_bytes && bytes > info.max_alloc_bytes)
    throw out_of_memory("cannot allocate " + std::to_string(bytes) + " bytes on " + dev.id() +
                        ": the device's largest allocation is " +
                        std::to_string(info.max_alloc_bytes) + " bytes");
  const kiln_backend& api = *m->dev->api;
  bool injected = false;
  auto try_alloc = [&] {
    if (kiln_status f = maybe_fault(*m->dev, testing::fault::allocate); f != KILN_OK) {
      injected = true;
      return f;
    }
    injected = false;
    return api.mem_alloc(m->dev->handle(), bytes, q ? q->handle : nullptr, &m->handle);
  };
  kiln_status s = try_alloc();
  if (s == KILN_ERR_OUT_OF_MEMORY) {
    // Give back what is cached (the driver's pool, Kiln's idle scratch) and try once more.
    // Every device's: another backend's device on the same card (CUDA and OpenCL on one GPU)
    // holds that card's memory in its own pool.
    m->handle = nullptr;
    release_cached_memory(*m->dev);
    for (const device& other : device::all())
      if (other.impl() && other.impl() != m->dev) release_cached_memory(*other.impl());
    s = try_alloc();
    if (s == KILN_ERR_OUT_OF_MEMORY) {
      m->handle = nullptr;
      const std::string why =
          injected ? "injected by kiln::testing::inject_fault" : std::string(api.last_error());
      throw_oom(*m->dev, bytes, why);
    }
  }
  if (s != KILN_OK) {
    m->handle = nullptr;
    throw_status(api, s, "allocating " + std::to_string(bytes) + " bytes on " + dev.id());
  }
  if (std::shared_ptr<capture_hold> h = m->dev->active_capture()) join_capture(*m, h);
  if (q) note_queue_use(*m, *q);  // freed on q, after its work
  const std::uint64_t now = m->dev->bytes_in_use += bytes;
  if (log_enabled(log_level::debug) && bytes >= log_alloc_bytes())
    logf(log_level::debug, "allocated {} bytes ({:.1f} MiB) on {}; {:.1f} MiB in use", bytes,
         bytes / 1048576.0, dev.id(), now / 1048576.0);
  std::uint64_t peak = m->dev->peak_bytes.load();
  while (now > peak && !m->dev->peak_bytes.compare_exchange_weak(peak, now)) {
  }
  return m;
}
}  // namespace

std::shared_ptr<memory_impl> allocate(const device& dev, std::uint64_t bytes) {
  if (!dev.impl()) throw_empty_handle("allocating device memory", "device");
  return allocate_impl(dev, bytes, nullptr);
}

std::shared_ptr<memory_impl> allocate_on(queue_impl& q, std::uint64_t bytes) {
  return allocate_impl(q.public_device, bytes, &q);
}

const device& memory_device(const memory_impl& m) { return m.public_device; }

void release_cached_memory(device_impl& d) {
  pressure_hooks().run(&d);
  if (KILN_BACKEND_HAS(d.api, mem_trim)) d.api->mem_trim(d.handle());  // best effort
}

void on_memory_pressure(void (*hook)(const device_impl*)) { pressure_hooks().add(hook); }

memory_statistics query_memory_stats(device_impl& d) {
  memory_statistics st;
  st.in_use = d.bytes_in_use.load();
  st.peak = d.peak_bytes.load();
  if (KILN_BACKEND_HAS(d.api, mem_info) && !d.lost.load()) {
    std::uint64_t f = 0, t = 0, c = 0;
    if (d.api->mem_info(d.handle(), &f, &t, &c) == KILN_OK) {
      st.free = f;
      st.total = t;
      st.cached = c;
    }
  }
  if (!st.total) st.total = d.info.global_mem_bytes;
  return st;
}

void finish_users(memory_impl& m) {
  std::vector<std::shared_ptr<queue_impl>> users;
  {
    std::lock_guard lock(m.mu);
    users = m.users;
  }
  for (auto& q : users) {
    q->dev->check_alive(q->gen, "finishing a queue");
    check(*q->dev->api, q->dev->api->queue_finish(q->handle), "finishing a queue");
  }
}

namespace {
void same_device(const queue_impl& q, const memory_impl& m, const char* what) {
  if (q.dev != m.dev)
    throw invalid_argument(std::string(what) + ": the buffer lives on " + m.dev->id +
                           " but the queue belongs to " + q.dev->id);
}
void alive(const queue_impl& q, const memory_impl& m, const char* what) {
  q.dev->check_alive(q.gen, what);
  if (m.handle) q.dev->check_alive(m.gen, what);
}
}  // namespace

void note_queue_use(memory_impl& m, queue_impl& q) {
  std::shared_ptr<capture_hold> h = q.dev->active_capture();
  std::lock_guard lock(m.mu);
  if (h) join_capture(m, h);
  if (!m.users.empty() && m.users.back().get() == &q) return;  // the common case: one queue
  for (const auto& u : m.users)
    if (u.get() == &q) return;
  m.users.push_back(q.shared_from_this());
}

void copy_h2d(queue_impl& q, memory_impl& dst, std::uint64_t off, const void* src,
              std::uint64_t bytes) {
  same_device(q, dst, "copy to device");
  alive(q, dst, "copy to device");
  note_queue_use(dst, q);
  check(*q.dev->api, q.dev->api->copy_h2d(q.handle, {dst.handle, off}, src, bytes),
        "copying host to device");
}

void copy_d2h(queue_impl& q, void* dst, memory_impl& src, std::uint64_t off, std::uint64_t bytes) {
  same_device(q, src, "copy to host");
  alive(q, src, "copy to host");
  note_queue_use(src, q);
  check(*q.dev->api, q.dev->api->copy_d2h(q.handle, dst, {src.handle, off}, bytes),
        "copying device to host");
}

void copy_d2d(queue_impl& q, memory_impl& dst, std::uint64_t dst_off, memory_impl& src,
              std::uint64_t src_off, std::uint64_t bytes) {
  if (dst.dev != src.dev) return copy_between_devices(q, dst, dst_off, src, src_off, bytes);
  same_device(q, dst, "device copy (destination)");
  same_device(q, src, "device copy (source)");
  alive(q, dst, "device copy");
  alive(q, src, "device copy");
  note_queue_use(dst, q);
  note_queue_use(src, q);
  check(*q.dev->api,
        q.dev->api->copy_d2d(q.handle, {dst.handle, dst_off}, {src.handle, src_off}, bytes),
        "copying device to device");
}

void fill(queue_impl& q, memory_impl& dst, std::uint64_t off, const void* pattern,
          std::uint32_t pattern_size, std::uint64_t count) {
  same_device(q, dst, "fill");
  alive(q, dst, "fill");
  note_queue_use(dst, q);
  check(*q.dev->api, q.dev->api->fill(q.handle, {dst.handle, off}, pattern, pattern_size, count),
        "filling device memory");
}

namespace {
// Pinned frees that would wait for a running ring kernel: done later, when none runs.
std::mutex deferred_mu;
std::vector<std::pair<device, void*>> deferred_frees;

void free_deferred(const device& dev) noexcept {
  std::vector<void*> now;
  {
    std::lock_guard lock(deferred_mu);
    std::erase_if(deferred_frees, [&](auto& e) {
      if (!(e.first == dev)) return false;
      now.push_back(e.second);
      return true;
    });
  }
  for (void* p : now) dev.impl()->api->host_free(dev.impl()->handle(), p);
}
}  // namespace

void* host_alloc(const device& dev, std::uint64_t bytes) {
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const kiln_backend& api = *dev.impl()->api;
  dev.impl()->refuse_if_ring_running(KILN_OP_PIN_WHILE_RESIDENT, "allocating pinned host memory");
  free_deferred(dev);
  check(api, api.host_alloc(dev.impl()->handle(), bytes, &p),
        ("allocating " + std::to_string(bytes) + " bytes of pinned host memory").c_str());
  try {
    note_pinned(dev.impl().get(), p, bytes);
  } catch (...) {
    api.host_free(dev.impl()->handle(), p);
    throw;
  }
  return p;
}

void host_free(const device& dev, void* p) noexcept {
  if (!p) return;
  forget_pinned(p);  // before the free: after it, host_alloc may hand out this address again
  try {
    if (dev.impl()->ring_blocks(KILN_OP_PIN_WHILE_RESIDENT)) {
      std::lock_guard lock(deferred_mu);
      deferred_frees.emplace_back(dev, p);
      return;
    }
    free_deferred(dev);
  } catch (...) {  // no memory to defer: free now, even if that waits
  }
  dev.impl()->api->host_free(dev.impl()->handle(), p);
}

void throw_size_mismatch(const char* what, std::uint64_t a, std::uint64_t b) {
  throw invalid_argument(std::string(what) + ": sizes differ (" + std::to_string(a) + " vs " +
                         std::to_string(b) + " elements)");
}

void throw_out_of_range(std::uint64_t off, std::uint64_t count, std::uint64_t size) {
  throw invalid_argument("subview [" + std::to_string(off) + ", +" + std::to_string(count) +
                         ") is outside a view of " + std::to_string(size) + " elements");
}

}  // namespace kiln::detail
