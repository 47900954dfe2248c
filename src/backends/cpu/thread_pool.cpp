// The CPU backend's thread pool. Workers poll for a new job for a while after each one (the
// next launch of a query is microseconds away) and then sleep on a futex (std::atomic wait).
// A job is done once every task has run: run() does not wait for workers still asleep.
#include <cstdlib>

#include "backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {
namespace {
// How long a worker polls for the next job before it sleeps.
constexpr std::chrono::microseconds worker_spin{50};
// How long run() polls for the workers still inside the job before it sleeps.
constexpr std::chrono::microseconds caller_spin{50};
}  // namespace

thread_pool::thread_pool(unsigned threads) : shares_(new share[threads ? threads : 1]) {
  for (unsigned i = 1; i < threads; ++i) threads_.emplace_back([this, i] { work(i); });
}

thread_pool::~thread_pool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

// Runs tasks of the open job: this participant's share first, then the others'.
void thread_pool::take(unsigned self) {
  const unsigned parts = size();
  for (unsigned k = 0; k < parts; ++k) {
    share& s = shares_[(self + k) % parts];
    const std::uint64_t end = s.end.load(std::memory_order_relaxed);
    if (s.next.load(std::memory_order_relaxed) >= end) continue;
    for (std::uint64_t i; (i = s.next.fetch_add(1, std::memory_order_relaxed)) < end;) (*fn_)(i);
  }
}

void thread_pool::run(std::uint64_t n, const std::function<void(std::uint64_t)>& fn) {
  if (n == 0) return;
  if (n == 1 || threads_.empty()) {
    for (std::uint64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::lock_guard turn(run_mu_);
  const unsigned parts = size();
  for (unsigned p = 0; p < parts; ++p) {
    shares_[p].next.store(n * p / parts, std::memory_order_relaxed);
    shares_[p].end.store(n * (p + 1) / parts, std::memory_order_relaxed);
  }
  fn_ = &fn;
  // seq_cst pairs with the workers' inside_ increment and open_ load (see work()).
  open_.store(true);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  take(0);
  // Every task has been taken; those taken by workers are done once inside_ drops to 0.
  open_.store(false);
  if (!spin_until([&] { return inside_.load() == 0; }, caller_spin))
    for (std::uint32_t v; (v = inside_.load()) != 0;) inside_.wait(v);
  fn_ = nullptr;
}

void thread_pool::work(unsigned self) {
  std::uint32_t seen = 0;
  for (;;) {
    const auto fresh = [&] { return generation_.load(std::memory_order_relaxed) != seen; };
    if (!spin_until(fresh, worker_spin)) {
      sleepers_.fetch_add(1);
      generation_.wait(seen);  // returns at once if the generation moved on meanwhile
      sleepers_.fetch_sub(1);
    }
    seen = generation_.load();
    if (stop_.load()) return;
    // Enter, then look: a job closed before the increment is seen as closed, and its caller
    // waits for inside_ to drop to 0 before it frees the job, so fn_ stays valid while inside.
    inside_.fetch_add(1);
    if (open_.load()) take(self);
    if (inside_.fetch_sub(1) == 1) inside_.notify_all();
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
