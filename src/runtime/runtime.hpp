// Internal objects behind the public handles (OCCA style: a thin handle over an impl).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend_abi.h"
#include "kernel_lang/parser.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "kiln/queue.hpp"
#include "runtime/program_cache.hpp"

namespace kiln::detail {

// Converts a plugin status into the matching kiln exception (the one place this happens).
[[noreturn]] void throw_status(const kiln_backend& api, kiln_status s, const std::string& what);
inline void check(const kiln_backend& api, kiln_status s, const char* what) {
  if (s != KILN_OK) throw_status(api, s, what);
}

struct backend;

// A captured CUDA graph's hold on device memory (kiln::step_graph, src/graph/step_graph.cpp).
// Every replay uses the addresses the capture saw, so memory the capture allocated, used or
// freed is released only once every graph holding it is gone: its free is parked here.
struct capture_hold {
  std::mutex mu;
  std::vector<std::function<void()>> parked;  // releases, run by the destructor
  // Device-side checks queued while capturing (deferred_check.cpp): each reads its slot, which
  // every replay rewrites, and returns the error ("" when none). Guarded by mu.
  std::vector<std::function<std::string()>> checks;
  // Rendezvous of the in-process ranks whose collectives were captured (ccl_comm.cpp), keyed by
  // their gate: a replay meets them before and after its launch, as an eager collective does,
  // so no rank replays its collectives while another still runs code that may load kernels.
  // A barrier takes this rank's failure ("" for none) and returns the first rank's.
  std::vector<std::pair<const void*, std::function<std::string(const std::string&)>>> barriers;
  ~capture_hold();
};

struct device_impl : std::enable_shared_from_this<device_impl> {
  const backend* owner = nullptr;
  const kiln_backend* api = nullptr;
  int index = 0;
  device_info info;
  std::string id;  // "cuda:0"

  // Opened on first use: opening a GPU (creating its context) is costly.
  kiln_device_h handle();
  queue& default_queue();
  std::shared_ptr<queue_impl> make_queue();
  void synchronize();
  const std::string& compiler_id();
  program_cache& programs();
  // The backend's extension table `name` at `version` (it starts with a
  // kiln_extension_header), or null: absent, another version, or a plugin older than
  // extensions. Core code asks for features this way, never by backend name.
  const void* extension(const char* name, std::uint32_t version) const;
  // Whether this device runs `op` (KILN_OP_*) on `dtype`; false for older plugins.
  bool supports_op(const char* op, kiln_dtype dtype = KILN_DTYPE_NONE) const;
  // A portable layer (OpenCL) rather than the device's native backend.
  bool portable() const { return (api->flags & KILN_BACKEND_PORTABLE) != 0; }

  std::mutex mu;
  std::vector<std::weak_ptr<queue_impl>> queues;
  // The capture running on this device's default queue (kiln::step_graph), if any. While one
  // runs, allocations and uses join its hold and every free on the device is parked in it.
  std::atomic<bool> capture_active{false};
  std::shared_ptr<capture_hold> capturing;  // guarded by capture_mu
  std::mutex capture_mu;
  std::shared_ptr<capture_hold> active_capture() {
    if (!capture_active.load(std::memory_order_acquire)) return nullptr;
    std::lock_guard lock(capture_mu);
    return capturing;
  }

  // Bytes of device memory Kiln holds through detail::allocate now, and the most since the
  // last reset (device::memory_usage).
  std::atomic<std::uint64_t> bytes_in_use{0}, peak_bytes{0};

