// Internal declarations shared by the CUDA plugin's translation units.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend_abi.h"
#include "blas_abi.h"
#include "driver_api.hpp"

namespace kiln_cuda {
struct DnnQueue;  // dnn.cpp: a queue's cuDNN handle, descriptors and workspace
struct LtQueue;   // blas_lt.cpp: a queue's cuBLASLt handle, workspace and plans
}  // namespace kiln_cuda

// Handle types named by backend_abi.h. One kiln_device_s exists per device index for the
// plugin's lifetime; device_open hands out the same pointer and counts references.
struct kiln_device_s {
  int index = 0;
  CUdevice dev = 0;
  kiln_device_info info{};  // filled at init, no context needed
  // Valid while refs > 0 (guarded by State::mu).
  int refs = 0;
  CUcontext ctx = nullptr;
  CUstream internal = nullptr;  // for NULL-queue allocations and frees
  CUmemoryPool pool = nullptr;  // null: device lacks memory pools, fall back to cuMemAlloc
  // A sticky error hit this device's context (cu_fail): every call fails until device_reset.
  std::atomic<bool> lost{false};
  // Executable graphs alive on this device (graph.cpp). While any is, a queue's cuDNN workspace
  // is never freed when it grows (a graph may have captured its address): it is retired here
  // and freed when the last graph goes.
  std::atomic<int> live_graphs{0};
  std::mutex retired_mu;
  std::vector<CUdeviceptr> retired;
};

struct kiln_queue_s {
  kiln_device_s* dev;
  CUstream stream;
  // The queue's cuBLAS handle (blas.cpp), bound to `stream`, created on first use under
  // blas_mu. Per queue, not per context: a handle's workspace must not serve two streams
  // at once, and its math mode is per handle.
  void* blas = nullptr;
  kiln_cuda::LtQueue* blas_lt = nullptr;  // cuBLASLt (blas_lt.cpp), also under blas_mu
  std::mutex blas_mu;
  // The queue's cuDNN state (dnn.cpp), likewise: created on first use under dnn_mu, bound to
  // `stream`, with a workspace allocated in the stream's order.
  kiln_cuda::DnnQueue* dnn = nullptr;
  std::mutex dnn_mu;
};

struct kiln_event_s {
  kiln_device_s* dev;
  CUevent event;
};

struct kiln_kernel_s {
  kiln_device_s* dev;
  CUfunction fn;
  uint32_t max_threads;  // CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK
  uint32_t preferred;    // cuOccupancyMaxPotentialBlockSize
  std::string name;
};

// An executable CUDA graph (graph.cpp).
struct kiln_graph_s {
  kiln_device_s* dev;
  CUgraphExec exec;
};

// The ABI has no kernel release call, so kernels live as long as their program.
struct kiln_program_s {
  kiln_device_s* dev;
  CUmodule module;
  std::mutex mu;
  std::vector<std::unique_ptr<kiln_kernel_s>> kernels;
};

