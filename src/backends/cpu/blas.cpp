// The CPU backend's "blas" extension: OpenBLAS. cblas.h is found at configure time (types
// only); the library is loaded with dlopen on first need, never linked, so libkiln still loads
// where OpenBLAS is absent (a build folder carried to a GPU machine): the CPU backend then has
// no extension and kiln::linalg runs its portable kernel. Calls are queued on the queue's
// worker thread, in order with copies and launches.
//
// Threads: Kiln owns them. OpenBLAS is set to one thread, and a GEMM is split into blocks of
// rows, of columns, of the batch, or of k (partial products summed here) that run over the CPU
// backend's pool, whose workers steal unfinished blocks. OpenBLAS's own threads busy-wait for
// each other: on a 2-core machine with two other busy processes a [32, 200000] x [200000, 16]
// product took 1.66 s instead of 13 ms (issue 24); one thread per call does not collapse, and
// the pool's stealing gives the blocks of a preempted worker to the others.
#include "backends/cpu/cpu_backend.hpp"
#include "blas_abi.h"
#include "dl_library.hpp"
#include "kiln/half.hpp"
#include "plugin_table.hpp"

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

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
  void (*set_num_threads)(int) = nullptr;  // openblas_set_num_threads, where exported
};

// OpenBLAS's destructor (run by exit() after every atexit handler) clears its kernel table, so a
// call still running on a queue thread when the process exits reads NULL (found in a core
// dump: a pool worker in cblas_dgemm while main was in exit()). An atexit handler registered
// when the library loads stops new calls and waits for the running ones; a call that would
// start after it parks its thread until the process is gone (nobody reads its result).
struct exit_guard {
  std::atomic<int> active{0};
  std::atomic<bool> closing{false};
};
exit_guard& guard() {
  static auto* g = new exit_guard;  // never destroyed: queue threads may outlive static dtors
  return *g;
}
struct blas_call {
  blas_call() {
    exit_guard& g = guard();
    g.active.fetch_add(1);
    while (g.closing.load()) {
      g.active.fetch_sub(1);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
  }
  ~blas_call() { guard().active.fetch_sub(1); }
  blas_call(const blas_call&) = delete;
  blas_call& operator=(const blas_call&) = delete;
};
void quiesce_at_exit() {
  exit_guard& g = guard();
  g.closing.store(true);
  while (g.active.load() > 0) std::this_thread::yield();
}

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
    std::atexit(quiesce_at_exit);  // after OpenBLAS's constructor, so before its destructor
    // One OpenBLAS thread per call: Kiln's pool runs the calls in parallel (see the top).
    api.set_num_threads =
        reinterpret_cast<void (*)(int)>(dlsym(api.lib, "openblas_set_num_threads"));
    if (api.set_num_threads) api.set_num_threads(1);
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

// One product of a block: rows [r0, r1) and columns [c0, c1) of C over k-range [p0, p1), into
// C (ldc) with beta. Row-major offsets into A (m x k, or k x m when transposed) and B.
template <class T>
void block_gemm(const kiln_blas_gemm_desc& d, const T* a, const T* b, T* c, std::uint64_t ldc,
                T alpha, T beta, std::uint64_t r0, std::uint64_t r1, std::uint64_t c0,
                std::uint64_t c1, std::uint64_t p0, std::uint64_t p1) {
  const bool ta = d.trans_a == KILN_BLAS_OP_T, tb = d.trans_b == KILN_BLAS_OP_T;
  const T* ab = a + (ta ? p0 * d.lda + r0 : r0 * d.lda + p0);
  const T* bb = b + (tb ? c0 * d.ldb + p0 : p0 * d.ldb + c0);
  const int m = int(r1 - r0), n = int(c1 - c0), k = int(p1 - p0);
  const blas_call in_blas;
  if constexpr (std::is_same_v<T, float>)
    openblas().cblas_sgemm(CblasRowMajor, trans(d.trans_a), trans(d.trans_b), m, n, k, alpha, ab,
                           int(d.lda), bb, int(d.ldb), beta, c + r0 * ldc + c0, int(ldc));
  else
    openblas().cblas_dgemm(CblasRowMajor, trans(d.trans_a), trans(d.trans_b), m, n, k, alpha, ab,
                           int(d.lda), bb, int(d.ldb), beta, c + r0 * ldc + c0, int(ldc));
}

// The split of one product over the pool: blocks of rows, else of columns, else of k (each
// into its own partial C, summed after), else none. Blocks are at least `min_side` wide and
// there are a few per pool thread, so stealing evens out a preempted worker.
struct split {
  enum kind_t { none, rows, cols, depth } kind = none;
  std::uint64_t parts = 1;
};
split plan(const kiln_blas_gemm_desc& d, unsigned threads) {
  constexpr std::uint64_t min_side = 32, min_depth = 4096, per_thread = 4;
  const double flops = 2.0 * double(d.m) * double(d.n) * double(d.k);
  if (threads < 2 || flops < 4e6) return {};  // below ~1 ms of one core: one call
  const std::uint64_t want = std::uint64_t(threads) * per_thread;
  auto pieces = [&](std::uint64_t len, std::uint64_t least) { return std::min(want, len / least); };
  if (pieces(d.m, min_side) >= threads) return {split::rows, pieces(d.m, min_side)};
  if (pieces(d.n, min_side) >= threads) return {split::cols, pieces(d.n, min_side)};
  if (pieces(d.k, min_depth) >= threads) return {split::depth, pieces(d.k, min_depth)};
  return {};
}

// The products on the queue's worker thread, over the pool. alpha and beta were copied at
// enqueue time. k == 0 is C = beta * C, which BLAS libraries disagree on: done here.
template <class T>
void run_gemm(const kiln_blas_gemm_desc& d, T alpha, T beta) {
  const T* a = reinterpret_cast<const T*>(at(d.a));
  const T* b = reinterpret_cast<const T*>(at(d.b));
  T* c = reinterpret_cast<T*>(at(d.c));
  if (d.k == 0) {
    for (uint64_t i = 0; i < d.batch; ++i)
      for (uint64_t r = 0; r < d.m; ++r)
        for (uint64_t j = 0; j < d.n; ++j) {
          T& v = c[i * d.stride_c + r * d.ldc + j];
          v = beta == T(0) ? T(0) : beta * v;
        }
    return;
  }
  thread_pool& tp = pool();
  const auto whole = [&](uint64_t i, uint64_t r0, uint64_t r1, uint64_t c0, uint64_t c1) {
    block_gemm(d, a + i * d.stride_a, b + i * d.stride_b, c + i * d.stride_c, d.ldc, alpha, beta,
               r0, r1, c0, c1, 0, d.k);
  };
  if (d.batch >= tp.size()) {  // a batch: one product per task
    tp.run(d.batch, [&](uint64_t i) { whole(i, 0, d.m, 0, d.n); });
    return;
  }
  const split s = plan(d, tp.size());
  for (uint64_t i = 0; i < d.batch; ++i) {
    auto bound = [&](uint64_t len, uint64_t part) { return len * part / s.parts; };
    switch (s.kind) {
      case split::none: whole(i, 0, d.m, 0, d.n); break;
      case split::rows:
        tp.run(s.parts, [&](uint64_t t) { whole(i, bound(d.m, t), bound(d.m, t + 1), 0, d.n); });
        break;
      case split::cols:
        tp.run(s.parts, [&](uint64_t t) { whole(i, 0, d.m, bound(d.n, t), bound(d.n, t + 1)); });
        break;
      case split::depth: {
        // Partial products of k-blocks, then C = sum + beta C in the blocks' fixed order.
        std::vector<T> part(s.parts * d.m * d.n);
        tp.run(s.parts, [&](uint64_t t) {
          block_gemm(d, a + i * d.stride_a, b + i * d.stride_b, part.data() + t * d.m * d.n, d.n,
                     alpha, T(0), 0, d.m, 0, d.n, bound(d.k, t), bound(d.k, t + 1));
        });
        T* ci = c + i * d.stride_c;
        for (uint64_t r = 0; r < d.m; ++r)
          for (uint64_t j = 0; j < d.n; ++j) {
            T sum = 0;
            for (uint64_t t = 0; t < s.parts; ++t) sum += part[(t * d.m + r) * d.n + j];
            T& v = ci[r * d.ldc + j];
            v = beta == T(0) ? sum : sum + beta * v;
          }
        break;
      }
    }
  }
}

// 16-bit products (f16, bf16), as cuBLAS computes them: f32 products and sums, the result
// rounded to nearest even once. OpenBLAS has no f16 GEMM (and its bf16 sbgemm is not in every
// build), so each product's operands are widened to f32 (O(mk + kn) work beside the O(mnk)
// product), multiplied by run_gemm<float> over the pool, and C narrowed back. Before, these
// took the portable kernel: 1024^3 in bf16 at 1/24 and in f16 at 1/90 of f32's speed.
struct widened_sizes {
  std::uint64_t a_rows, a_cols, b_rows, b_cols;
  std::uint64_t total() const { return a_rows * a_cols + b_rows * b_cols; }
};
widened_sizes widened(const kiln_blas_gemm_desc& d) {
  const bool ta = d.trans_a == KILN_BLAS_OP_T, tb = d.trans_b == KILN_BLAS_OP_T;
  return {ta ? d.k : d.m, ta ? d.m : d.k, tb ? d.n : d.k, tb ? d.k : d.n};
}

// n 16-bit values widened to f32 (a loop the compiler vectorises: kiln::half's conversion has
// no branches).
template <class H>
void widen_run(const H* from, float* to, std::uint64_t n) {
  for (std::uint64_t j = 0; j < n; ++j) to[j] = float(from[j]);
}

// scratch: widened(d).total() + m n floats, allocated when the call is queued (enqueue16).
template <class H>
void run_gemm16(const kiln_blas_gemm_desc& d, float alpha, float beta, float* scratch) {
  const auto [a_rows, a_cols, b_rows, b_cols] = widened(d);
  float* const a32 = scratch;
  float* const b32 = a32 + a_rows * a_cols;
  float* const c32 = b32 + b_rows * b_cols;
  kiln_blas_gemm_desc f = d;
  f.dtype = KILN_DTYPE_F32;
  f.lda = a_cols;
  f.ldb = b_cols;
  f.ldc = d.n;
  f.batch = 1;
  f.stride_a = f.stride_b = f.stride_c = 0;
  f.a = {a32, 0};
  f.b = {b32, 0};
  f.c = {c32, 0};
  thread_pool& tp = pool();
  // Rows [r0, r1) of a rows x cols matrix with leading dimension ld, in pieces over the pool.
  const auto rows = [&](std::uint64_t n_rows, std::uint64_t cols, auto&& row) {
    const std::uint64_t parts =
        std::min<std::uint64_t>(n_rows, std::max<std::uint64_t>(1, n_rows * cols / (1u << 16)));
    tp.run(parts, [&](std::uint64_t t) {
      for (std::uint64_t r = n_rows * t / parts; r < n_rows * (t + 1) / parts; ++r) row(r);
    });
  };
  const auto widen = [&](const H* from, std::uint64_t ld, float* to, std::uint64_t n_rows,
                         std::uint64_t cols) {
    rows(n_rows, cols, [&](std::uint64_t r) { widen_run(from + r * ld, to + r * cols, cols); });
  };
  const H* a = reinterpret_cast<const H*>(at(d.a));
  const H* b = reinterpret_cast<const H*>(at(d.b));
  H* c = reinterpret_cast<H*>(at(d.c));
  for (std::uint64_t i = 0; i < d.batch; ++i) {
    widen(a + i * d.stride_a, d.lda, a32, a_rows, a_cols);
    widen(b + i * d.stride_b, d.ldb, b32, b_rows, b_cols);
    H* ci = c + i * d.stride_c;
    if (beta != 0.f) widen(ci, d.ldc, c32, d.m, d.n);  // beta == 0: C may hold NaN
    run_gemm<float>(f, alpha, beta);
    rows(d.m, d.n, [&](std::uint64_t r) {
      for (std::uint64_t j = 0; j < d.n; ++j) ci[r * d.ldc + j] = H(c32[r * d.n + j]);
    });
  }
}

template <class T>
void run_gemv(const kiln_blas_gemv_desc& d, T alpha, T beta) {
  const T* a = reinterpret_cast<const T*>(at(d.a));
  const T* x = reinterpret_cast<const T*>(at(d.x));
  T* y = reinterpret_cast<T*>(at(d.y));
  const blas_call in_blas;
  if constexpr (std::is_same_v<T, float>)
    openblas().cblas_sgemv(CblasRowMajor, trans(d.trans), int(d.m), int(d.n), alpha, a, int(d.lda),
                           x, 1, beta, y, 1);
  else
    openblas().cblas_dgemv(CblasRowMajor, trans(d.trans), int(d.m), int(d.n), alpha, a, int(d.lda),
                           x, 1, beta, y, 1);
}

// 16-bit GEMV: memory-bound, so A is widened a block of rows at a time into an L2-sized f32
// buffer per task (A is read from memory once), and each block goes to sgemv. y = A x: the
// tasks own row ranges of y. y = A^T x: the tasks sum row ranges of A into partial y's, added in
// task order (the same result every run), then alpha, beta and one rounding.
struct gemv16_plan {
  std::uint64_t in;     // x's length: x32 is the scratch's first `in` floats
  std::uint64_t block;  // rows of A per sgemv, widened into an L2-sized buffer
  std::uint64_t parts;  // tasks: no more than blocks, so each has at least one row
  std::uint64_t part;   // floats per task: its A block, then its y (a block's, or a partial y)
  std::uint64_t floats() const { return in + parts * part; }
};
gemv16_plan plan16(const kiln_blas_gemv_desc& d) {
  const bool trans = d.trans == KILN_BLAS_OP_T;
  const std::uint64_t block =
      std::max<std::uint64_t>(1, (64u << 10) / 4 / std::max<std::uint64_t>(d.n, 1));
  const std::uint64_t parts =
      std::clamp<std::uint64_t>((d.m + block - 1) / block, 1, 2 * pool().size());
  return {trans ? d.m : d.n, block, parts, block * d.n + (trans ? d.n : block)};
}

// scratch: p.floats(), allocated when the call is queued (as run_gemm16's).
template <class H>
void run_gemv16(const kiln_blas_gemv_desc& d, const gemv16_plan& p, float alpha, float beta,
                float* scratch) {
  const bool trans = d.trans == KILN_BLAS_OP_T;
  const H* a = reinterpret_cast<const H*>(at(d.a));
  const H* x = reinterpret_cast<const H*>(at(d.x));
  H* y = reinterpret_cast<H*>(at(d.y));
  float* const x32 = scratch;
  widen_run(x, x32, p.in);
  thread_pool& tp = pool();
  tp.run(p.parts, [&](std::uint64_t t) {
    float* const a32 = scratch + p.in + t * p.part;
    float* const y32 = a32 + p.block * d.n;  // the block's y (N) or the task's partial y (T)
    const std::uint64_t r0 = d.m * t / p.parts, r1 = d.m * (t + 1) / p.parts;
    const blas_call in_blas;
    for (std::uint64_t b0 = r0; b0 < r1; b0 += p.block) {
      const std::uint64_t rows = std::min(p.block, r1 - b0);
      for (std::uint64_t r = 0; r < rows; ++r) widen_run(a + (b0 + r) * d.lda, a32 + r * d.n, d.n);
      if (!trans) {
        for (std::uint64_t r = 0; r < rows; ++r) y32[r] = beta != 0.f ? float(y[b0 + r]) : 0.f;
        openblas().cblas_sgemv(CblasRowMajor, CblasNoTrans, int(rows), int(d.n), alpha, a32,
                               int(d.n), x32, 1, beta, y32, 1);
        for (std::uint64_t r = 0; r < rows; ++r) y[b0 + r] = H(y32[r]);
      } else {
        openblas().cblas_sgemv(CblasRowMajor, CblasTrans, int(rows), int(d.n), 1.f, a32, int(d.n),
                               x32 + b0, 1, b0 == r0 ? 0.f : 1.f, y32, 1);
      }
    }
  });
  if (!trans) return;
  const std::uint64_t pieces =
      std::min<std::uint64_t>(tp.size(), std::max<std::uint64_t>(1, d.n / 1024));
  tp.run(pieces, [&](std::uint64_t t) {
    for (std::uint64_t j = d.n * t / pieces; j < d.n * (t + 1) / pieces; ++j) {
      float sum = 0.f;
      for (std::uint64_t k = 0; k < p.parts; ++k)
        sum += scratch[p.in + k * p.part + p.block * d.n + j];
      y[j] = H(beta != 0.f ? alpha * sum + beta * float(y[j]) : alpha * sum);
    }
  });
}

// The 16-bit runs: f32 alpha and beta (blas_abi.h), and their f32 scratch allocated here, when
// the call is queued, so that memory running out is the caller's KILN_ERR_OUT_OF_MEMORY.
// A descriptor's alpha and beta, host values of type T.
template <class T, class Desc>
std::pair<T, T> scalars_of(const Desc& d) {
  T alpha, beta;
  std::memcpy(&alpha, d.alpha, sizeof(T));
  std::memcpy(&beta, d.beta, sizeof(T));
  return {alpha, beta};
}

template <class H>
kiln_status enqueue16(kiln_queue_h q, const kiln_blas_gemm_desc& d) {
  const auto [alpha, beta] = scalars_of<float>(d);
  auto scratch = std::make_shared<std::vector<float>>(widened(d).total() + d.m * d.n);
  q->q.push([d, alpha, beta, scratch] { run_gemm16<H>(d, alpha, beta, scratch->data()); });
  return KILN_OK;
}
template <class H>
kiln_status enqueue16(kiln_queue_h q, const kiln_blas_gemv_desc& d) {
  const auto [alpha, beta] = scalars_of<float>(d);
  const gemv16_plan p = plan16(d);
  auto scratch = std::make_shared<std::vector<float>>(p.floats());
  q->q.push([d, p, alpha, beta, scratch] { run_gemv16<H>(d, p, alpha, beta, scratch->data()); });
  return KILN_OK;
}

template <class T, class Desc>
kiln_status enqueue(kiln_queue_h q, const Desc& d, void (*run)(const Desc&, T, T)) {
  const auto [alpha, beta] = scalars_of<T>(d);
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
  if (d.dtype == KILN_DTYPE_F16) return enqueue16<kiln::half>(q, d);
  if (d.dtype == KILN_DTYPE_BF16) return enqueue16<kiln::bfloat16>(q, d);
  return set_error(KILN_ERR_UNSUPPORTED, "OpenBLAS %s: f32, f64, f16 and bf16 only", what);
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

const kiln_blas_v1 blas_table = {
    {KILN_BLAS_VERSION, sizeof(kiln_blas_v1)}, nullptr, gemm, gemv, nullptr};

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
// GEMM: f32 and f64 through OpenBLAS, f16 and bf16 widened to f32 for it (run_gemm16).
bool blas_supports(kiln_dtype t) noexcept {
  return (t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_F16 ||
          t == KILN_DTYPE_BF16) &&
         loaded();
}

}  // namespace kiln::cpu

#else  // no OpenBLAS at configure time: no extension

namespace kiln::cpu {
const void* blas_extension(const char*, uint32_t) noexcept { return nullptr; }
const char* blas_extension_list() noexcept { return ""; }
bool blas_supports(kiln_dtype) noexcept { return false; }
}  // namespace kiln::cpu

#endif
