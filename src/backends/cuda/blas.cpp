// The CUDA plugin's "blas" extension: cuBLAS, loaded with dlopen (never linked) on first need;
// cublas_api.h is included for types only. One cuBLAS handle per queue (its stream), created
// on first use. Kiln is row-major and cuBLAS column-major: a row-major m x n matrix is its
// column-major transpose, so C = op(A) op(B) runs as C^T = op(B)^T op(A)^T with A and B
// swapped and the same transpose flags.
#include <cublas_api.h>

#include <climits>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string>

#include "blas_abi.h"
#include "cuda_backend.hpp"
#include "dl_library.hpp"
#include "plugin_table.hpp"

namespace kiln_cuda {
namespace {

#define KILN_CUBLAS_FUNCS(X)   \
  X(cublasCreate_v2)           \
  X(cublasDestroy_v2)          \
  X(cublasGetProperty)         \
  X(cublasSetStream_v2)        \
  X(cublasSetMathMode)         \
  X(cublasSgemmStridedBatched) \
  X(cublasDgemmStridedBatched) \
  X(cublasSgemv_v2)            \
  X(cublasDgemv_v2)

kiln_status gemm(kiln_queue_h q, const kiln_blas_gemm_desc* d) noexcept;
kiln_status gemv(kiln_queue_h q, const kiln_blas_gemv_desc* d) noexcept;

// The compute-type form (cublas_api.h also declares a C++ overload taking a cudaDataType).
using gemm_ex_fn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void*, const void*, cudaDataType, int,
                                      long long, const void*, cudaDataType, int, long long,
                                      const void*, void*, cudaDataType, int, long long, int,
                                      cublasComputeType_t, cublasGemmAlgo_t);

struct CublasApi {
  void* lib = nullptr;
  std::string library;   // "cuBLAS 13.0.2"
  kiln_blas_v1 table{};  // get_extension("blas", 1), set once loaded
  KILN_CUBLAS_FUNCS(KILN_DL_MEMBER)
  gemm_ex_fn cublasGemmStridedBatchedEx = nullptr;  // f16/bf16 GEMM; optional
};

// Loads cuBLAS once: $KILN_CUBLAS_LIBRARY, else the CUDA 13 and 12 sonames, else the plain
// name. Only where the driver found a device: cuBLAS cannot run without one.
const CublasApi& cublas() {
  static CublasApi api;
  static std::once_flag once;
  std::call_once(once, [] {
    if (!state().driver_ok) return;
    api.lib = kiln_plugin::dl_open_first("KILN_CUBLAS_LIBRARY",
                                         {"libcublas.so.13", "libcublas.so.12", "libcublas.so"});
    if (!api.lib) return;
    bool ok = true;
    KILN_CUBLAS_FUNCS(KILN_DL_RESOLVE)
    api.cublasGemmStridedBatchedEx =
        reinterpret_cast<gemm_ex_fn>(dlsym(api.lib, "cublasGemmStridedBatchedEx"));
    int major = 0, minor = 0, patch = 0;
    if (ok && api.cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
        api.cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
        api.cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS) {
      api.library = "cuBLAS " + std::to_string(major) + "." + std::to_string(minor) + "." +
                    std::to_string(patch);
      api.table = {{KILN_BLAS_VERSION, sizeof(kiln_blas_v1)},
                   api.library.c_str(),
                   gemm,
                   gemv,
                   blas_lt_gemm_epilogue()};
    } else {
      api.lib = nullptr;  // lacks an entry point Kiln needs; RTLD_NODELETE: stays mapped, unused
    }
  });
  return api;
}

#define KILN_CUBLAS_CHECK(call, ...)                                                 \
  if (cublasStatus_t st_ = cublas().call(__VA_ARGS__); st_ != CUBLAS_STATUS_SUCCESS) \
    return blas_fail(st_, #call);

bool fits_int(std::initializer_list<uint64_t> values) {
  for (uint64_t v : values)
    if (v > static_cast<uint64_t>(INT_MAX)) return false;
  return true;
}

// Makes the context current, creates the queue's handle on first use (bound to its stream for
// good) and sets the math mode. The caller holds q->blas_mu.
kiln_status bind(kiln_queue_h q, uint32_t math_mode) {
  if (kiln_status s = make_current(q->dev)) return s;
  if (!q->blas) {
    cublasHandle_t h = nullptr;
    KILN_CUBLAS_CHECK(cublasCreate_v2, &h);
    if (cublasStatus_t st = cublas().cublasSetStream_v2(h, q->stream);
        st != CUBLAS_STATUS_SUCCESS) {
      cublas().cublasDestroy_v2(h);
      return blas_fail(st, "cublasSetStream_v2");
    }
    q->blas = h;
  }
  KILN_CUBLAS_CHECK(
      cublasSetMathMode, static_cast<cublasHandle_t>(q->blas),
      math_mode == KILN_BLAS_MATH_TF32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  return KILN_OK;
}

cublasOperation_t op(kiln_blas_op o) { return o == KILN_BLAS_OP_T ? CUBLAS_OP_T : CUBLAS_OP_N; }

template <class T>
const T* ptr(kiln_mem_ref r) {
  return reinterpret_cast<const T*>(dptr(r));
}

kiln_status gemm(kiln_queue_h q, const kiln_blas_gemm_desc* d) noexcept {
  if (!fits_int({d->m, d->n, d->k, d->lda, d->ldb, d->ldc, d->batch}))
    return set_error(KILN_ERR_INVALID_ARGUMENT, "cuBLAS gemm: a size exceeds INT_MAX");
  std::lock_guard<std::mutex> lock(q->blas_mu);
  if (kiln_status s = bind(q, d->dtype == KILN_DTYPE_F32 ? d->math_mode : KILN_BLAS_MATH_DEFAULT))
    return s;
  auto h = static_cast<cublasHandle_t>(q->blas);
  const int m = int(d->m), n = int(d->n), k = int(d->k), batch = int(d->batch);
  const auto sa = static_cast<long long>(d->stride_a), sb = static_cast<long long>(d->stride_b),
             sc = static_cast<long long>(d->stride_c);
  // Column-major: C^T (n x m) = op(B)^T (n x k) op(A)^T (k x m).
  if (d->dtype == KILN_DTYPE_F32) {
    KILN_CUBLAS_CHECK(cublasSgemmStridedBatched, h, op(d->trans_b), op(d->trans_a), n, m, k,
                      static_cast<const float*>(d->alpha), ptr<float>(d->b), int(d->ldb), sb,
                      ptr<float>(d->a), int(d->lda), sa, static_cast<const float*>(d->beta),
                      const_cast<float*>(ptr<float>(d->c)), int(d->ldc), sc, batch);
  } else if (d->dtype == KILN_DTYPE_F64) {
    KILN_CUBLAS_CHECK(cublasDgemmStridedBatched, h, op(d->trans_b), op(d->trans_a), n, m, k,
                      static_cast<const double*>(d->alpha), ptr<double>(d->b), int(d->ldb), sb,
                      ptr<double>(d->a), int(d->lda), sa, static_cast<const double*>(d->beta),
                      const_cast<double*>(ptr<double>(d->c)), int(d->ldc), sc, batch);
  } else if (d->dtype == KILN_DTYPE_F16 || d->dtype == KILN_DTYPE_BF16) {
    // Tensor cores, products accumulated in f32; alpha and beta are f32 (blas_abi.h).
    const cudaDataType t = d->dtype == KILN_DTYPE_F16 ? CUDA_R_16F : CUDA_R_16BF;
    KILN_CUBLAS_CHECK(cublasGemmStridedBatchedEx, h, op(d->trans_b), op(d->trans_a), n, m, k,
                      d->alpha, ptr<void>(d->b), t, int(d->ldb), sb, ptr<void>(d->a), t,
                      int(d->lda), sa, d->beta, const_cast<void*>(ptr<void>(d->c)), t, int(d->ldc),
                      sc, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  } else {
    return set_error(KILN_ERR_UNSUPPORTED, "cuBLAS gemm: only f32, f64, f16 and bf16");
  }
  return KILN_OK;
}

kiln_status gemv(kiln_queue_h q, const kiln_blas_gemv_desc* d) noexcept {
  if (!fits_int({d->m, d->n, d->lda}))
    return set_error(KILN_ERR_INVALID_ARGUMENT, "cuBLAS gemv: a size exceeds INT_MAX");
  std::lock_guard<std::mutex> lock(q->blas_mu);
  if (kiln_status s = bind(q, KILN_BLAS_MATH_DEFAULT)) return s;
  auto h = static_cast<cublasHandle_t>(q->blas);
  // Row-major A (m x n) is column-major A^T (n x m): op(A) = A runs as OP_T on it, and back.
  const cublasOperation_t t = d->trans == KILN_BLAS_OP_T ? CUBLAS_OP_N : CUBLAS_OP_T;
  const int rows = int(d->n), cols = int(d->m), lda = int(d->lda);
  if (d->dtype == KILN_DTYPE_F32) {
    KILN_CUBLAS_CHECK(cublasSgemv_v2, h, t, rows, cols, static_cast<const float*>(d->alpha),
                      ptr<float>(d->a), lda, ptr<float>(d->x), 1,
                      static_cast<const float*>(d->beta), const_cast<float*>(ptr<float>(d->y)), 1);
  } else if (d->dtype == KILN_DTYPE_F64) {
    KILN_CUBLAS_CHECK(cublasDgemv_v2, h, t, rows, cols, static_cast<const double*>(d->alpha),
                      ptr<double>(d->a), lda, ptr<double>(d->x), 1,
                      static_cast<const double*>(d->beta), const_cast<double*>(ptr<double>(d->y)),
                      1);
  } else {
    return set_error(KILN_ERR_UNSUPPORTED, "cuBLAS gemv: only f32 and f64");
  }
  return KILN_OK;
}

}  // namespace

kiln_status blas_fail(int status, const char* call) noexcept {
  const auto s = static_cast<cublasStatus_t>(status);
  const kiln_status k = s == CUBLAS_STATUS_ALLOC_FAILED    ? KILN_ERR_OUT_OF_MEMORY
                        : s == CUBLAS_STATUS_INVALID_VALUE ? KILN_ERR_INVALID_ARGUMENT
                        : s == CUBLAS_STATUS_NOT_SUPPORTED ? KILN_ERR_UNSUPPORTED
                        : s == CUBLAS_STATUS_ARCH_MISMATCH ? KILN_ERR_UNSUPPORTED
                                                           : KILN_ERR_BACKEND;
  return set_error(k, "%s failed: cuBLAS status %d", call, status);
}

bool blas_loaded() noexcept {
  try {
    return cublas().lib != nullptr;
  } catch (...) {  // std::bad_alloc building the name: no extension
    return false;
  }
}

bool blas_reduced_loaded() noexcept {
  return blas_loaded() && cublas().cublasGemmStridedBatchedEx != nullptr;
}

const void* blas_extension(const char* name, uint32_t version) noexcept {
  if (!kiln_plugin::is_op(name, KILN_BLAS_EXTENSION) || version != KILN_BLAS_VERSION ||
      !blas_loaded())
    return nullptr;
  return &cublas().table;
}

const char* blas_extension_list() noexcept { return blas_loaded() ? "blas/1" : ""; }

void blas_release(kiln_queue_s* q) noexcept {
  if (q->blas && cublas().lib) cublas().cublasDestroy_v2(static_cast<cublasHandle_t>(q->blas));
  q->blas = nullptr;
}

}  // namespace kiln_cuda