namespace kiln_cuda {

struct State {
  std::mutex mu;
  bool initialized = false;
  kiln_status init_status = KILN_ERR_UNSUPPORTED;
  bool driver_ok = false;  // cuInit succeeded and at least one device exists
  std::string availability = "not initialised";
  std::string init_error;
  std::vector<std::unique_ptr<kiln_device_s>> devices;
};

// Never destroyed: shutdown may run from another library's static destructor.
State& state();

// Makes dev's primary context current on this thread. The fast variant trusts a thread-local
// cache (the hot paths: copies, fills, launches work through streams that carry their context
// anyway); the checked variant asks the driver, for calls that depend on the current context.
extern std::atomic<uint64_t> g_ctx_generation;
struct CtxCache {
  CUcontext ctx = nullptr;
  uint64_t generation = 0;
};
extern thread_local CtxCache t_ctx;
kiln_status set_current_slow(kiln_device_s* d) noexcept;
inline kiln_status make_current(kiln_device_s* d) noexcept {
  if (t_ctx.ctx == d->ctx && t_ctx.generation == g_ctx_generation.load(std::memory_order_acquire))
    return KILN_OK;
  return set_current_slow(d);
}
kiln_status make_current_checked(kiln_device_s* d) noexcept;

inline CUdeviceptr dptr(const kiln_mem_ref& m) {
  return reinterpret_cast<CUdeviceptr>(m.base) + m.offset;
}

// The "blas" extension (blas.cpp): cuBLAS, when it loads and a device exists.
bool blas_loaded() noexcept;
bool blas_reduced_loaded() noexcept;  // cuBLAS has the f16/bf16 GEMM
const void* blas_extension(const char* name, uint32_t version) noexcept;
const char* blas_extension_list() noexcept;
// Records "call failed: cuBLAS status N" and maps a cublasStatus_t (cuBLAS and cuBLASLt share
// it) to a kiln_status.
kiln_status blas_fail(int status, const char* call) noexcept;
// Destroys the queue's cuBLAS handle, if any; its context must be current.
void blas_release(kiln_queue_s* q) noexcept;
// cuBLASLt (blas_lt.cpp): the table's gemm_epilogue when libcublasLt loads, else null.
using blas_epilogue_fn = kiln_status (*)(kiln_queue_h, const kiln_blas_gemm_desc*,
                                         const kiln_blas_epilogue_desc*);
bool blas_lt_loaded() noexcept;
blas_epilogue_fn blas_lt_gemm_epilogue() noexcept;
// Frees the queue's cuBLASLt state, if any; with `device` (as dnn_release) also the handle and
// the workspace, in the stream's order.
void blas_lt_release(kiln_queue_s* q, bool device) noexcept;

// The "dnn" extension (dnn.cpp): cuDNN 9, when it loads and a device exists.
bool dnn_loaded() noexcept;
const void* dnn_extension(const char* name, uint32_t version) noexcept;
// After a successful init: loads cuDNN where a device exists and appends to the availability
// line what was found ("cuDNN 9.19.0 loaded (libcudnn.so.9)") or why nothing loaded.
void dnn_note_availability() noexcept;
// Frees the queue's cuDNN state, if any. With `device` (the driver is alive, the queue's
// context current, its stream not yet destroyed) also the handle and the workspace, freed in
// the stream's order; without, only host memory.
void dnn_release(kiln_queue_s* q, bool device) noexcept;

// The "ccl" extension (ccl.cpp): NCCL, when it loads and a device exists.
bool ccl_loaded() noexcept;
const void* ccl_extension(const char* name, uint32_t version) noexcept;

// ABI entry points, implemented across device.cpp, memory.cpp, queue.cpp and program.cpp.
// They may throw (std::bad_alloc); plugin.cpp wraps each one in a catch-all guard.
kiln_status init();
void shutdown();
const char* availability() noexcept;
kiln_status compiler_id(char* out, size_t out_size);
int device_count();
kiln_status device_info(int index, kiln_device_info* out);
kiln_status device_open(int index, kiln_device_h* out);
void device_close(kiln_device_h dev);
kiln_status device_status(kiln_device_h dev);
kiln_status device_reset(kiln_device_h dev);
kiln_status mem_info(kiln_device_h dev, uint64_t* free_bytes, uint64_t* total_bytes,
                     uint64_t* cached_bytes);
kiln_status mem_trim(kiln_device_h dev);

kiln_status mem_alloc(kiln_device_h dev, uint64_t bytes, kiln_queue_h queue, void** out);
void mem_free(kiln_device_h dev, void* mem, kiln_queue_h queue);
kiln_status host_alloc(kiln_device_h dev, uint64_t bytes, void** out);
void host_free(kiln_device_h dev, void* ptr);
kiln_status mem_address(kiln_device_h dev, kiln_mem_ref mem, void** out);
kiln_status copy_h2d(kiln_queue_h queue, kiln_mem_ref dst, const void* src, uint64_t bytes);
kiln_status copy_d2h(kiln_queue_h queue, void* dst, kiln_mem_ref src, uint64_t bytes);
kiln_status copy_d2d(kiln_queue_h queue, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes);
kiln_status fill(kiln_queue_h queue, kiln_mem_ref dst, const void* pattern, uint32_t pattern_size,
                 uint64_t count);
kiln_status peer_access(kiln_device_h dev, kiln_device_h peer);
kiln_status copy_peer(kiln_queue_h queue, kiln_device_h dst_dev, kiln_mem_ref dst,
                      kiln_device_h src_dev, kiln_mem_ref src, uint64_t bytes);

kiln_status queue_create(kiln_device_h dev, kiln_queue_h* out);
void queue_destroy(kiln_queue_h queue);
kiln_status queue_finish(kiln_queue_h queue);
kiln_status queue_native(kiln_queue_h queue, void** out);
kiln_status queue_idle(kiln_queue_h queue);
kiln_status queue_wait_event(kiln_queue_h queue, kiln_event_h event);
kiln_status event_create(kiln_device_h dev, kiln_event_h* out);
void event_destroy(kiln_event_h event);
kiln_status event_record(kiln_event_h event, kiln_queue_h queue);
kiln_status event_wait(kiln_event_h event);
kiln_status event_query(kiln_event_h event);
kiln_status event_elapsed_ms(kiln_event_h start, kiln_event_h end, float* out_ms);

kiln_status compile(kiln_device_h dev, const char* arch, const char* source, const char* options,
                    kiln_blob* out, const char** log);
void free_blob(kiln_blob blob);
kiln_status program_load(kiln_device_h dev, const void* data, uint64_t size, kiln_program_h* out);
void program_unload(kiln_program_h program);
kiln_status kernel_get(kiln_program_h program, const char* name, kiln_kernel_h* out);
kiln_status kernel_limits(kiln_kernel_h kernel, uint32_t* max_size, uint32_t* preferred);
kiln_status launch(kiln_kernel_h kernel, kiln_queue_h queue, const kiln_launch_dims* dims,
                   const kiln_kernel_arg* args, uint32_t num_args);

kiln_status graph_capture_begin(kiln_queue_h queue);
kiln_status graph_capture_end(kiln_queue_h queue, kiln_graph_h* exec, uint32_t* rebuilt);
kiln_status graph_launch(kiln_graph_h exec, kiln_queue_h queue);
void graph_destroy(kiln_graph_h exec);

}  // namespace kiln_cuda
