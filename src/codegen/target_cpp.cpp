// Host C++ compiled to a shared object. A kernel body runs once per work-item inside a loop
// over the work-groups one call is given; the item's indices travel as the body's hidden
// kiln_item parameter, so after inlining they live in registers and the loop vectorises.
// Barriers and local memory are not supported here (the core refuses them before compiling).
#include "codegen/reduced_float.hpp"
#include "codegen/target.hpp"

namespace kiln::codegen {
using kernel_lang::kernel_decl;
namespace {

const char* prelude_base = R"KILN(
#include <stddef.h>
#include <stdint.h>
#define KILN_BACKEND_CPU 1
#define KILN_KERNEL static inline __attribute__((always_inline))
#define KILN_FUNC static inline
#define KILN_GLOBAL
#define KILN_RESTRICT __restrict__
struct kiln_range_t { uint64_t n[3]; };
struct kiln_item { uint64_t gid[3], lid[3], grp[3], lsz[3], ngr[3], gsz[3]; };
struct kiln_cpu_launch { uint32_t dims; uint32_t local[3]; uint64_t groups[3]; };
#define kiln_global_id(d) (kiln__it.gid[d])
#define kiln_local_id(d) (kiln__it.lid[d])
#define kiln_group_id(d) (kiln__it.grp[d])
#define kiln_local_size(d) (kiln__it.lsz[d])
#define kiln_num_groups(d) (kiln__it.ngr[d])
#define kiln_global_size(d) (kiln__it.gsz[d])
#define kiln_mem_fence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
namespace kiln_math {
#define KILN__F1(name, fb, db) \
  static inline float name(float x) { return fb(x); } \
  static inline double name(double x) { return db(x); }
KILN__F1(sqrt, __builtin_sqrtf, __builtin_sqrt)
KILN__F1(exp, __builtin_expf, __builtin_exp)
KILN__F1(exp2, __builtin_exp2f, __builtin_exp2)
KILN__F1(log, __builtin_logf, __builtin_log)
KILN__F1(log2, __builtin_log2f, __builtin_log2)
KILN__F1(sin, __builtin_sinf, __builtin_sin)
KILN__F1(cos, __builtin_cosf, __builtin_cos)
KILN__F1(tan, __builtin_tanf, __builtin_tan)
KILN__F1(tanh, __builtin_tanhf, __builtin_tanh)
KILN__F1(erf, __builtin_erff, __builtin_erf)
KILN__F1(floor, __builtin_floorf, __builtin_floor)
KILN__F1(ceil, __builtin_ceilf, __builtin_ceil)
KILN__F1(trunc, __builtin_truncf, __builtin_trunc)
KILN__F1(round, __builtin_roundf, __builtin_round)
KILN__F1(fabs, __builtin_fabsf, __builtin_fabs)
static inline float rsqrt(float x) { return 1.0f / __builtin_sqrtf(x); }
static inline double rsqrt(double x) { return 1.0 / __builtin_sqrt(x); }
static inline float pow(float x, float y) { return __builtin_powf(x, y); }
static inline double pow(double x, double y) { return __builtin_pow(x, y); }
static inline float fmin(float x, float y) { return __builtin_fminf(x, y); }
static inline double fmin(double x, double y) { return __builtin_fmin(x, y); }
static inline float fmax(float x, float y) { return __builtin_fmaxf(x, y); }
static inline double fmax(double x, double y) { return __builtin_fmax(x, y); }
static inline float fma(float x, float y, float z) { return __builtin_fmaf(x, y, z); }
static inline double fma(double x, double y, double z) { return __builtin_fma(x, y, z); }
template <class T> static inline T min(T a, T b) { return b < a ? b : a; }
template <class T> static inline T max(T a, T b) { return a < b ? b : a; }
static inline int abs(int x) { return x < 0 ? -x : x; }
static inline long abs(long x) { return x < 0 ? -x : x; }
static inline long long abs(long long x) { return x < 0 ? -x : x; }
static inline float abs(float x) { return __builtin_fabsf(x); }
static inline double abs(double x) { return __builtin_fabs(x); }
}  // namespace kiln_math
using namespace kiln_math;
// Work-groups run in parallel on several threads: atomics are real (relaxed) atomics.
// The value converts to the pointee type, as with the GPU overloads (kiln_atomic_add(p, 1)).
template <class T, class V> static inline T kiln_atomic_add(T* p, V v) { return __atomic_fetch_add(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class V> static inline T kiln_atomic_sub(T* p, V v) { return __atomic_fetch_sub(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class V> static inline T kiln_atomic_and(T* p, V v) { return __atomic_fetch_and(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class V> static inline T kiln_atomic_or(T* p, V v) { return __atomic_fetch_or(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class V> static inline T kiln_atomic_xor(T* p, V v) { return __atomic_fetch_xor(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class V> static inline T kiln_atomic_xchg(T* p, V v) { return __atomic_exchange_n(p, (T)v, __ATOMIC_RELAXED); }
template <class T, class E, class D> static inline T kiln_atomic_cas(T* p, E e, D d) {
  T old = (T)e;
  __atomic_compare_exchange_n(p, &old, (T)d, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return old;
}
template <class T, class F> static inline T kiln__atomic_update(T* p, F f) {
  T old = __atomic_load_n(p, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(p, &old, f(old), true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {}
  return old;
}
template <class T, class V> static inline T kiln_atomic_min(T* p, V w) { const T v = (T)w; return kiln__atomic_update(p, [v](T o) { return v < o ? v : o; }); }
template <class T, class V> static inline T kiln_atomic_max(T* p, V w) { const T v = (T)w; return kiln__atomic_update(p, [v](T o) { return o < v ? v : o; }); }
#define KILN__ATOMIC_FLOAT(T, I)                                                      \
  template <class V> static inline T kiln_atomic_add(T* p, V w) {                    \
    const T v = (T)w;                                                                 \
    I* q = reinterpret_cast<I*>(p);                                                   \
    I old = __atomic_load_n(q, __ATOMIC_RELAXED), want;                              \
    do { T f; __builtin_memcpy(&f, &old, sizeof f); f += v; __builtin_memcpy(&want, &f, sizeof f); } \
    while (!__atomic_compare_exchange_n(q, &old, want, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)); \
    T r; __builtin_memcpy(&r, &old, sizeof r); return r;                              \
  }
KILN__ATOMIC_FLOAT(float, uint32_t)
KILN__ATOMIC_FLOAT(double, uint64_t)
static inline uint32_t kiln__as_uint(float f) { uint32_t u; __builtin_memcpy(&u, &f, 4); return u; }
static inline float kiln__as_float(uint32_t u) { float f; __builtin_memcpy(&f, &u, 4); return f; }
)KILN";
// The part after the 16-bit float types (reduced_float.hpp), which use the definitions above.
const char* prelude_tail = R"KILN(
// Runs every work-item of groups [g0, g1) (linear group index) that lies inside the range.
template <class F>
static inline void kiln__run(const kiln_cpu_launch* L, const kiln_range_t& r, uint64_t g0, uint64_t g1, F f) {
  kiln_item it;
  for (int d = 0; d < 3; ++d) { it.lsz[d] = L->local[d]; it.ngr[d] = L->groups[d]; it.gsz[d] = r.n[d]; }
  for (int d = 1; d < 3; ++d) { it.gid[d] = 0; it.lid[d] = 0; it.grp[d] = 0; }
  if (L->dims == 1) {
    const uint64_t ls = L->local[0], n = r.n[0];
    for (uint64_t g = g0; g < g1; ++g) {
      const uint64_t base = g * ls, end = base + ls < n ? base + ls : n;
      it.grp[0] = g;
      for (uint64_t i = base; i < end; ++i) { it.gid[0] = i; it.lid[0] = i - base; f(it); }
    }
    return;
  }
  for (uint64_t g = g0; g < g1; ++g) {
    it.grp[0] = g % L->groups[0];
    it.grp[1] = (g / L->groups[0]) % L->groups[1];
    it.grp[2] = g / (L->groups[0] * L->groups[1]);
    for (uint64_t z = 0; z < L->local[2]; ++z) {
      it.lid[2] = z; it.gid[2] = it.grp[2] * L->local[2] + z;
      if (it.gid[2] >= r.n[2]) break;
      for (uint64_t y = 0; y < L->local[1]; ++y) {
        it.lid[1] = y; it.gid[1] = it.grp[1] * L->local[1] + y;
        if (it.gid[1] >= r.n[1]) break;
        const uint64_t base = it.grp[0] * L->local[0];
        for (uint64_t x = 0; x < L->local[0] && base + x < r.n[0]; ++x) {
          it.lid[0] = x; it.gid[0] = base + x; f(it);
        }
      }
    }
  }
}
)KILN";
const std::string prelude_text = std::string(prelude_base) + reduced_float_text + prelude_tail;

void emit_entry(std::string& out, const kernel_decl& k, bool checked) {
  out += "extern \"C\" __attribute__((visibility(\"default\"))) void " + cpu_entry_name(k.name) +
         "(void* const* kiln__a, const kiln_cpu_launch* kiln__L, uint64_t kiln__g0, "
         "uint64_t kiln__g1) {\n";
  std::size_t i = 0;
  for (; i < k.params.size(); ++i) {
    const std::string p = "kiln__p" + std::to_string(i);
    out += "  " + k.param_types[i] + " " + p + "; __builtin_memcpy(&" + p + ", kiln__a[" +
           std::to_string(i) + "], sizeof " + p + ");\n";
  }
  out += "  kiln_range_t kiln__r; __builtin_memcpy(&kiln__r, kiln__a[" + std::to_string(i) +
         "], sizeof kiln__r);\n";
  // Checked mode: the launcher passes the counts, then the error buffer, after the range.
  if (checked) {
    std::size_t at = i + 1;
    for (std::size_t j = 0; j < k.params.size(); ++j) {
      if (!k.params[j].is_pointer) continue;
      const std::string n = "kiln__n" + std::to_string(j);
      out += "  uint64_t " + n + "; __builtin_memcpy(&" + n + ", kiln__a[" + std::to_string(at++) +
             "], sizeof " + n + ");\n";
    }
    out += "  uint64_t* kiln__err; __builtin_memcpy(&kiln__err, kiln__a[" + std::to_string(at) +
           "], sizeof kiln__err);\n";
  }
  out +=
      "  kiln__run(kiln__L, kiln__r, kiln__g0, kiln__g1, [&](const "
      "kiln_item& kiln__it) __attribute__((always_inline)) { " +
      body_name(k.name) + "(kiln__it";
  if (checked) out += ", " + checked_args(k);
  for (i = 0; i < k.params.size(); ++i) out += ", kiln__p" + std::to_string(i);
  out += "); });\n}\n";
}

// Checked mode (kernel_lang/checked_access.hpp): the address of p[i], or, out of range, the
// first violation recorded and a dummy slot of the error buffer.
const char* checked_prelude = R"KILN(
template <class T>
static inline T* kiln__ck(T* p, uint64_t i, uint64_t n, uint64_t* err, uint32_t arg, uint32_t line) {
  if (__builtin_expect(i < n, 1)) return p + i;
  uint64_t unset = 0;
  if (__atomic_compare_exchange_n(err, &unset, 1, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    err[1] = arg; err[2] = i; err[3] = line;
  }
  return (T*)(err + 6);
}
)KILN";

// CPU: one lane, host atomics. A handler that calls kiln_trap() throws; the loop catches it and
// reports the unit as trapped, as a GPU reports a trapped kernel.
const char* ring_primitives = R"KILN(
#include <time.h>
#define KILN_RING_LANES 1u
#define KILN_RING_STAGED 0
#define KILN_RING_DEVICE static inline
#define KILN_RING_MEMBER inline
#define KILN_RING_LANE 0u
KILN_RING_DEVICE uint64_t kiln_ring_load_acquire(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
KILN_RING_DEVICE uint64_t kiln_ring_load_relaxed(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
KILN_RING_DEVICE void kiln_ring_store_release(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELEASE); }
KILN_RING_DEVICE void kiln_ring_store_relaxed(uint64_t* p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
KILN_RING_DEVICE void kiln_ring_fence() { __atomic_thread_fence(__ATOMIC_ACQ_REL); }
KILN_RING_DEVICE uint64_t kiln_ring_dev_load(const uint64_t* p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }
KILN_RING_DEVICE uint64_t kiln_ring_dev_add(uint64_t* p, uint64_t v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
KILN_RING_DEVICE void kiln_ring_dev_sub(uint64_t* p, uint64_t v) { __atomic_fetch_sub(p, v, __ATOMIC_RELEASE); }
KILN_RING_DEVICE void kiln_ring_sleep(uint64_t ns) {
  if (ns == 0) return;
  struct timespec t = {0, (long)ns}; nanosleep(&t, 0); }
KILN_RING_DEVICE uint64_t kiln_ring_now_ns() {
  struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec; }
KILN_RING_DEVICE void kiln_ring_sync() {}
KILN_RING_DEVICE uint64_t kiln_ring_bcast(uint64_t v) { return v; }
KILN_RING_DEVICE uint32_t kiln_ring_run(bool ok) { return ok ? 1u : 0u; }
struct kiln_ring_trapped {};
#define kiln_trap() throw kiln_ring_trapped()
)KILN";

// A unit is a host thread with its own single-item launch; handlers read the slots in place.
std::string open_ring_entry(std::uint64_t) {
  return "  const uint32_t unit = cpu_unit;\n  unsigned char* staging = 0;\n";
}
const ring_ops ring = {1, ring_primitives, open_ring_entry, true};

}  // namespace

const target cpp_target = {.name = "cpp",
                           .prelude = prelude_text.c_str(),
                           .body_param = "const kiln_item& kiln__it",
                           .emit_entry = emit_entry,
                           .checked_prelude = checked_prelude,
                           .ring = &ring};

namespace {
const target_registration registered{cpp_target};
}  // namespace

}  // namespace kiln::codegen
