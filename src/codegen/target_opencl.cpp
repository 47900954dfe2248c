// OpenCL C 1.2 for the driver's compiler (clBuildProgram). Kernels are their own entry points
// (__local variables may only live in a kernel function): each buffer parameter arrives as a
// cl_mem plus a byte offset, each scalar in a type OpenCL allows as a kernel argument (bool and
// size_t are not), and the launch range as a struct; the prologue rebuilds the user's
// parameters and returns for items outside the range. Overloads use clang's (and NVIDIA's)
// __attribute__((overloadable)).
#include <cctype>
#include <string>

#include "codegen/reduced_float.hpp"
#include "codegen/target.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln::codegen {
using kernel_lang::kernel_decl;
namespace {

const char* prelude_base = R"KILN(
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#endif
#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable
typedef char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long int64_t;
typedef uchar uint8_t;
typedef ushort uint16_t;
typedef uint uint32_t;
typedef ulong uint64_t;
#define KILN_BACKEND_OPENCL 1
#define KILN_KERNEL __kernel
#define KILN_FUNC static inline
#define KILN_GLOBAL __global
#define KILN_LOCAL __local
#define KILN_RESTRICT restrict
#define KILN_OVL __attribute__((overloadable)) static inline
typedef struct { ulong n[3]; } kiln_range_t;
#define kiln_local_id(d) ((uint64_t)get_local_id(d))
#define kiln_group_id(d) ((uint64_t)get_group_id(d))
#define kiln_local_size(d) ((uint64_t)get_local_size(d))
#define kiln_num_groups(d) ((uint64_t)get_num_groups(d))
#define kiln_global_id(d) ((uint64_t)get_global_id(d))
#define kiln_global_size(d) (kiln__range.n[d])
#define kiln_barrier() barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE)
#ifdef KILN_OPENCL_NVIDIA
/* OpenCL 1.2's mem_fence orders accesses for the work-item only; look-back protocols need a
   device-wide fence, which NVIDIA's compiler gives through inline PTX. */
#define kiln_mem_fence() __asm__ volatile("membar.gl;" ::: "memory")
#else
#define kiln_mem_fence() mem_fence(CLK_GLOBAL_MEM_FENCE)
#endif
/* abs() of OpenCL returns the unsigned type; Kiln's keeps the argument's type. */
KILN_OVL int8_t kiln__abs(int8_t x) { return x < 0 ? -x : x; }
KILN_OVL int16_t kiln__abs(int16_t x) { return x < 0 ? -x : x; }
KILN_OVL int32_t kiln__abs(int32_t x) { return x < 0 ? -x : x; }
KILN_OVL int64_t kiln__abs(int64_t x) { return x < 0 ? -x : x; }
KILN_OVL uint8_t kiln__abs(uint8_t x) { return x; }
KILN_OVL uint16_t kiln__abs(uint16_t x) { return x; }
KILN_OVL uint32_t kiln__abs(uint32_t x) { return x; }
KILN_OVL uint64_t kiln__abs(uint64_t x) { return x; }
KILN_OVL float kiln__abs(float x) { return fabs(x); }
#ifdef cl_khr_fp64
KILN_OVL double kiln__abs(double x) { return fabs(x); }
#endif
#define abs kiln__abs
#define KILN__ATOMIC_INT(AS, T, P)                                                               \
  KILN_OVL T kiln_atomic_add(AS T* p, T v) { return P##add(p, v); }                              \
  KILN_OVL T kiln_atomic_sub(AS T* p, T v) { return P##sub(p, v); }                              \
  KILN_OVL T kiln_atomic_xchg(AS T* p, T v) { return P##xchg(p, v); }                            \
  KILN_OVL T kiln_atomic_cas(AS T* p, T e, T d) { return P##cmpxchg(p, e, d); }                  \
  KILN_OVL T kiln_atomic_and(AS T* p, T v) { return P##and(p, v); }                              \
  KILN_OVL T kiln_atomic_or(AS T* p, T v) { return P##or(p, v); }                                \
  KILN_OVL T kiln_atomic_xor(AS T* p, T v) { return P##xor(p, v); }                              \
  KILN_OVL T kiln_atomic_min(AS T* p, T v) { return P##min(p, v); }                              \
  KILN_OVL T kiln_atomic_max(AS T* p, T v) { return P##max(p, v); }
#define KILN__ATOMIC_FLOAT(AS, T, I, CAS, TO, FROM)                                              \
  KILN_OVL T kiln_atomic_add(AS T* p, T v) {                                                     \
    volatile AS I* q = (volatile AS I*)p;                                                        \
    I old = *q, seen;                                                                            \
    for (;;) {                                                                                   \
      seen = CAS(q, old, FROM(TO(old) + v));                                                     \
      if (seen == old) return TO(old);                                                           \
      old = seen;                                                                                \
    }                                                                                            \
  }
#define KILN__ATOMICS(AS)                                                                        \
  KILN__ATOMIC_INT(AS, int32_t, atomic_)                                                         \
  KILN__ATOMIC_INT(AS, uint32_t, atomic_)                                                        \
  KILN__ATOMIC_INT(AS, int64_t, atom_)                                                           \
  KILN__ATOMIC_INT(AS, uint64_t, atom_)                                                          \
  KILN__ATOMIC_FLOAT(AS, float, uint32_t, atomic_cmpxchg, as_float, as_uint)
KILN__ATOMICS(__global)
KILN__ATOMICS(__local)
#ifdef cl_khr_fp64
KILN__ATOMIC_FLOAT(__global, double, uint64_t, atom_cmpxchg, as_double, as_ulong)
KILN__ATOMIC_FLOAT(__local, double, uint64_t, atom_cmpxchg, as_double, as_ulong)
#endif
/* half: core OpenCL's vload_half/vstore_half_rte convert (no cl_khr_fp16 needed), then the
   name becomes Kiln's 16-bit struct, as in the other dialects. */
#define kiln__as_uint(f) as_uint(f)
#define kiln__as_float(u) as_float(u)
static inline float kiln__hw_f16_to_f32(ushort b) { return vload_half(0, (const __private half*)&b); }
static inline ushort kiln__hw_f32_to_f16(float f) {
  ushort b; vstore_half_rte(f, 0, (__private half*)&b); return b; }
#define KILN__F16_TO_F32 kiln__hw_f16_to_f32
#define KILN__F32_TO_F16 kiln__hw_f32_to_f16
#define KILN__HALF_IS_KEYWORD 1
)KILN";
// The base, then the 16-bit float types (reduced_float.hpp), which use its definitions.
const std::string prelude_text = std::string(prelude_base) + reduced_float_text;

// The type OpenCL accepts as a kernel argument for a scalar parameter.
const char* arg_type(scalar_type t) {
  switch (t) {
    case scalar_type::boolean: return "uchar";
    case scalar_type::f16:
    case scalar_type::bf16: return "ushort";  // the struct's bits; the prologue rebuilds it
    default: return type_name(t);
  }
}

void emit_params(std::string& out, const kernel_decl& k, bool checked) {
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const std::string n = std::to_string(i);
    if (k.params[i].is_pointer)
      out += "__global void* kiln__b" + n + ", ulong kiln__o" + n + ", ";
    else
      out += std::string(arg_type(k.params[i].type)) + " kiln__p" + n + ", ";
  }
  out += "kiln_range_t kiln__range";
  // Checked mode: the launcher passes the counts, then the error buffer, after the range.
  if (checked) {
    for (std::size_t i = 0; i < k.params.size(); ++i)
      if (k.params[i].is_pointer) out += ", ulong kiln__n" + std::to_string(i);
    out += ", __global void* kiln__eb, ulong kiln__eo";
  }
}

void emit_prologue(std::string& out, const kernel_decl& k, bool checked) {
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    const kernel_param& p = k.params[i];
    const std::string n = std::to_string(i);
    if (p.is_pointer) {
      const bool restricted = k.param_types[i].find("RESTRICT") != std::string::npos ||
                              k.param_types[i].find("restrict") != std::string::npos;
      const std::string t = std::string("__global ") + (p.is_const ? "const " : "") +
                            type_name(p.type) + "*" + (restricted ? " restrict" : "");
      out += " " + t + " " + p.name + " = (" + t + ")((__global char*)kiln__b" + n + " + kiln__o" +
             n + ");";
    } else if (is_reduced_float(p.type)) {
      out += std::string(" ") + type_name(p.type) + " " + p.name + "; " + p.name + ".bits = kiln__p" +
             n + ";";
    } else {
      out += std::string(" ") + type_name(p.type) + " " + p.name + " = (" + type_name(p.type) +
             ")kiln__p" + n + ";";
    }
  }
  if (checked)
    out += " __global ulong* kiln__err = (__global ulong*)((__global char*)kiln__eb + kiln__eo);";
  out +=
      " if (kiln_global_id(0) >= kiln__range.n[0] || kiln_global_id(1) >= kiln__range.n[1] || "
      "kiln_global_id(2) >= kiln__range.n[2]) return;";
}

// Checked mode (kernel_lang/checked_access.hpp): the address of p[i], or, out of range, the
// first violation recorded and a dummy slot of the error buffer. No templates in OpenCL C:
// one overload per element type and constness. The record's flag is a 32-bit word, whose
// compare-and-swap is core OpenCL 1.1.
const char* checked_prelude = R"KILN(
static inline void kiln__ck_record(__global ulong* err, ulong i, uint arg, uint line) {
  if (atomic_cmpxchg((volatile __global uint*)err, 0u, 1u) == 0u) {
    err[1] = arg; err[2] = i; err[3] = line;
  }
}
#define KILN__CK(T)                                                                             \
  KILN_OVL __global T* kiln__ck(__global T* p, ulong i, ulong n, __global ulong* err, uint arg, \
                                uint line) {                                                    \
    if (i < n) return p + i;                                                                    \
    kiln__ck_record(err, i, arg, line);                                                         \
    return (__global T*)(err + 6);                                                              \
  }                                                                                             \
  KILN_OVL __global const T* kiln__ck(__global const T* p, ulong i, ulong n, __global ulong* err, \
                                      uint arg, uint line) {                                    \
    if (i < n) return p + i;                                                                    \
    kiln__ck_record(err, i, arg, line);                                                         \
    return (__global const T*)(err + 6);                                                        \
  }
KILN__CK(char) KILN__CK(uchar) KILN__CK(short) KILN__CK(ushort) KILN__CK(int) KILN__CK(uint)
KILN__CK(long) KILN__CK(ulong) KILN__CK(float) KILN__CK(bool) KILN__CK(kiln_half_t)
KILN__CK(kiln_bfloat16_t)
#ifdef cl_khr_fp64
KILN__CK(double)
#endif
)KILN";

bool word_at(const std::string& text, std::size_t p, const char* word) {
  const std::size_t n = std::char_traits<char>::length(word);
  auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  return text.compare(p, n, word) == 0 && (p == 0 || !ident(text[p - 1])) &&
         (p + n >= text.size() || !ident(text[p + n]));
}

// OpenCL C reserves `long long` (for 128 bits) and makes `long` 64-bit: "long long" becomes
// "long" padded with spaces, so offsets and lines stay where the parser found them.
void respell(std::string& source, const std::string& blank) {
  for (std::size_t p = blank.find("long"); p != std::string::npos; p = blank.find("long", p + 4)) {
    if (!word_at(blank, p, "long")) continue;
    std::size_t q = p + 4;
    while (q < blank.size() && std::isspace(static_cast<unsigned char>(blank[q]))) ++q;
    if (!word_at(blank, q, "long")) continue;
    for (std::size_t i = p + 4; i < q + 4; ++i)
      if (source[i] != '\n') source[i] = ' ';
    p = q;
  }
}

// Warp primitives through NVIDIA's inline PTX; generators use them only on devices that report
// feature::warp32 (NVIDIA's platform), so other compilers never see them. Shuffles move 32-bit
// registers: narrower scalars widen, 64-bit ones go as two halves.
const warp_ops warp = {32, R"KILN(
#ifdef KILN_OPENCL_NVIDIA
static inline uint kiln__shfl_up_u32(uint x, uint d) {
  uint r; __asm__ volatile("shfl.sync.up.b32 %0, %1, %2, 0, 0xffffffff;" : "=r"(r) : "r"(x), "r"(d));
  return r;
}
static inline uint kiln__shfl_down_u32(uint x, uint d) {
  uint r; __asm__ volatile("shfl.sync.down.b32 %0, %1, %2, 31, 0xffffffff;" : "=r"(r) : "r"(x), "r"(d));
  return r;
}
static inline uint kiln__shfl_xor_u32(uint x, uint m) {
  uint r; __asm__ volatile("shfl.sync.bfly.b32 %0, %1, %2, 31, 0xffffffff;" : "=r"(r) : "r"(x), "r"(m));
  return r;
}
#define KILN__SHFL32(T, TO, FROM) \
  KILN_OVL T kiln__warp_shfl_up(T x, uint d) { return FROM(kiln__shfl_up_u32(TO(x), d)); } \
  KILN_OVL T kiln__warp_shfl_down(T x, uint d) { return FROM(kiln__shfl_down_u32(TO(x), d)); } \
  KILN_OVL T kiln__warp_shfl_xor(T x, uint m) { return FROM(kiln__shfl_xor_u32(TO(x), m)); }
#define KILN__SHFL64(T, TO, FROM) \
  KILN_OVL T kiln__warp_shfl_up(T x, uint d) { \
    uint2 h = TO(x); h.x = kiln__shfl_up_u32(h.x, d); h.y = kiln__shfl_up_u32(h.y, d); return FROM(h); } \
  KILN_OVL T kiln__warp_shfl_down(T x, uint d) { \
    uint2 h = TO(x); h.x = kiln__shfl_down_u32(h.x, d); h.y = kiln__shfl_down_u32(h.y, d); return FROM(h); } \
  KILN_OVL T kiln__warp_shfl_xor(T x, uint m) { \
    uint2 h = TO(x); h.x = kiln__shfl_xor_u32(h.x, m); h.y = kiln__shfl_xor_u32(h.y, m); return FROM(h); }
KILN__SHFL32(uint, (uint), (uint))
KILN__SHFL32(int, as_uint, as_int)
KILN__SHFL32(float, as_uint, as_float)
KILN__SHFL32(uchar, (uint), (uchar))
KILN__SHFL32(char, (uint), (char))
KILN__SHFL32(ushort, (uint), (ushort))
KILN__SHFL32(short, (uint), (short))
KILN__SHFL64(ulong, as_uint2, as_ulong)
KILN__SHFL64(long, as_uint2, as_long)
#ifdef cl_khr_fp64
KILN__SHFL64(double, as_uint2, as_double)
#endif
static inline uint kiln__warp_ballot(int p) {
  uint r;
  __asm__ volatile("{ .reg .pred q; setp.ne.s32 q, %1, 0; vote.sync.ballot.b32 %0, q, 0xffffffff; }"
                   : "=r"(r) : "r"(p));
  return r;
}
#define kiln__warp_ballot(p) kiln__warp_ballot((int)(p))
#define kiln__warp_ffs(m) ((m) ? 32u - clz((uint)(m) & (0u - (uint)(m))) : 0u)
#define kiln__warp_popc(m) ((uint)popcount((uint)(m)))
#define kiln__warp_sync() __asm__ volatile("bar.warp.sync 0xffffffff;" ::: "memory")
#define kiln__backoff(ns) __asm__ volatile("nanosleep.u32 %0;" :: "r"((uint)(ns)))
#endif
)KILN"};

}  // namespace

const target opencl_target = {.name = "opencl",
                              .prelude = prelude_text.c_str(),
                              .body_param = "",
                              .emit_entry = nullptr,
                              .emit_params = emit_params,
                              .emit_prologue = emit_prologue,
                              .respell = respell,
                              .checked_prelude = checked_prelude,
                              .warp = &warp};

namespace {
const target_registration registered{opencl_target};
}  // namespace

}  // namespace kiln::codegen
