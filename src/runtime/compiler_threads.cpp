// The compiler threads (compiler_threads.hpp): a queue of jobs served by threads started on
// demand, up to the limit. The pool is never destroyed: idle threads wait on it until the process
// ends, so nothing is torn down under a compile at exit. After fork() the child starts a new one
// (the parent's threads do not exist there).
#include "runtime/compiler_threads.hpp"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

namespace kiln::detail {
namespace {

struct job {
  const std::function<void()>* fn;
  std::exception_ptr error;
  bool done = false;
};

thread_local bool t_compiler_thread = false;

class compiler_pool {
 public:
  explicit compiler_pool(unsigned limit) : limit_(limit) {}

  void run(const std::function<void()>& fn) {
    job j{&fn, nullptr, false};
    {
      std::unique_lock<std::mutex> lock(mu_);
      queue_.push_back(&j);
      // A thread more while every started one is busy (idle_ counts those waiting for work).
      if (idle_ < queue_.size() && started_ < limit_) {
        try {
          std::thread([this] { serve(); }).detach();
          ++started_;
        } catch (const std::system_error&) {
          // No thread to be had (a process at its thread limit). With one running the job
          // waits for it; with none, the caller compiles it itself rather than wait forever.
          if (started_ == 0) {
            std::erase(queue_, &j);
            lock.unlock();
            fn();
            return;
          }
        }
      }
      work_.notify_one();
      done_.wait(lock, [&] { return j.done; });
    }
    if (j.error) std::rethrow_exception(j.error);
  }

  unsigned started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  void serve() {
    t_compiler_thread = true;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      ++idle_;
      work_.wait(lock, [&] { return !queue_.empty(); });
      --idle_;
      job* j = queue_.front();
      queue_.pop_front();
      lock.unlock();
      try {
        (*j->fn)();
      } catch (...) {
        j->error = std::current_exception();
      }
      lock.lock();
      j->done = true;
      done_.notify_all();
    }
  }

  const unsigned limit_;
  std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<job*> queue_;
  unsigned started_ = 0;
  std::size_t idle_ = 0;
};

unsigned limit() { return std::clamp(std::thread::hardware_concurrency(), 1u, 8u); }

// Leaked on purpose (see the top of the file); replaced, not destroyed, in a forked child.
compiler_pool* g_pool = nullptr;
std::once_flag g_once;

compiler_pool& pool() {
  std::call_once(g_once, [] {
    g_pool = new compiler_pool(limit());
    pthread_atfork(nullptr, nullptr, [] { g_pool = new compiler_pool(limit()); });
  });
  return *g_pool;
}

}  // namespace

void run_on_compiler_thread(const std::function<void()>& job) {
  if (t_compiler_thread) return job();
  pool().run(job);
}

unsigned compiler_threads_started() { return pool().started(); }
unsigned compiler_thread_limit() { return limit(); }

}  // namespace kiln::detail
