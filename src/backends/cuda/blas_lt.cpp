// The "blas" table's gemm_epilogue: cuBLASLt, a GEMM with its bias and activation applied in the
// GEMM's own epilogue (the elementwise tail of a linear layer never makes a round trip through
// memory). libcublasLt is dlopen'ed like cuBLAS; cublasLt.h is included for types only.
//
// Layout: as blas.cpp, the row-major C (m x n) is computed as the column-major C^T (n x m) =
// op(B)^T op(A)^T, so cuBLASLt's "A" is Kiln's B, its "B" is Kiln's A, and the bias (one value
// per column of the row-major C) is one value per row of cuBLASLt's D: exactly its bias vector.
//
// Per queue (guarded by the queue's blas_mu): one cuBLASLt handle, a workspace allocated in the
// stream's order, and the plans (descriptors and the heuristic's algorithm) cached per shape,
// since the heuristic query costs more than launching a small GEMM.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "blas_abi.h"
#include "cuda_backend.hpp"
#include "dl_library.hpp"

namespace kiln_cuda {
namespace {

#define KILN_CUBLASLT_FUNCS(X)            \
  X(cublasLtCreate)                       \
  X(cublasLtDestroy)                      \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)

struct LtApi {
  void* lib = nullptr;
  KILN_CUBLASLT_FUNCS(KILN_DL_MEMBER)
};

const LtApi& lt() {
  static LtApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!state().driver_ok) return;
    api.lib = kiln_plugin::dl_open_first(
        "KILN_CUBLASLT_LIBRARY", {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"});
    if (!api.lib) return;
    bool ok = true;
    KILN_CUBLASLT_FUNCS(KILN_DL_RESOLVE)
    if (!ok) api.lib = nullptr;  // RTLD_NODELETE: stays mapped, unused
  });
  return api;
}

// Hopper's kernels want 32 MiB (NVIDIA's recommendation for sm_90); smaller GPUs less, but
// one size keeps the plan cache valid for every shape.
constexpr size_t workspace_bytes = size_t{32} << 20;

// What a plan depends on: the problem, the types, the epilogue and the operands' alignments
// (an algorithm picked for 16-byte-aligned pointers may not run on 2-byte-aligned ones).
using plan_key = std::tuple<int, int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                            uint64_t, int, uint32_t, uint32_t>;

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt has no kernel for it (remembered, not asked again)
};

}  // namespace

struct LtQueue {
  cublasLtHandle_t handle = nullptr;
  CUdeviceptr ws = 0;
  std::map<plan_key, Plan> plans;
};

namespace {

#define KILN_LT_CHECK(call, ...)                                                 \
  if (cublasStatus_t st_ = lt().call(__VA_ARGS__); st_ != CUBLAS_STATUS_SUCCESS) \
    return blas_fail(st_, #call);

void destroy_plan(Plan& p) noexcept {
  if (p.op) lt().cublasLtMatmulDescDestroy(p.op);
  for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d})
    if (l) lt().cublasLtMatrixLayoutDestroy(l);
  p = Plan{};
}

// The largest power of two (up to 256) dividing the address: what the heuristic may assume.
uint32_t alignment(CUdeviceptr p) {
  uint32_t a = 256;
  while (a > 1 && p % a) a /= 2;
  return a;
}

template <class T>
kiln_status set_op(cublasLtMatmulDesc_t op, cublasLtMatmulDescAttributes_t attr, const T& v) {
  KILN_LT_CHECK(cublasLtMatmulDescSetAttribute, op, attr, &v, sizeof v);
  return KILN_OK;
}

