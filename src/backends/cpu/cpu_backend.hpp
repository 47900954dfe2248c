// Internal declarations of the built-in CPU backend. It implements the same plugin ABI as the
// GPU backends: queues are worker threads executing in order, kernels are shared objects
// built by the host C++ compiler and run over a thread pool, one work-group range per task.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend_abi.h"

namespace kiln::cpu {

kiln_status fail(kiln_status s, std::string message);
const char* last_error() noexcept;
// printf-style fail(), for plugin_guard.
kiln_status set_error(kiln_status s, const char* fmt, ...) noexcept;

// Waits for ready() by polling until budget has passed; true once ready. OpenMP runtimes do the
// same before they sleep: a futex wake costs more than a short poll when the next piece of
// work is microseconds away, as it is between the launches of a query. Measured on a loaded
// 2-core VM: a pause instruction in the loop made a small query 6 us slower (pause-loop
// exiting deschedules the vCPU), and sched_yield gave the core to other processes for whole
// time slices (pool workers then missed most jobs); a plain poll did neither.
template <class Ready>
bool spin_until(Ready&& ready, std::chrono::microseconds budget) {
  const auto until = std::chrono::steady_clock::now() + budget;
  do {
    for (int i = 0; i < 1024; ++i)
      if (ready()) return true;
  } while (std::chrono::steady_clock::now() < until);
  return ready();
}

// Runs tasks in submission order, one at a time, on its thread or on a thread blocked in
// finish().
class work_queue {
 public:
  work_queue();
  ~work_queue();
  void push(std::function<void()> task);
  void finish();      // blocks until every task pushed so far has run
  bool idle() const;  // every task pushed so far has run (no wait)
  // Runs task now when nothing is queued or running, else queues it.
  void run_or_push(std::function<void()> task);

 private:
  void loop();
  void run_front(std::unique_lock<std::mutex>& lock);
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  // Tasks pushed and tasks run so far (changed under mu_, read without it by finish()).
  std::atomic<std::uint64_t> pushed_{0}, done_{0};
  unsigned finishers_ = 0;  // finish() calls blocked on idle_cv_
  bool busy_ = false, stop_ = false;
  std::thread thread_;
};

// Fixed pool of threads; run() spreads tasks [0, n) over them and the caller, and returns when
// all are done. One job at a time (concurrent callers take turns). Each participant starts
// with the same contiguous share of [0, n) on every run (its data stays in its caches, as
// with OpenMP's static schedule), then helps with the others' shares.
class thread_pool {
 public:
  explicit thread_pool(unsigned threads);
  ~thread_pool();
  void run(std::uint64_t n, const std::function<void(std::uint64_t)>& fn);
  unsigned size() const { return static_cast<unsigned>(threads_.size()) + 1; }

 private:
  struct alignas(64) share {
    std::atomic<std::uint64_t> next{0}, end{0};
  };
  void work(unsigned self);
  void take(unsigned self);
  std::mutex run_mu_;
  std::unique_ptr<share[]> shares_;
  const std::function<void(std::uint64_t)>* fn_ = nullptr;
  // generation_ announces a job; open_ says whether one is running; inside_ counts workers
  // that may be reading it (run() returns only once it is closed and inside_ is 0).
  std::atomic<std::uint32_t> generation_{0}, inside_{0}, sleepers_{0};
  std::atomic<bool> open_{false}, stop_{false};
  std::vector<std::thread> threads_;
};

thread_pool& pool();

// Host compiler: path (KILN_CXX, the compiler Kiln was built with, or c++/g++/clang++ on PATH);
// empty when none exists.
const std::string& compiler_path();
// Runs argv (no shell), stdout+stderr to log_path; returns the exit status or -1.
int run_process(const std::vector<std::string>& argv, const std::string& log_path);

// The "blas" extension (blas.cpp): OpenBLAS when found at configure time, else none.
const void* blas_extension(const char* name, uint32_t version) noexcept;
const char* blas_extension_list() noexcept;
bool blas_supports(kiln_dtype t) noexcept;  // GEMM on t through the extension

// The "dnn" extension (dnn.cpp): oneDNN when its headers were found at configure time and
// libdnnl loads at run time, else none.
const void* dnn_extension(const char* name, uint32_t version) noexcept;
bool dnn_loaded() noexcept;
bool dnn_supports(kiln_dtype t) noexcept;  // conv2d on t through the extension

}  // namespace kiln::cpu

