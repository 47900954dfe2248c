// CUDA C++ for NVRTC. Index builtins read the hardware registers; the launch range travels as
// the entry's last parameter so kiln_global_size() and the range guard see the exact range.
#include "kernel_lang/dialect.hpp"

namespace kiln::kernel_lang {
namespace {

const char* prelude = R"KILN(
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
)KILN";

void emit_entry(std::string& out, const kernel_decl& k) {
  out += "extern \"C\" __global__ void " + k.name + "(";
  for (std::size_t i = 0; i < k.params.size(); ++i)
    out += k.param_types[i] + " kiln__p" + std::to_string(i) + ", ";
  out +=
      "kiln_range_t kiln__range) {\n"
      "  if (kiln_global_id(0) >= kiln__range.n[0] || kiln_global_id(1) >= kiln__range.n[1] ||\n"
      "      kiln_global_id(2) >= kiln__range.n[2]) return;\n  " +
      body_name(k.name) + "(kiln__range";
  for (std::size_t i = 0; i < k.params.size(); ++i) out += ", kiln__p" + std::to_string(i);
  out += ");\n}\n";
}

}  // namespace

const dialect_table cuda_dialect = {"cuda", prelude, "const kiln_range_t& kiln__range", emit_entry};

}  // namespace kiln::kernel_lang