// Builds the descriptors for d and asks the heuristic for its best algorithm.
kiln_status make_plan(LtQueue& s, const kiln_blas_gemm_desc& d, const kiln_blas_epilogue_desc& e,
                      uint32_t min_align, Plan& p) {
  cudaDataType t = CUDA_R_32F, scale = CUDA_R_32F;
  cublasComputeType_t compute =
      d.math_mode == KILN_BLAS_MATH_TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  if (d.dtype == KILN_DTYPE_F16) {
    t = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F;
  } else if (d.dtype == KILN_DTYPE_BF16) {
    t = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F;
  } else if (d.dtype == KILN_DTYPE_F64) {
    t = scale = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F;
  }
  KILN_LT_CHECK(cublasLtMatmulDescCreate, &p.op, compute, scale);
  const cublasOperation_t ta = d.trans_b == KILN_BLAS_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t tb = d.trans_a == KILN_BLAS_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasLtEpilogue_t epi =
      e.epilogue == KILN_BLAS_EPILOGUE_BIAS_RELU        ? CUBLASLT_EPILOGUE_RELU_BIAS
      : e.epilogue == KILN_BLAS_EPILOGUE_BIAS_GELU_TANH ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                        : CUBLASLT_EPILOGUE_BIAS;
  if (kiln_status st = set_op(p.op, CUBLASLT_MATMUL_DESC_TRANSA, ta)) return st;
  if (kiln_status st = set_op(p.op, CUBLASLT_MATMUL_DESC_TRANSB, tb)) return st;
  if (kiln_status st = set_op(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, epi)) return st;
  if (kiln_status st = set_op(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, t)) return st;
  // cuBLASLt's A is Kiln's B (n x k after op), its B Kiln's A (k x m), its D C^T (n x m); a
  // layout names the stored column-major matrix, before op.
  const bool tb_ = d.trans_b == KILN_BLAS_OP_T, ta_ = d.trans_a == KILN_BLAS_OP_T;
  KILN_LT_CHECK(cublasLtMatrixLayoutCreate, &p.a, t, tb_ ? d.k : d.n, tb_ ? d.n : d.k,
                int64_t(d.ldb));
  KILN_LT_CHECK(cublasLtMatrixLayoutCreate, &p.b, t, ta_ ? d.m : d.k, ta_ ? d.k : d.m,
                int64_t(d.lda));
  KILN_LT_CHECK(cublasLtMatrixLayoutCreate, &p.d, t, d.n, d.m, int64_t(d.ldc));
  cublasLtMatmulPreference_t pref = nullptr;
  KILN_LT_CHECK(cublasLtMatmulPreferenceCreate, &pref);
  const uint64_t ws = workspace_bytes;
  cublasStatus_t st = lt().cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (auto attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS)
      st = lt().cublasLtMatmulPreferenceSetAttribute(pref, attr, &min_align, sizeof min_align);
  cublasLtMatmulHeuristicResult_t r{};
  int count = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = lt().cublasLtMatmulAlgoGetHeuristic(s.handle, p.op, p.a, p.b, p.d, p.d, pref, 1, &r,
                                             &count);
  lt().cublasLtMatmulPreferenceDestroy(pref);
  // NOT_SUPPORTED or no result: no kernel for this configuration (f64 with a bias, say).
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || (st == CUBLAS_STATUS_SUCCESS && count == 0))
    return KILN_OK;
  if (st != CUBLAS_STATUS_SUCCESS) return blas_fail(st, "cublasLtMatmulAlgoGetHeuristic");
  p.algo = r.algo;
  p.found = true;
  return KILN_OK;
}

// The queue's state, created on first use: the handle and the workspace (in stream order).
kiln_status bind(kiln_queue_h q, LtQueue** out) {
  if (kiln_status s = make_current(q->dev)) return s;
  if (!q->blas_lt) {
    auto* s = new (std::nothrow) LtQueue;
    if (!s) return set_error(KILN_ERR_OUT_OF_MEMORY, "cuBLASLt queue state");
    if (cublasStatus_t st = lt().cublasLtCreate(&s->handle); st != CUBLAS_STATUS_SUCCESS) {
      delete s;
      return blas_fail(st, "cublasLtCreate");
    }
    const CUresult r = q->dev->pool ? g_cu.cuMemAllocFromPoolAsync(&s->ws, workspace_bytes,
                                                                   q->dev->pool, q->stream)
                                    : g_cu.cuMemAlloc(&s->ws, workspace_bytes);
    if (r != CUDA_SUCCESS) {
      lt().cublasLtDestroy(s->handle);
      delete s;
      return cu_fail(r, "cuMemAlloc", "the cuBLASLt workspace");
    }
    q->blas_lt = s;
  }
  *out = q->blas_lt;
  return KILN_OK;
}