  // ---- Resilience (docs/resilience.md) ----
  // Set when the plugin reports the device lost (throw_status); cleared by reset().
  std::atomic<bool> lost{false};
  // Bumped by reset(): objects stamped with an older generation are never passed to the
  // plugin again (their driver objects died with the reset) and throw device_lost when used.
  std::atomic<std::uint32_t> generation{1};
  // Why the last reset could not bring the device back (empty when it did).
  std::string reset_failure;  // guarded by failure_mu
  mutable std::mutex failure_mu;
  // Asks the plugin whether the device failed; sets `lost`. Only for an opened device.
  void refresh_lost() noexcept;
  // Throws device_lost when the device is lost or `gen` predates a reset. One relaxed load
  // each on the hot path.
  void check_alive(std::uint32_t gen, const char* what) const {
    if (lost.load(std::memory_order_relaxed) || gen != generation.load(std::memory_order_relaxed))
        [[unlikely]]
      throw_lost(gen, what);
  }
  [[noreturn]] void throw_lost(std::uint32_t gen, const char* what) const;
  // True for an object of generation `gen` whose driver object died with a reset: its
  // destructor must not hand it to the plugin.
  bool stale(std::uint32_t gen) const noexcept {
    return gen != generation.load(std::memory_order_acquire) &&
           reset_destroys.load(std::memory_order_relaxed);
  }
  // Whether the last reset destroyed the device's objects (CUDA) or left them valid (CPU).
  std::atomic<bool> reset_destroys{true};
  // Refuses at once, with kiln::unsupported naming `what`, an operation that would wait for a
  // running ring kernel on this device (the plugin says which: KILN_OP_*_WHILE_RESIDENT).
  void refuse_if_ring_running(const char* op, const char* what);
  bool ring_blocks(const char* op);
  // device::reset(): the plugin's reset, a new generation, fresh caches.
  void reset();

 private:
  std::once_flag open_once_, compiler_once_, cache_once_;
  kiln_device_h handle_ = nullptr;
  std::atomic<bool> opened_{false};
  std::mutex queue_mu_;
  std::unique_ptr<queue> default_queue_;
  std::uint32_t default_queue_gen_ = 0;
  // Default queues of earlier generations: callers may still hold references to them.
  std::vector<std::unique_ptr<queue>> retired_queues_;
  std::string compiler_id_;
  std::unique_ptr<program_cache> programs_;
};

struct queue_impl : std::enable_shared_from_this<queue_impl> {
  std::shared_ptr<device_impl> dev;
  kiln_queue_h handle = nullptr;
  std::uint32_t gen = 0;  // device generation at creation
  kiln::device public_device{nullptr};
  bool resident = false;  // runs a ring kernel: device::synchronize() does not wait for it
  // Expires only after the destructor has waited for the queue's work, unlike a weak_ptr to
  // the queue, which expires before: a holder of a weak_ptr to `drained` knows when memory the
  // queue used is idle although the queue itself is gone (query scratch sets).
  std::shared_ptr<const void> drained = std::make_shared<char>();
  ~queue_impl();
};

struct event_impl {
  std::shared_ptr<device_impl> dev;
  kiln_event_h handle = nullptr;
  std::uint32_t gen = 0;
  ~event_impl();
};

// One device allocation. Remembers the queues that used it so that it is freed only after
// their work, and so that synchronous operations can wait for them.
struct memory_impl {
  std::shared_ptr<device_impl> dev;
  kiln::device public_device{nullptr};
  void* handle = nullptr;
  std::uint64_t bytes = 0;
  std::uint32_t gen = 0;
  std::mutex mu;
  std::vector<std::shared_ptr<queue_impl>> users;
  // The captured graphs that use it (allocated, used or freed during a capture): its release
  // waits for all of them. Guarded by mu.
  std::vector<std::weak_ptr<capture_hold>> holds;
  // Memory another library owns (tensor::from_external): called instead of mem_free, after the
  // users' queues have finished; not counted in the device's bytes in use.
  std::function<void()> external_release;
  ~memory_impl();
};

struct kernel_impl {
  std::shared_ptr<program_impl> program;
  const kiln_backend* api = nullptr;
  device_impl* dev = nullptr;
  kiln_kernel_h handle = nullptr;
  std::string name;
  std::vector<kernel_param> params;
  bool uses_barrier = false;
  bool checked = false;  // checked mode: the launch passes counts and an error buffer
  std::uint32_t max_size = 0, preferred_size = 0;
};

struct program_impl : std::enable_shared_from_this<program_impl> {
  std::shared_ptr<device_impl> dev;
  kiln::device public_device{nullptr};
  kiln_program_h handle = nullptr;
  std::uint32_t gen = 0;
  kernel_lang::parsed_source parsed;
  bool checked = false;
  std::mutex mu;
  std::unordered_map<std::string, std::weak_ptr<kernel_impl>>
      kernels;  // weak: kernels own the program
  ~program_impl();
};

// The backends found in this process; never destroyed (plugins stay loaded until exit, so
// handles held by static objects outlive nothing they need).
struct backend {
  std::string name;
  const kiln_backend* api = nullptr;
  void* library = nullptr;  // dlopen handle; null for built-in
  std::string path, detail;
  bool loaded = false;
  bool builtin = false;                 // linked into libkiln (registered itself)
  std::vector<std::string> extensions;  // "name/version", as the plugin lists them
  std::vector<std::shared_ptr<device_impl>> devices;
};

struct registry {
  static registry& get();
  std::vector<std::unique_ptr<backend>> backends;
  const backend* find(std::string_view name) const;
  // The built-in host backend's CPU device (the host side of transfers); null if none.
  std::shared_ptr<device_impl> host_device() const;

