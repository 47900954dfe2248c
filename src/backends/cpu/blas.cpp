// The CPU backend's "blas" extension: OpenBLAS. cblas.h is found at configure time (types
// only); the library is loaded with dlopen on first need, never linked, so libkiln still loads
// where OpenBLAS is absent (a build folder carried to a GPU machine): the CPU backend then has
// no extension and kiln::linalg runs its portable kernel. Calls are queued on the queue's
// worker thread, in order with copies and launches; OpenBLAS threads each call itself.
#include "backends/cpu/cpu_backend.hpp"
#include "blas_abi.h"
#include "dl_library.hpp"
#include "plugin_table.hpp"

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>

namespace kiln::cpu {
namespace {

#define KILN_OPENBLAS_FUNCS(X) \
  X(cblas_sgemm)               \
  X(cblas_dgemm)               \
  X(cblas_sgemv)               \
  X(cblas_dgemv)               \
  X(openblas_get_config)

struct openblas_api {
  void* lib = nullptr;
  std::string library;  // "OpenBLAS 0.3.21"
  KILN_OPENBLAS_FUNCS(KILN_DL_MEMBER)
};

// $KILN_OPENBLAS_LIBRARY, else the Debian soname, else the plain name; loaded once.
const openblas_api& openblas() {
  static openblas_api api;
  static std::once_flag once;
  std::call_once(once, [] {
    api.lib =
        kiln_plugin::dl_open_first("KILN_OPENBLAS_LIBRARY", {"libopenblas.so.0", "libopenblas.so"});
    bool ok = api.lib != nullptr;
    KILN_OPENBLAS_FUNCS(KILN_DL_RESOLVE)
    if (!ok) {
      api.lib = nullptr;  // RTLD_NODELETE: stays mapped, unused
      return;
    }
    // openblas_get_config() is "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY ...": two words.
    std::istringstream config(api.openblas_get_config());
    std::string name, version;
    config >> name >> version;
    api.library = name + " " + version;
  });
  return api;
}

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
      openblas().cblas_sgemm(CblasRowMajor, trans(d.trans_a), trans(d.trans_b), m, n, k, alpha,
                             a + i * d.stride_a, lda, b + i * d.stride_b, ldb, beta, ci, ldc);
    else
      openblas().cblas_dgemm(CblasRowMajor, trans(d.trans_a), trans(d.trans_b), m, n, k, alpha,
                             a + i * d.stride_a, lda, b + i * d.stride_b, ldb, beta, ci, ldc);
  }
}

template <class T>
void run_gemv(const kiln_blas_gemv_desc& d, T alpha, T beta) {
  const T* a = reinterpret_cast<const T*>(at(d.a));
  const T* x = reinterpret_cast<const T*>(at(d.x));
  T* y = reinterpret_cast<T*>(at(d.y));
  if constexpr (std::is_same_v<T, float>)
    openblas().cblas_sgemv(CblasRowMajor, trans(d.trans), int(d.m), int(d.n), alpha, a, int(d.lda),
                           x, 1, beta, y, 1);
  else
    openblas().cblas_dgemv(CblasRowMajor, trans(d.trans), int(d.m), int(d.n), alpha, a, int(d.lda),
                           x, 1, beta, y, 1);
}

template <class T, class Desc>
kiln_status enqueue(kiln_queue_h q, const Desc& d, void (*run)(const Desc&, T, T)) {
  T alpha, beta;
  std::memcpy(&alpha, d.alpha, sizeof(T));
  std::memcpy(&beta, d.beta, sizeof(T));
  q->q.push([d, alpha, beta, run] { run(d, alpha, beta); });
  return KILN_OK;
}

// Checks what OpenBLAS's 32-bit integers can address, then queues the f32 or f64 run.
template <class Desc>
kiln_status submit(kiln_queue_h q, const Desc& d, const char* what,
                   std::initializer_list<uint64_t> sizes, void (*run_f)(const Desc&, float, float),
                   void (*run_d)(const Desc&, double, double)) noexcept try {
  if (!fits_int(sizes))
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "OpenBLAS %s: a size or leading dimension exceeds INT_MAX (OpenBLAS built "
                     "with 32-bit integers)",
                     what);
  if (d.dtype == KILN_DTYPE_F32) return enqueue<float>(q, d, run_f);
  if (d.dtype == KILN_DTYPE_F64) return enqueue<double>(q, d, run_d);
  return set_error(KILN_ERR_UNSUPPORTED, "OpenBLAS %s: only f32 and f64", what);
} catch (const std::exception& e) {
  return set_error(KILN_ERR_OUT_OF_MEMORY, "OpenBLAS %s: %s", what, e.what());
}

kiln_status gemm(kiln_queue_h q, const kiln_blas_gemm_desc* d) noexcept {
  return submit(q, *d, "gemm", {d->m, d->n, d->k, d->lda, d->ldb, d->ldc}, run_gemm<float>,
                run_gemm<double>);
}

kiln_status gemv(kiln_queue_h q, const kiln_blas_gemv_desc* d) noexcept {
  return submit(q, *d, "gemv", {d->m, d->n, d->lda}, run_gemv<float>, run_gemv<double>);
}

const kiln_blas_v1 blas_table = {{KILN_BLAS_VERSION, sizeof(kiln_blas_v1)}, nullptr, gemm, gemv};

bool loaded() noexcept {
  try {
    return openblas().lib != nullptr;
  } catch (...) {  // std::bad_alloc naming the library: no extension
    return false;
  }
}

}  // namespace

const void* blas_extension(const char* name, uint32_t version) noexcept {
  if (!kiln_plugin::is_op(name, KILN_BLAS_EXTENSION) || version != KILN_BLAS_VERSION || !loaded())
    return nullptr;
  static const kiln_blas_v1 table = [] {
    kiln_blas_v1 t = blas_table;
    t.library = openblas().library.c_str();
    return t;
  }();
  return &table;
}
const char* blas_extension_list() noexcept { return loaded() ? "blas/1" : ""; }
bool blas_supports(kiln_dtype t) noexcept {
  return (t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64) && loaded();
}

}  // namespace kiln::cpu

#else  // no OpenBLAS at configure time: no extension

namespace kiln::cpu {
const void* blas_extension(const char*, uint32_t) noexcept { return nullptr; }
const char* blas_extension_list() noexcept { return ""; }
bool blas_supports(kiln_dtype) noexcept { return false; }
}  // namespace kiln::cpu

#endif