kiln_status gemm_epilogue(kiln_queue_h q, const kiln_blas_gemm_desc* d,
                          const kiln_blas_epilogue_desc* e) noexcept {
  if (d->batch != 1)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "cuBLASLt gemm_epilogue: batch must be 1");
  if (e->epilogue < KILN_BLAS_EPILOGUE_BIAS || e->epilogue > KILN_BLAS_EPILOGUE_BIAS_GELU_TANH)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "cuBLASLt gemm_epilogue: unknown epilogue %d",
                     static_cast<int>(e->epilogue));
  if (d->dtype == KILN_DTYPE_F64)  // cuBLASLt's f64 kernels take no bias epilogue
    return set_error(KILN_ERR_UNSUPPORTED, "cuBLASLt gemm_epilogue: no f64 epilogues");
  if (!lt().lib) return set_error(KILN_ERR_UNSUPPORTED, "cuBLASLt is not loaded");
  try {
    std::lock_guard<std::mutex> lock(q->blas_mu);
    LtQueue* s = nullptr;
    if (kiln_status st = bind(q, &s)) return st;
    const CUdeviceptr a = dptr(d->a), b = dptr(d->b), c = dptr(d->c), bias = dptr(e->bias);
    const uint32_t align = std::min({alignment(a), alignment(b), alignment(c)});
    const plan_key key{
        int(d->dtype), int(d->trans_a), int(d->trans_b),  d->m,         d->n, d->k, d->lda,
        d->ldb,        d->ldc,          int(e->epilogue), d->math_mode, align};
    auto [it, fresh] = s->plans.try_emplace(key);
    Plan& p = it->second;
    if (fresh) {
      if (kiln_status st = make_plan(*s, *d, *e, align, p)) {
        destroy_plan(p);
        s->plans.erase(it);
        return st;
      }
    }
    if (!p.found)
      return set_error(KILN_ERR_UNSUPPORTED, "cuBLASLt has no kernel for this GEMM epilogue");
    if (kiln_status st = set_op(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias)) return st;
    const float zero_f = 0;
    // alpha is an f32 for f32/f16/bf16 (blas_abi.h); beta is 0: D is written, C never read.
    KILN_LT_CHECK(cublasLtMatmul, s->handle, p.op, d->alpha, reinterpret_cast<const void*>(b), p.a,
                  reinterpret_cast<const void*>(a), p.b, &zero_f, reinterpret_cast<void*>(c), p.d,
                  reinterpret_cast<void*>(c), p.d, &p.algo, reinterpret_cast<void*>(s->ws),
                  workspace_bytes, reinterpret_cast<cudaStream_t>(q->stream));
    return KILN_OK;
  } catch (...) {  // std::bad_alloc growing the plan cache
    return set_error(KILN_ERR_OUT_OF_MEMORY, "cuBLASLt plan cache");
  }
}

}  // namespace

bool blas_lt_loaded() noexcept { return lt().lib != nullptr; }

blas_epilogue_fn blas_lt_gemm_epilogue() noexcept { return lt().lib ? gemm_epilogue : nullptr; }

void blas_lt_release(kiln_queue_s* q, bool device) noexcept {
  LtQueue* s = q->blas_lt;
  if (!s) return;
  q->blas_lt = nullptr;
  for (auto& [key, plan] : s->plans) destroy_plan(plan);
  if (device) {
    if (s->ws) {
      if (q->dev->pool) {
        g_cu.cuMemFreeAsync(s->ws, q->stream);
      } else if (g_cu.cuStreamSynchronize(q->stream) == CUDA_SUCCESS) {
        g_cu.cuMemFree(s->ws);
      }
    }
    if (s->handle) lt().cublasLtDestroy(s->handle);
  }
  delete s;
}

}  // namespace kiln_cuda