struct kiln_device_s {
  int index = 0;
};
struct kiln_queue_s {
  kiln::cpu::work_queue q;
};
namespace kiln::cpu {
struct event_state {
  std::mutex mu;
  std::condition_variable cv;
  std::uint64_t recorded = 0, completed = 0;  // generations
  std::chrono::steady_clock::time_point when;
};
}  // namespace kiln::cpu
// Queued records and waits share the state, so destroying the handle never strands them.
struct kiln_event_s {
  std::shared_ptr<kiln::cpu::event_state> s = std::make_shared<kiln::cpu::event_state>();
};
namespace kiln::cpu {
// A loaded kernel library. Shared by its program and by every launch still queued or running,
// so unloading a program (the core's kernel cache evicting it, say) while its launches wait
// closes the library only after the last one has run.
struct loaded_library {
  void* handle = nullptr;
  // The memfd the library was loaded from stays open while it is loaded: glibc recognises
  // loaded objects by path, and a reused "/proc/self/fd/N" would return the old library.
  int fd = -1;
  loaded_library(void* h, int f) : handle(h), fd(f) {}
  loaded_library(const loaded_library&) = delete;
  loaded_library& operator=(const loaded_library&) = delete;
  ~loaded_library();
};
}  // namespace kiln::cpu
struct kiln_kernel_s {
  using entry_fn = void (*)(void* const*, const void*, std::uint64_t, std::uint64_t);
  entry_fn entry = nullptr;
  std::shared_ptr<kiln::cpu::loaded_library> library;  // what entry lives in
};
struct kiln_program_s {
  std::shared_ptr<kiln::cpu::loaded_library> library;
  std::mutex mu;
  std::vector<std::unique_ptr<kiln_kernel_s>> kernels;  // released with the program
};

// The ABI functions, one group per file.
namespace kiln::cpu::abi {
kiln_status device_info(int index, kiln_device_info* out);
kiln_status device_open(int index, kiln_device_h* out);
void device_close(kiln_device_h dev);
kiln_status mem_alloc(kiln_device_h, uint64_t bytes, kiln_queue_h, void** out);
// Idle large blocks the allocator keeps for reuse (memory.cpp), and their release.
uint64_t pooled_bytes();
void trim_pool();
void mem_free(kiln_device_h, void* mem, kiln_queue_h queue);
kiln_status host_alloc(kiln_device_h, uint64_t bytes, void** out);
void host_free(kiln_device_h, void* p);
kiln_status mem_address(kiln_device_h, kiln_mem_ref mem, void** out);
kiln_status copy_h2d(kiln_queue_h q, kiln_mem_ref dst, const void* src, uint64_t bytes);
kiln_status copy_d2h(kiln_queue_h q, void* dst, kiln_mem_ref src, uint64_t bytes);
kiln_status copy_d2d(kiln_queue_h q, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes);
kiln_status fill(kiln_queue_h q, kiln_mem_ref dst, const void* pattern, uint32_t size,
                 uint64_t count);
kiln_status queue_create(kiln_device_h, kiln_queue_h* out);
void queue_destroy(kiln_queue_h q);
kiln_status queue_finish(kiln_queue_h q);
kiln_status queue_native(kiln_queue_h q, void** out);
kiln_status queue_idle(kiln_queue_h q);
kiln_status queue_wait_event(kiln_queue_h q, kiln_event_h e);
kiln_status event_create(kiln_device_h, kiln_event_h* out);
void event_destroy(kiln_event_h e);
kiln_status event_record(kiln_event_h e, kiln_queue_h q);
kiln_status event_wait(kiln_event_h e);
kiln_status event_query(kiln_event_h e);
kiln_status event_elapsed_ms(kiln_event_h a, kiln_event_h b, float* out);
kiln_status compiler_id(char* out, size_t size);
kiln_status compile(kiln_device_h, const char* arch, const char* source, const char* options,
                    kiln_blob* out, const char** log);
void free_blob(kiln_blob blob);
kiln_status program_load(kiln_device_h, const void* data, uint64_t size, kiln_program_h* out);
void program_unload(kiln_program_h p);
kiln_status kernel_get(kiln_program_h p, const char* name, kiln_kernel_h* out);
kiln_status kernel_limits(kiln_kernel_h k, uint32_t* max_size, uint32_t* preferred);
kiln_status launch(kiln_kernel_h k, kiln_queue_h q, const kiln_launch_dims* dims,
                   const kiln_kernel_arg* args, uint32_t num_args);
}  // namespace kiln::cpu::abi
