// The CPU backend's "blas" extension: OpenBLAS (found at configure time; without it the CPU
// backend has no extension and kiln::linalg runs its portable kernel). Calls are queued on the
// queue's worker thread, in order with copies and launches; OpenBLAS threads each call itself.
#include "backends/cpu/cpu_backend.hpp"
#include "blas_abi.h"
#include "plugin_table.hpp"

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>

#include <climits>
#include <cstring>
#include <string>

namespace kiln::cpu {
namespace {

char* at(kiln_mem_ref r) { return static_cast<char*>(r.base) + r.offset; }

bool fits_int(std::initializer_list<uint64_t> values) {
  for (uint64_t v : values)
    if (v > static_cast<uint64_t>(INT_MAX)) return false;
  return true;
}

CBLAS_TRANSPOSE trans(kiln_blas_op op) { return op == KILN_BLAS_OP_T ? CblasTrans : CblasNoTrans; }

// One batch of products on the worker thread. alpha and beta were copied at enqueue time.
// k == 0 is C = beta * C, which BLAS libraries disagree on: done here.
template <class T>
void run_gemm(const kiln_blas_gemm_desc& d, T alpha, T beta) {
  const T* a = reinterpret_cast<const T*>(at(d.a));
  const T* b = reinterpret_cast<const T*>(at(d.b));
  T* c = reinterpret_cast<T*>(at(d.c));
  for (uint64_t i = 0; i < d.batch; ++i) {
    T* ci = c + i * d.stride_c;
    if (d.k == 0) {
      for (uint64_t r = 0; r < d.m; ++r)
        for (uint64_t j = 0; j < d.n; ++j) {
          T& v = ci[r * d.ldc + j];
          v = beta == T(0) ? T(0) : beta * v;
        }
      continue;
    }
    const int m = int(d.m), n = int(d.n), k = int(d.k);
    const int lda = int(d.lda), ldb = int(d.ldb), ldc = int(d.ldc);
    if constexpr (std::is_same_v<T, float>)
      cblas_sgemm(CblasRowMajor, trans(d.trans_a), trans(d.trans_b), m, n, k, alpha,
                  a + i * d.stride_a, lda, b + i * d.stride_b, ldb, beta, ci, ldc);
    else
      cblas_dgemm(CblasRowMajor, trans(d.trans_a), trans(d.trans_b), m, n, k, alpha,
                  a + i * d.stride_a, lda, b + i * d.stride_b, ldb, beta, ci, ldc);
  }
}

template <class T>
void run_gemv(const kiln_blas_gemv_desc& d, T alpha, T beta) {
  const T* a = reinterpret_cast<const T*>(at(d.a));
  const T* x = reinterpret_cast<const T*>(at(d.x));
  T* y = reinterpret_cast<T*>(at(d.y));
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemv(CblasRowMajor, trans(d.trans), int(d.m), int(d.n), alpha, a, int(d.lda), x, 1, beta,
                y, 1);
  else
    cblas_dgemv(CblasRowMajor, trans(d.trans), int(d.m), int(d.n), alpha, a, int(d.lda), x, 1, beta,
                y, 1);
}

template <class T, class Desc>
kiln_status enqueue(kiln_queue_h q, const Desc& d, void (*run)(const Desc&, T, T)) {
  T alpha, beta;
  std::memcpy(&alpha, d.alpha, sizeof(T));
  std::memcpy(&beta, d.beta, sizeof(T));
  q->q.push([d, alpha, beta, run] { run(d, alpha, beta); });
  return KILN_OK;
}

kiln_status gemm(kiln_queue_h q, const kiln_blas_gemm_desc* d) noexcept try {
  if (!fits_int({d->m, d->n, d->k, d->lda, d->ldb, d->ldc}))
    return fail(KILN_ERR_INVALID_ARGUMENT,
                "OpenBLAS gemm: a size or leading dimension exceeds "
                "INT_MAX (OpenBLAS built with 32-bit integers)");
  if (d->dtype == KILN_DTYPE_F32) return enqueue<float>(q, *d, run_gemm<float>);
  if (d->dtype == KILN_DTYPE_F64) return enqueue<double>(q, *d, run_gemm<double>);
  return fail(KILN_ERR_UNSUPPORTED, "OpenBLAS gemm: only f32 and f64");
} catch (const std::exception& e) {
  return fail(KILN_ERR_OUT_OF_MEMORY, std::string("OpenBLAS gemm: ") + e.what());
}

kiln_status gemv(kiln_queue_h q, const kiln_blas_gemv_desc* d) noexcept try {
  if (!fits_int({d->m, d->n, d->lda}))
    return fail(KILN_ERR_INVALID_ARGUMENT,
                "OpenBLAS gemv: a size or leading dimension exceeds "
                "INT_MAX (OpenBLAS built with 32-bit integers)");
  if (d->dtype == KILN_DTYPE_F32) return enqueue<float>(q, *d, run_gemv<float>);
  if (d->dtype == KILN_DTYPE_F64) return enqueue<double>(q, *d, run_gemv<double>);
  return fail(KILN_ERR_UNSUPPORTED, "OpenBLAS gemv: only f32 and f64");
} catch (const std::exception& e) {
  return fail(KILN_ERR_OUT_OF_MEMORY, std::string("OpenBLAS gemv: ") + e.what());
}

// OPENBLAS_VERSION is " OpenBLAS 0.3.21 ": trimmed once.
const std::string library_name = [] {
  std::string s = OPENBLAS_VERSION;
  s.erase(0, s.find_first_not_of(' '));
  s.erase(s.find_last_not_of(' ') + 1);
  return s;
}();

const kiln_blas_v1 blas_table = {
    {KILN_BLAS_VERSION, sizeof(kiln_blas_v1)}, library_name.c_str(), gemm, gemv};

}  // namespace

const void* blas_extension(const char* name, uint32_t version) noexcept {
  return kiln_plugin::is_op(name, KILN_BLAS_EXTENSION) && version == KILN_BLAS_VERSION ? &blas_table
                                                                                       : nullptr;
}
const char* blas_extension_list() noexcept { return "blas/1"; }
bool blas_supports(kiln_dtype t) noexcept { return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64; }

}  // namespace kiln::cpu

#else  // no OpenBLAS at configure time: no extension

namespace kiln::cpu {
const void* blas_extension(const char*, uint32_t) noexcept { return nullptr; }
const char* blas_extension_list() noexcept { return ""; }
bool blas_supports(kiln_dtype) noexcept { return false; }
}  // namespace kiln::cpu

#endif
