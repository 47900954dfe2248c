#include <cstdlib>

#include "backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {

thread_pool::thread_pool(unsigned threads) {
  for (unsigned i = 1; i < threads; ++i) threads_.emplace_back([this] { work(); });
}

thread_pool::~thread_pool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void thread_pool::run(std::uint64_t n, const std::function<void(std::uint64_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || threads_.empty()) {
    for (std::uint64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard turn(run_mu_);
  {
    std::lock_guard lock(mu_);
    fn_ = &fn;
    total_ = n;
    next_.store(0, std::memory_order_relaxed);
    active_ = static_cast<unsigned>(threads_.size());
    ++generation_;
  }
  cv_.notify_all();
  for (std::uint64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n;) fn(i);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [&] { return active_ == 0; });
  fn_ = nullptr;
}

void thread_pool::work() {
  std::uint64_t seen = 0;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const auto* fn = fn_;
    const std::uint64_t n = total_;
    lock.unlock();
    for (std::uint64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n;) (*fn)(i);
    lock.lock();
    if (--active_ == 0) done_cv_.notify_all();
  }
}

thread_pool& pool() {
  static thread_pool* p = [] {
    unsigned n = std::thread::hardware_concurrency();
    if (const char* env = std::getenv("KILN_CPU_THREADS"); env && std::atoi(env) > 0)
      n = static_cast<unsigned>(std::atoi(env));
    return new thread_pool(n ? n : 1);  // never destroyed: queues may run at exit
  }();
  return *p;
}

}  // namespace kiln::cpu
