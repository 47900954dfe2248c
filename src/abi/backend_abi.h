/* Kiln backend plugin ABI.
 *
 * The one boundary between the Kiln core and a backend (CPU built in, CUDA and
 * OpenCL as shared objects loaded at run time). Plain C: no C++ type, exception
 * or allocator crosses it. A plugin exports
 *
 *     const kiln_backend* kiln_backend_entry(uint32_t core_abi_version);
 *
 * and returns a table whose abi_version equals KILN_BACKEND_ABI_VERSION; the
 * loader refuses any other value and names both versions. Every call returns a
 * kiln_status; on failure the plugin's last_error() gives a message for the
 * calling thread. Handles are opaque pointers owned by the plugin.
 *
 * Threading: every function may be called from any thread; a plugin serialises
 * what its driver requires.
 */
#ifndef KILN_BACKEND_ABI_H
#define KILN_BACKEND_ABI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_BACKEND_ABI_VERSION 2u
#define KILN_BACKEND_ENTRY_SYMBOL "kiln_backend_entry"

typedef enum kiln_status {
  KILN_OK = 0,
  KILN_ERR_INVALID_ARGUMENT = 1,
  KILN_ERR_OUT_OF_MEMORY = 2,
  KILN_ERR_COMPILE = 3,
  KILN_ERR_UNSUPPORTED = 4,
  KILN_ERR_BACKEND = 5,   /* driver or device failure */
  KILN_ERR_NOT_FOUND = 6, /* e.g. a kernel entry point missing from a program */
  /* The device failed in a way that poisons it for the process (CUDA's sticky errors: a trapped
   * kernel, an illegal address). Every later call on it fails until device_reset. */
  KILN_ERR_DEVICE_LOST = 7
} kiln_status;

typedef enum kiln_device_type {
  KILN_DEVICE_CPU = 0,
  KILN_DEVICE_GPU = 1,
  KILN_DEVICE_ACCELERATOR = 2
} kiln_device_type;

/* Feature bits in kiln_device_info.features. */
#define KILN_FEATURE_BARRIER (1u << 0)       /* kiln_barrier() and local memory */
#define KILN_FEATURE_ATOMICS (1u << 1)       /* 32- and 64-bit integer atomics */
#define KILN_FEATURE_DOUBLE (1u << 2)        /* fp64 arithmetic */
#define KILN_FEATURE_COOPERATIVE (1u << 3)   /* cooperative (grid-sync) launch */
#define KILN_FEATURE_MAPPED_HOST (1u << 4)   /* device can address pinned host memory */
#define KILN_FEATURE_UNIFIED_ADDR (1u << 5)  /* host and device share one address space */
#define KILN_FEATURE_FLOAT_ATOMICS (1u << 6) /* atomic add on float/double */
#define KILN_FEATURE_WARP32 (1u << 7)        /* the target's kiln__warp_* primitives, 32 lanes */

typedef struct kiln_device_info {
  char name[256];
  char arch[64]; /* "sm_90", "x86_64-avx512" ...: part of the cache key */
  char vendor[64];
  char driver_version[64];
  kiln_device_type type;
  uint64_t global_mem_bytes;
  uint64_t max_alloc_bytes;
  uint64_t local_mem_bytes; /* per work-group (shared memory on CUDA) */
  uint32_t compute_units;   /* SMs, cores */
  uint32_t simd_width;      /* warp size, SIMD lanes */
  uint32_t max_work_group_size;
  uint32_t max_work_item_sizes[3];
  uint64_t max_groups[3]; /* grid limits */
  uint32_t clock_mhz;
  uint32_t features;                     /* KILN_FEATURE_* */
  uint32_t compute_major, compute_minor; /* CUDA compute capability; 0 elsewhere */
} kiln_device_info;

typedef struct kiln_device_s* kiln_device_h;
typedef struct kiln_queue_s* kiln_queue_h;
typedef struct kiln_event_s* kiln_event_h;
typedef struct kiln_program_s* kiln_program_h;
typedef struct kiln_kernel_s* kiln_kernel_h;
typedef struct kiln_graph_s* kiln_graph_h; /* an executable graph (graph_capture_end) */

