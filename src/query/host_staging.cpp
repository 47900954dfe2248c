#include "query/host_staging.hpp"

#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/pinned.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {
namespace {

std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  return (end && *end == '\0' && x > 0) ? x : fallback;
}

struct config_store {
  std::mutex mu;
  host_transfer_config c;
  config_store() {
    c.chunk_bytes = env_u64("KILN_HOST_CHUNK_BYTES", c.chunk_bytes);
    c.copy_threads = static_cast<unsigned>(env_u64("KILN_HOST_COPY_THREADS", 0));
  }
};
config_store& config() {
  static config_store s;
  return s;
}

constexpr unsigned max_copy_threads = 8;

unsigned threads_of(const host_transfer_config& c) {
  if (c.copy_threads) return c.copy_threads;
  return std::clamp(std::thread::hardware_concurrency(), 1u, max_copy_threads);
}

// Workers for split memcpys, shared by all queries; never destroyed (copies may run at exit).
class copy_workers {
 public:
  explicit copy_workers(unsigned n) {
    for (unsigned i = 0; i < n; ++i) std::thread([this] { loop(); }).detach();
  }
  // Runs fn(0) .. fn(n - 1): fn(0) on the caller, the rest on workers; returns when all ran.
  void run(unsigned n, const std::function<void(unsigned)>& fn) {
    struct batch {
      std::mutex mu;
      std::condition_variable cv;
      unsigned left;
    } b{{}, {}, n - 1};
    {
      std::lock_guard lock(mu_);
      for (unsigned i = 1; i < n; ++i)
        tasks_.push_back([&fn, &b, i] {
          fn(i);
          std::lock_guard l(b.mu);
          if (--b.left == 0) b.cv.notify_all();
        });
    }
    cv_.notify_all();
    fn(0);
    std::unique_lock l(b.mu);
    b.cv.wait(l, [&] { return b.left == 0; });
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> t;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !tasks_.empty(); });
        t = std::move(tasks_.front());
        tasks_.pop_front();
      }
      t();  // a memcpy: cannot throw
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
};

copy_workers& workers() {
  static copy_workers* w = new copy_workers(max_copy_threads - 1);  // the caller is the 8th
  return *w;
}

}  // namespace

host_transfer_config host_transfer() {
  std::lock_guard lock(config().mu);
  return config().c;
}

void set_host_transfer(const host_transfer_config& c) {
  std::lock_guard lock(config().mu);
  config().c = c;
}

void parallel_copy(void* dst, const void* src, std::uint64_t bytes, const host_transfer_config& c) {
  const unsigned t = std::min(threads_of(c), max_copy_threads);
  if (t <= 1 || bytes < std::max<std::uint64_t>(c.parallel_min_bytes, 2 * 4096)) {
    std::memcpy(dst, src, bytes);
    return;
  }
  // Parts of whole pages but the last.
  const std::uint64_t part = (bytes / t + 4095) & ~std::uint64_t(4095);
  const unsigned n = static_cast<unsigned>((bytes + part - 1) / part);
  workers().run(n, [&](unsigned i) {
    const std::uint64_t off = std::uint64_t(i) * part;
    std::memcpy(static_cast<char*>(dst) + off, static_cast<const char*>(src) + off,
                std::min(part, bytes - off));
  });
}

void* host_address(memory_impl& m, const host_transfer_config& c) {
  device_impl& d = *m.dev;
  if (c.stage_cpu_devices || d.info.type != device_type::cpu || d.portable() || !m.handle)
    return nullptr;
  void* p = nullptr;
  if (d.api->mem_address(d.handle(), {m.handle, 0}, &p) != KILN_OK) return nullptr;
  return p;
}

bool direct_device(const device& dev, const host_transfer_config& c) {
  return dev.info().type == device_type::cpu && !c.stage_cpu_devices;
}

bool pinned_for(const device& dev, const void* p, std::uint64_t bytes) {
  // Pinned by any device of the same backend: the CUDA plugin pins portably.
  const device_impl* owner = pinned_owner(p, bytes);
  return owner && owner->api == dev.impl()->api;
}

// ---- staging_pool ----

struct staging_pool::state {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<staging_slot*> idle;  // oldest release first: its DMA most likely done
  int made = 0;
};

staging_pool& staging_pool::of(const device& dev) {
  static std::mutex mu;
  static auto* all = new std::map<const device_impl*, staging_pool*>;  // never destroyed
  // A reset device's pool holds queues of the old generation, which throw device_lost: a new
  // pool serves it. The old one is kept, never freed (on CUDA its driver objects are gone).
  static const bool hooked = [] {
    detail::on_device_reset([](const device_impl* d) {
      static auto* retired = new std::vector<staging_pool*>;  // kept, never freed
      std::lock_guard lock(mu);
      if (auto it = all->find(d); it != all->end()) {
        retired->push_back(it->second);
        all->erase(it);
      }
    });
    return true;
  }();
  (void)hooked;
  std::lock_guard lock(mu);
  staging_pool*& p = (*all)[dev.impl().get()];
  if (!p) p = new staging_pool(dev);
  return *p;
}

staging_pool::staging_pool(const device& dev)
    : dev_(dev),
      h2d_(dev),
      d2h_(dev),
      slot_bytes_(std::max<std::uint64_t>(host_transfer().chunk_bytes, 8ull << 20)),
      st_(new state) {}

staging_slot* staging_pool::take(bool block) {
  staging_slot* s = nullptr;
  {
    std::unique_lock lock(st_->mu);
    if (block) st_->cv.wait(lock, [&] { return !st_->idle.empty() || st_->made < max_slots; });
    if (!st_->idle.empty()) {
      s = st_->idle.front();
      st_->idle.pop_front();
    } else if (st_->made < max_slots) {
      ++st_->made;
    } else {
      return nullptr;
    }
  }
  if (!s) {  // a new slot, allocated outside the lock
    try {
      auto fresh = std::make_unique<staging_slot>();
      fresh->p = host_alloc(dev_, slot_bytes_);
      fresh->bytes = slot_bytes_;
      return fresh.release();
    } catch (...) {
      std::lock_guard lock(st_->mu);
      --st_->made;
      st_->cv.notify_one();
      throw;
    }
  }
  try {
    if (s->busy) s->busy->wait();
  } catch (...) {
    release(s);
    throw;
  }
  s->busy.reset();
  return s;
}

staging_slot* staging_pool::acquire() { return take(true); }
staging_slot* staging_pool::try_acquire() { return take(false); }

void staging_pool::release(staging_slot* s) noexcept {
  {
    std::lock_guard lock(st_->mu);
    st_->idle.push_back(s);
  }
  st_->cv.notify_one();
}

// ---- slot_lease ----

void slot_lease::done(queue& q) {
  slot_->busy = q.record();
  pending_ = nullptr;
}

slot_lease::~slot_lease() {
  if (!slot_) return;
  if (pending_) {
    try {
      pending_->finish();
    } catch (...) {  // a failing device: nothing left to protect
    }
  }
  pool_->release(slot_);
}

}  // namespace kiln::detail::q
