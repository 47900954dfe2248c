// CUDA C++ for NVRTC. Index builtins read the hardware registers; the launch range travels as
// the entry's last parameter so kiln_global_size() and the range guard see the exact range.
#include "codegen/reduced_float.hpp"
#include "codegen/target.hpp"

namespace kiln::codegen {
using kernel_lang::kernel_decl;
namespace {

const char* prelude_base = R"KILN(
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define KILN_BACKEND_CUDA 1
#define KILN_KERNEL __device__ __forceinline__
#define KILN_FUNC __device__ __forceinline__
#define KILN_GLOBAL
#define KILN_LOCAL __shared__
#define KILN_RESTRICT __restrict__
struct kiln_range_t { unsigned long long n[3]; };
#define kiln__dim(v, d) ((d) == 0 ? (v).x : (d) == 1 ? (v).y : (v).z)
#define kiln_local_id(d) ((uint64_t)kiln__dim(threadIdx, d))
#define kiln_group_id(d) ((uint64_t)kiln__dim(blockIdx, d))
#define kiln_local_size(d) ((uint64_t)kiln__dim(blockDim, d))
#define kiln_num_groups(d) ((uint64_t)kiln__dim(gridDim, d))
#define kiln_global_id(d) (kiln_group_id(d) * kiln_local_size(d) + kiln_local_id(d))
#define kiln_global_size(d) ((uint64_t)kiln__range.n[d])
#define kiln_barrier() __syncthreads()
#define kiln_mem_fence() __threadfence()
__device__ __forceinline__ float rsqrt(float x) { return rsqrtf(x); }
#define KILN__ATOMIC_INT(T, U)                                                                  \
  __device__ __forceinline__ T kiln_atomic_add(T* p, T v) { return (T)atomicAdd((U*)p, (U)v); } \
  __device__ __forceinline__ T kiln_atomic_sub(T* p, T v) { return (T)atomicAdd((U*)p, (U)(0 - (U)v)); } \
  __device__ __forceinline__ T kiln_atomic_xchg(T* p, T v) { return (T)atomicExch((U*)p, (U)v); } \
  __device__ __forceinline__ T kiln_atomic_cas(T* p, T e, T d) { return (T)atomicCAS((U*)p, (U)e, (U)d); } \
  __device__ __forceinline__ T kiln_atomic_and(T* p, T v) { return (T)atomicAnd((U*)p, (U)v); } \
  __device__ __forceinline__ T kiln_atomic_or(T* p, T v) { return (T)atomicOr((U*)p, (U)v); } \
  __device__ __forceinline__ T kiln_atomic_xor(T* p, T v) { return (T)atomicXor((U*)p, (U)v); }
KILN__ATOMIC_INT(int32_t, int)
KILN__ATOMIC_INT(uint32_t, unsigned int)
KILN__ATOMIC_INT(int64_t, unsigned long long)
KILN__ATOMIC_INT(uint64_t, unsigned long long)
__device__ __forceinline__ int32_t kiln_atomic_min(int32_t* p, int32_t v) { return atomicMin(p, v); }
__device__ __forceinline__ int32_t kiln_atomic_max(int32_t* p, int32_t v) { return atomicMax(p, v); }
__device__ __forceinline__ uint32_t kiln_atomic_min(uint32_t* p, uint32_t v) { return atomicMin(p, v); }
__device__ __forceinline__ uint32_t kiln_atomic_max(uint32_t* p, uint32_t v) { return atomicMax(p, v); }
__device__ __forceinline__ int64_t kiln_atomic_min(int64_t* p, int64_t v) { return atomicMin((long long*)p, (long long)v); }
__device__ __forceinline__ int64_t kiln_atomic_max(int64_t* p, int64_t v) { return atomicMax((long long*)p, (long long)v); }
__device__ __forceinline__ uint64_t kiln_atomic_min(uint64_t* p, uint64_t v) { return atomicMin(p, v); }
__device__ __forceinline__ uint64_t kiln_atomic_max(uint64_t* p, uint64_t v) { return atomicMax(p, v); }
__device__ __forceinline__ float kiln_atomic_add(float* p, float v) { return atomicAdd(p, v); }
__device__ __forceinline__ double kiln_atomic_add(double* p, double v) { return atomicAdd(p, v); }
#define kiln__as_uint(f) __float_as_uint(f)
#define kiln__as_float(u) __uint_as_float(u)
__device__ __forceinline__ float kiln__hw_f16_to_f32(uint16_t h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f; }
__device__ __forceinline__ uint16_t kiln__hw_f32_to_f16(float f) {
  uint16_t h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#define KILN__F16_TO_F32 kiln__hw_f16_to_f32
#define KILN__F32_TO_F16 kiln__hw_f32_to_f16
#if __CUDA_ARCH__ >= 800
__device__ __forceinline__ float kiln__hw_bf16_to_f32(uint16_t b) {
  return __uint_as_float((uint32_t)b << 16); }
__device__ __forceinline__ uint16_t kiln__hw_f32_to_bf16(float f) {
  uint16_t h; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h; }
#define KILN__BF16_TO_F32 kiln__hw_bf16_to_f32
#define KILN__F32_TO_BF16 kiln__hw_f32_to_bf16
#endif
)KILN";
// The base, then the 16-bit float types (reduced_float.hpp), which use its definitions.
const std::string prelude_text = std::string(prelude_base) + reduced_float_text;

void emit_entry(std::string& out, const kernel_decl& k, bool checked) {
  out += "extern \"C\" __global__ void " + k.name + "(";
  for (std::size_t i = 0; i < k.params.size(); ++i)
    out += k.param_types[i] + " kiln__p" + std::to_string(i) + ", ";
  out += "kiln_range_t kiln__range";
  // Checked mode: the launcher passes the counts, then the error buffer, after the range.
  if (checked) {
    for (std::size_t i = 0; i < k.params.size(); ++i)
      if (k.params[i].is_pointer) out += ", uint64_t kiln__n" + std::to_string(i);
    out += ", uint64_t* kiln__err";
  }
  out +=
      ") {\n"
      "  if (kiln_global_id(0) >= kiln__range.n[0] || kiln_global_id(1) >= kiln__range.n[1] ||\n"
      "      kiln_global_id(2) >= kiln__range.n[2]) return;\n  " +
      body_name(k.name) + "(kiln__range";
  if (checked) out += ", " + checked_args(k);
  for (std::size_t i = 0; i < k.params.size(); ++i) out += ", kiln__p" + std::to_string(i);
  out += ");\n}\n";
}

// Checked mode (kernel_lang/checked_access.hpp): the address of p[i], or, out of range, the
// first violation recorded and a dummy slot of the error buffer.
const char* checked_prelude = R"KILN(
template <class T>
__device__ __forceinline__ T* kiln__ck(T* p, uint64_t i, uint64_t n, uint64_t* err, uint32_t arg,
                                       uint32_t line) {
  if (__builtin_expect(i < n, 1)) return p + i;
  if (atomicCAS(err, 0ull, 1ull) == 0ull) { err[1] = arg; err[2] = i; err[3] = line; }
  return (T*)(err + 6);
}
)KILN";

// Warp primitives of generated kernels (full warps only: every caller runs all 32 lanes).
const warp_ops warp = {32, R"KILN(
#define kiln__warp_shfl_up(x, d) __shfl_up_sync(0xffffffffu, (x), (d))
#define kiln__warp_shfl_down(x, d) __shfl_down_sync(0xffffffffu, (x), (d))
#define kiln__warp_shfl_xor(x, m) __shfl_xor_sync(0xffffffffu, (x), (m))
#define kiln__warp_ballot(p) ((uint32_t)__ballot_sync(0xffffffffu, (p)))
#define kiln__warp_ffs(m) ((uint32_t)__ffs((int)(m)))
#define kiln__warp_popc(m) ((uint32_t)__popc((unsigned)(m)))
#define kiln__warp_sync() __syncwarp()
#define kiln__backoff(ns) __nanosleep(ns)
)KILN"};

// Memory ordering, CUDA: loads and stores of shared words use PTX's .sys scope because the
// other party is the host CPU across PCIe; acquire on the seq load orders the payload reads
// after it, release on the seq store (or fence.acq_rel.sys after __syncwarp, which orders the
// other lanes' payload stores, then relaxed seq stores) publishes the payload before the seq.
// `claim` and `live` live in device memory and are only touched by the device: .gpu scope.
const char* ring_primitives = R"KILN(
#define KILN_RING_LANES 32u
#define KILN_RING_STAGED 1
#define KILN_RING_DEVICE __device__ __forceinline__
#define KILN_RING_MEMBER __device__ __forceinline__
#define KILN_RING_LANE (threadIdx.x & 31u)
KILN_RING_DEVICE uint64_t kiln_ring_load_acquire(const uint64_t* p) {
  uint64_t v; asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
KILN_RING_DEVICE uint64_t kiln_ring_load_relaxed(const uint64_t* p) {
  uint64_t v; asm volatile("ld.relaxed.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
KILN_RING_DEVICE void kiln_ring_store_release(uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory"); }
KILN_RING_DEVICE void kiln_ring_store_relaxed(uint64_t* p, uint64_t v) {
  asm volatile("st.relaxed.sys.u64 [%0], %1;" :: "l"(p), "l"(v) : "memory"); }
KILN_RING_DEVICE void kiln_ring_fence() { asm volatile("fence.acq_rel.sys;" ::: "memory"); }
KILN_RING_DEVICE uint64_t kiln_ring_dev_load(const uint64_t* p) {
  uint64_t v; asm volatile("ld.relaxed.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory"); return v; }
KILN_RING_DEVICE uint64_t kiln_ring_dev_add(uint64_t* p, uint64_t v) {
  return atomicAdd((unsigned long long*)p, v); }
KILN_RING_DEVICE void kiln_ring_dev_sub(uint64_t* p, uint64_t v) {
  atomicAdd((unsigned long long*)p, 0ull - v); }
KILN_RING_DEVICE void kiln_ring_sleep(uint64_t ns) { __nanosleep((unsigned)ns); }
KILN_RING_DEVICE uint64_t kiln_ring_now_ns() {
  uint64_t t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
KILN_RING_DEVICE void kiln_ring_sync() { __syncwarp(); }
KILN_RING_DEVICE uint64_t kiln_ring_bcast(uint64_t v) { return __shfl_sync(0xffffffffu, v, 0); }
KILN_RING_DEVICE uint32_t kiln_ring_run(bool ok) {
  const unsigned m = ~__ballot_sync(0xffffffffu, ok); return m ? (uint32_t)__ffs(m) - 1u : 32u; }
#define kiln_trap() __trap()
)KILN";

// A unit is a warp: the block's last warp is the watchdog; each worker warp stages its
// messages in its own slice of shared memory.
std::string open_ring_entry(std::uint64_t staging_bytes) {
  return "  __shared__ __align__(16) unsigned char kiln_ring_smem[KILN_RING_WARPS][" +
         std::to_string(staging_bytes) +
         "];\n"
         "  const uint32_t warp = threadIdx.x / 32u;\n"
         "  if (warp == KILN_RING_WARPS) { if (blockIdx.x == 0) kiln_ring_watchdog(C); return; }\n"
         "  const uint32_t unit = blockIdx.x * KILN_RING_WARPS + warp;\n"
         "  unsigned char* staging = kiln_ring_smem[warp];\n"
         "  (void)cpu_unit;\n";
}
const ring_ops ring = {32, ring_primitives, open_ring_entry, false};  // NVRTC: no offsetof

}  // namespace

const target cuda_target = {.name = "cuda",
                            .prelude = prelude_text.c_str(),
                            .body_param = "const kiln_range_t& kiln__range",
                            .emit_entry = emit_entry,
                            .checked_prelude = checked_prelude,
                            .warp = &warp,
                            .ring = &ring};

namespace {
const target_registration registered{cuda_target};
}  // namespace

}  // namespace kiln::codegen