typedef enum kiln_copy_kind {
  KILN_COPY_HOST_TO_DEVICE = 0,
  KILN_COPY_DEVICE_TO_HOST = 1,
  KILN_COPY_DEVICE_TO_DEVICE = 2
} kiln_copy_kind;

/* Memory is addressed as (allocation base, byte offset) so that backends
 * whose handles are not pointers (OpenCL cl_mem) fit the same ABI. A device
 * allocation handle is `void*`: a device address on CUDA and CPU. */
typedef struct kiln_mem_ref {
  void* base;
  uint64_t offset;
} kiln_mem_ref;

/* A compiled program: the bytes the backend can load again (cubin/PTX,
 * shared object, OpenCL binary). Owned by the plugin; release with
 * free_blob. */
typedef struct kiln_blob {
  void* data;
  uint64_t size;
} kiln_blob;

typedef struct kiln_launch_dims {
  uint32_t dims;      /* 1, 2 or 3 */
  uint64_t groups[3]; /* number of work-groups per dimension (>= 1) */
  uint32_t local[3];  /* work-group size per dimension (>= 1) */
  uint32_t dynamic_local_bytes;
} kiln_launch_dims;

/* One kernel argument as laid out in memory: `value` points at `size`
 * bytes (a device address for buffers, the scalar itself otherwise). */
typedef struct kiln_kernel_arg {
  const void* value;
  uint32_t size;
  uint32_t is_mem; /* 1 when value points at a kiln_mem_ref */
} kiln_kernel_arg;

/* Capability queries (supports_op). An op is a name; a dtype says which element type the
 * question is about (KILN_DTYPE_NONE where none applies). Backends answer 0 for names they do
 * not know, so new names need no version bump. */
#define KILN_OP_RING "ring"     /* hosts persistent ring kernels (kiln::ring) */
#define KILN_OP_GEMM "gemm"     /* matrix multiply, through an extension table */
/* The blas table's gemv takes f16/bf16 (f32 and f64 go with KILN_OP_GEMM, as before). */
#define KILN_OP_GEMV "gemv"
#define KILN_OP_CONV2D "conv2d" /* 2-D convolution, through an extension table */
/* Loading a program / allocating pinned host memory proceeds while a ring kernel is resident
 * (0 on CUDA, where both wait for the resident grid: the core refuses them at once instead). */
#define KILN_OP_LOAD_WHILE_RESIDENT "load_while_resident"
#define KILN_OP_PIN_WHILE_RESIDENT "pin_while_resident"
/* device_reset leaves the device's objects valid (the CPU backend): the core still frees them. */
#define KILN_OP_RESET_KEEPS_OBJECTS "reset_keeps_objects"
/* The graph_* entries work on this device (the CUDA driver has the graph API). */
#define KILN_OP_GRAPH "graph"

typedef enum kiln_dtype {
  KILN_DTYPE_NONE = 0,
  KILN_DTYPE_F16 = 1,
  KILN_DTYPE_BF16 = 2,
  KILN_DTYPE_F32 = 3,
  KILN_DTYPE_F64 = 4,
  KILN_DTYPE_I8 = 5,
  KILN_DTYPE_I32 = 6,
  KILN_DTYPE_I64 = 7,
  KILN_DTYPE_U8 = 8,
  KILN_DTYPE_U32 = 9,
  KILN_DTYPE_U64 = 10
} kiln_dtype;

/* Every extension table (get_extension) starts with these two fields. */
typedef struct kiln_extension_header {
  uint32_t version;     /* the version asked for */
  uint32_t struct_size; /* sizeof the plugin's table */
} kiln_extension_header;

/* Bits in kiln_backend.flags. A portable layer over vendor drivers (OpenCL): a native backend for
 * the same kind of device wins in device::best(). */
#define KILN_BACKEND_PORTABLE (1u << 0)
/* compile() depends on its arguments only and may run on any thread (NVRTC): the core runs it on
 * its compiler threads, so what an in-process compiler leaves in the allocator stays with a few
 * threads. Without it compile() runs on the calling thread (PoCL's kernels, linked by its own
 * workers, failed to link at exit when their program was built on another thread). */