 private:
  registry();
};

// A process-wide list of callbacks on a device (reset and memory-pressure hooks). Never
// destroyed; add() and run() are thread-safe, and callbacks run outside the lock.
class device_hooks {
 public:
  using hook = void (*)(const device_impl*);
  void add(hook h) {
    std::lock_guard lock(mu_);
    hooks_.push_back(h);
  }
  void run(const device_impl* d) {
    std::vector<hook> now;
    {
      std::lock_guard lock(mu_);
      now = hooks_;
    }
    for (hook h : now) h(d);
  }

 private:
  std::mutex mu_;
  std::vector<hook> hooks_;
};

// Called by device::reset() for every device reset: caches keyed by device drop that
// device's entries (their kernels and buffers belong to the old generation). Register once,
// from a function-local static; hooks run under no lock of the runtime's.
void on_device_reset(void (*hook)(const device_impl*));

// Called before an allocation that ran out of memory is retried: caches of device memory
// (query scratch ...) release what is idle on that device. Register once, like reset hooks.
void on_memory_pressure(void (*hook)(const device_impl*));
// Runs the pressure hooks, then asks the plugin to trim its pool.
void release_cached_memory(device_impl& d);
memory_statistics query_memory_stats(device_impl& d);

// Records that queue q uses memory m (for ordered frees and synchronous waits).
void note_queue_use(memory_impl& m, queue_impl& q);

// A copy between buffers of two devices on q, a queue of either (peer_copy.cpp): peer to peer
// and asynchronous where the backend can, else staged through pinned host memory (complete
// on return).
void copy_between_devices(queue_impl& q, memory_impl& dst, std::uint64_t dst_off, memory_impl& src,
                          std::uint64_t src_off, std::uint64_t bytes);
bool peer_access(device_impl& a, device_impl& b);
// Memory ordered on q (stream-ordered on CUDA: no host wait): usable by q's later work at
// once, by other queues only after an event recorded on q after this call.
std::shared_ptr<memory_impl> allocate_on(queue_impl& q, std::uint64_t bytes);

// Refuses, with kiln::unsupported naming the line, a kernel that needs what the device lacks
// (barriers and local memory, double precision).
void check_features(const kernel_lang::parsed_source& p, const device_info& info,
                    const std::string& id);

// A program of native dialect source (the backend's own language: CUDA C++ through NVRTC on the
// CUDA backend), compiled and cached as program::compile's are but neither rendered nor
// checked. Its kernels are declared `KILN_KERNEL void name(KILN_GLOBAL T* a, ...)` so that
// launches know their parameters; the source defines KILN_KERNEL and KILN_GLOBAL itself (CUDA:
// extern "C" __global__). Launches pass the hidden range argument after the declared ones,
// which a native kernel does not declare (the driver reads only the declared parameters).
program compile_native(const device& dev, std::string_view source, std::string_view options);
// The same source compiled for `arch` of backend `backend` without a device (NVRTC without a
// GPU, as kiln::compile_only); throws kiln::compile_error or kiln::unsupported.
void compile_native_only(std::string_view backend, std::string_view arch, std::string_view source,
                         std::string_view options);

// Checked mode: KILN_CHECK's value ("bounds", "off"; null or empty: unset, which gives
// check_mode::automatic); kiln::invalid_argument naming the value otherwise.
check_mode parse_check_env(const char* value);
// Whether `m` means checked: automatic follows KILN_CHECK (read once per process), and
// without it, whether Kiln was built without NDEBUG (a Debug build).
bool resolve_checked(check_mode m);

}  // namespace kiln::detail