#define KILN_BACKEND_COMPILE_ANY_THREAD (1u << 1)

/* The table's functions, in order: X(return type, name, (parameters)). backend_abi.h builds
 * the struct from this list and plugin_table.hpp builds a plugin's table from it, so a new
 * entry is one line here. Append only: the order is the ABI. */
#define KILN_BACKEND_FUNCTIONS(X)                                                                  \
  /* Message for the last failure on the calling thread (never NULL). */                           \
  X(const char*, last_error, (void))                                                               \
  /* Loads the driver. KILN_ERR_UNSUPPORTED with a message when the backend cannot run here        \
   * (no driver, no device): the core lists it as unavailable with that reason. Once. */           \
  X(kiln_status, init, (void))                                                                     \
  /* Frees global state. Tolerates a driver already shut down. */                                  \
  X(void, shutdown, (void))                                                                        \
  /* After init: one line on what works, e.g. "no driver (libcuda.so.1 not found); NVRTC           \
   * 13.0 loaded: compile-only". */                                                                \
  X(const char*, availability, (void))                                                             \
  /* Compiler identity for the cache key ("nvrtc 13.0", "/usr/bin/g++ 12.2.0"). */                 \
  X(kiln_status, compiler_id, (char* out, size_t out_size))                                        \
  X(int, device_count, (void))                                                                     \
  X(kiln_status, device_info, (int index, kiln_device_info* out))                                  \
  X(kiln_status, device_open, (int index, kiln_device_h* out))                                     \
  X(void, device_close, (kiln_device_h dev))                                                       \
  /* Allocates `bytes` ordered on `queue`; a NULL queue means usable by every queue of the         \
   * device once the call returns. */                                                              \
  X(kiln_status, mem_alloc, (kiln_device_h dev, uint64_t bytes, kiln_queue_h queue, void** out))   \
  /* Frees after all work queued on `queue` so far (NULL: at once, after the device is idle        \
   * for this allocation). */                                                                      \
  X(void, mem_free, (kiln_device_h dev, void* mem, kiln_queue_h queue))                            \
  /* Page-locked host memory, mapped for the device when it can be. */                             \
  X(kiln_status, host_alloc, (kiln_device_h dev, uint64_t bytes, void** out))                      \
  X(void, host_free, (kiln_device_h dev, void* ptr))                                               \
  /* Device address of memory in a mem_alloc allocation, for unified-address backends (CUDA,       \
   * CPU); KILN_ERR_UNSUPPORTED elsewhere. */                                                      \
  X(kiln_status, mem_address, (kiln_device_h dev, kiln_mem_ref mem, void** out))                   \
  /* Copies and fills are asynchronous on `queue`; host pointers for host sides. Host memory       \
   * of a pageable allocation must stay valid until the queue reaches the copy. */                 \
  X(kiln_status, copy_h2d,                                                                         \
    (kiln_queue_h queue, kiln_mem_ref dst, const void* src, uint64_t bytes))                       \
  X(kiln_status, copy_d2h, (kiln_queue_h queue, void* dst, kiln_mem_ref src, uint64_t bytes))      \
  X(kiln_status, copy_d2d,                                                                         \
    (kiln_queue_h queue, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes))                      \
  /* Repeats a 1, 2, 4 or 8 byte pattern `count` times. */                                         \
  X(kiln_status, fill,                                                                             \
    (kiln_queue_h queue, kiln_mem_ref dst, const void* pattern, uint32_t pattern_size,             \
     uint64_t count))                                                                              \
  X(kiln_status, queue_create, (kiln_device_h dev, kiln_queue_h * out))                            \
  /* Waits for queued work. */                                                                     \
  X(void, queue_destroy, (kiln_queue_h queue))                                                     \
  X(kiln_status, queue_finish, (kiln_queue_h queue))                                               \
  X(kiln_status, queue_wait_event, (kiln_queue_h queue, kiln_event_h event))                       \
  X(kiln_status, event_create, (kiln_device_h dev, kiln_event_h * out))                            \
  X(void, event_destroy, (kiln_event_h event))                                                     \
  X(kiln_status, event_record, (kiln_event_h event, kiln_queue_h queue))                           \
  X(kiln_status, event_wait, (kiln_event_h event))                                                 \
  /* KILN_OK when complete, KILN_ERR_NOT_FOUND when still pending. */                              \
  X(kiln_status, event_query, (kiln_event_h event))                                                \
  /* KILN_ERR_INVALID_ARGUMENT when either event is pending or was never recorded. */              \
  X(kiln_status, event_elapsed_ms, (kiln_event_h start, kiln_event_h end, float* out_ms))          \
  /* Compiles dialect source. `dev` may be NULL for a compile-only check against `arch`            \
   * (e.g. NVRTC without a GPU). On KILN_ERR_COMPILE the log is in *log (plugin-owned until        \
   * the next call on this thread). */                                                             \
  X(kiln_status, compile,                                                                          \
    (kiln_device_h dev, const char* arch, const char* source, const char* options, kiln_blob* out, \
     const char** log))                                                                            \
  X(void, free_blob, (kiln_blob blob))                                                             \
  X(kiln_status, program_load,                                                                     \
    (kiln_device_h dev, const void* data, uint64_t size, kiln_program_h* out))                     \
  /* Releases the program's kernel handles too. Launches of its kernels may still be queued: the   \
   * plugin keeps their code until they have run (the CPU plugin shares the library with each      \
   * queued launch; OpenCL retains kernels itself). */                                             \
  X(void, program_unload, (kiln_program_h program))                                                \
  X(kiln_status, kernel_get, (kiln_program_h program, const char* name, kiln_kernel_h* out))       \
  /* Largest work-group size this kernel can launch with, and the size the backend suggests        \
   * for throughput (occupancy API on CUDA). */                                                    \
  X(kiln_status, kernel_limits, (kiln_kernel_h kernel, uint32_t * max_size, uint32_t * preferred)) \
  X(kiln_status, launch,                                                                           \
    (kiln_kernel_h kernel, kiln_queue_h queue, const kiln_launch_dims* dims,                       \
     const kiln_kernel_arg* args, uint32_t num_args))                                              \
  /* ---- ABI 2. Entries from here on are optional: the core calls one only when                   \
   * struct_size covers it (KILN_BACKEND_HAS), so a shorter table has none. ---- */                \
  /* The plugin's extension table `name` at `version` (its own struct of function pointers,        \
   * starting with a kiln_extension_header), or NULL when it has none. */                          \
  X(const void*, get_extension, (const char* name, uint32_t version))                              \
  /* Space-separated "name/version" of every extension get_extension answers ("" if none):         \
   * for listings, never needed to call one. */                                                    \
  X(const char*, extension_list, (void))                                                           \
  /* 1 when device `index` runs `op` (KILN_OP_*) on `dtype`, 0 otherwise or when unknown. */       \
  X(int, supports_op, (int device_index, const char* op, kiln_dtype dtype))                        \
  /* ---- Resilience (optional). ---- */                                                           \
  /* Free and total device memory, and what the plugin's allocator caches (reserved but not in     \
   * use, e.g. CUDA's stream-ordered pool). Any pointer may be NULL. */                            \
  X(kiln_status, mem_info,                                                                         \
    (kiln_device_h dev, uint64_t * free_bytes, uint64_t * total_bytes, uint64_t * cached_bytes))   \
  /* Returns cached, unused memory to the driver (before an allocation is retried). Never waits    \
   * for running work. */                                                                          \
  X(kiln_status, mem_trim, (kiln_device_h dev))                                                    \
  /* KILN_ERR_DEVICE_LOST when the device has failed for the process, else KILN_OK. */             \
  X(kiln_status, device_status, (kiln_device_h dev))                                               \
  /* Destroys every object of the device (memory, queues, events, programs) and makes it usable    \
   * again: CUDA's primary-context reset. Handles from before are invalid; the core never passes   \
   * them again. */                                                                                \
  X(kiln_status, device_reset, (kiln_device_h dev))                                                \
  /* ---- Graphs (optional; kiln::graph, docs/graph.md). A NULL entry: the core replays the        \
   * stages through queues and events instead. ---- */                                             \
  /* Starts capturing `queue` (relaxed mode: other threads are not restricted). Work enqueued on   \
   * it, and on queues that wait on events recorded on it, is recorded instead of run. */          \
  X(kiln_status, graph_capture_begin, (kiln_queue_h queue))                                        \
  /* Ends the capture begun on `queue`; the capture always ends. exec NULL: the recording is       \
   * discarded. *exec NULL: it is instantiated into *exec. Otherwise *exec is updated in place     \
   * where the driver allows it, else re-instantiated (*rebuilt = 1; rebuilt may be NULL). */      \
  X(kiln_status, graph_capture_end, (kiln_queue_h queue, kiln_graph_h * exec, uint32_t * rebuilt)) \
  /* Replays an executable graph on `queue`, asynchronously. */                                    \
  X(kiln_status, graph_launch, (kiln_graph_h exec, kiln_queue_h queue))                            \
  X(void, graph_destroy, (kiln_graph_h exec))                                                      \
  /* ---- Peer copies between two devices of this backend (optional). ---- */                      \
  /* KILN_OK when `dev` reads and writes `peer`'s memory directly (enabling it if needed; the      \
   * same device: KILN_OK), KILN_ERR_UNSUPPORTED when the hardware cannot: the core then stages    \
   * copies through pinned host memory. */                                                         \
  X(kiln_status, peer_access, (kiln_device_h dev, kiln_device_h peer))                             \
  /* Asynchronous copy on `queue` (a queue of either device) from src on src_dev to dst on         \
   * dst_dev; KILN_ERR_UNSUPPORTED without peer access (the core stages). */                       \
  X(kiln_status, copy_peer,                                                                        \
    (kiln_queue_h queue, kiln_device_h dst_dev, kiln_mem_ref dst, kiln_device_h src_dev,           \
     kiln_mem_ref src, uint64_t bytes))                                                            \
  /* ---- Interop (optional). ---- */                                                              \
  /* The driver's own handle of the queue, for libraries that take one (a CUstream, a              \
   * cl_command_queue); KILN_ERR_UNSUPPORTED where the backend has none (the CPU). */              \
  X(kiln_status, queue_native, (kiln_queue_h queue, void** out))                                   \
  /* ---- Polling (optional). ---- */                                                              \
  /* KILN_OK when everything queued on `queue` so far has finished, KILN_ERR_NOT_FOUND while some  \
   * of it is pending or running (as event_query), KILN_ERR_UNSUPPORTED where the backend cannot   \
   * tell without an event (the core then records one). Never waits. */                           \
  X(kiln_status, queue_idle, (kiln_queue_h queue))

#define KILN_BACKEND_MEMBER_(ret, name, params) ret(*name) params;

/* One name for every version: abi_version says which layout the table has. */
typedef struct kiln_backend {
  /* These four never move, in any version. */
  uint32_t abi_version; /* KILN_BACKEND_ABI_VERSION */
  uint32_t struct_size; /* sizeof(kiln_backend) as the plugin saw it */
  const char* name;     /* "cpu", "cuda", "opencl": device strings use it */
  /* The codegen target the core renders the portable kernel language into, by name:
   * "cpp" (host C++ built into a shared object), "cuda" (CUDA C++ for NVRTC), "opencl"
   * (OpenCL C). The core looks the target up by this name; it never switches on backends. */
  const char* dialect;
  uint32_t flags; /* KILN_BACKEND_* */
  KILN_BACKEND_FUNCTIONS(KILN_BACKEND_MEMBER_)
} kiln_backend;

/* The first optional entry: the loader refuses a table shorter than this. */
#define KILN_BACKEND_REQUIRED_SIZE offsetof(kiln_backend, get_extension)
/* Nonzero when table `t` is long enough to hold entry `member` and the entry is set. */
#define KILN_BACKEND_HAS(t, member) \
  ((t)->struct_size >= offsetof(kiln_backend, member) + sizeof((t)->member) && (t)->member)

typedef const kiln_backend* (*kiln_backend_entry_fn)(uint32_t core_abi_version);

#ifdef __cplusplus
}
#endif
#endif
