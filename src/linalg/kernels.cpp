// The portable GEMM and GEMV kernels, in Kiln's kernel language, for float, double, half and
// bfloat16. S_ is the stored type, T_ the type products accumulate in (float for the 16-bit
// types), LOAD_(x) reads a stored element as T_ and STORE_(v) rounds a T_ for storing.
// The tiled GEMM: a 16 x 16 work-group computes a 64 x 64 tile of C, each item a 4 x 4 block
// in registers (rows ty + 16 i, columns tx + 16 j, so local reads are spread over banks),
// from 64 x 16 tiles of op(A) and 16 x 64 tiles of op(B) staged in local memory.
#include <mutex>
#include <string>
#include <string_view>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "linalg/linalg.hpp"

namespace kiln::linalg::detail {
namespace {

// Both GEMM kernels take one argument list, so gemm.cpp binds it once for either.
#define KILN_GEMM_PARAMS                                                              \
  "(KILN_GLOBAL S_* c, KILN_GLOBAL const S_* a, KILN_GLOBAL const S_* b, uint64_t m," \
  " uint64_t n, uint64_t k, uint64_t lda, uint64_t ldb, uint64_t ldc, uint64_t sa,"   \
  " uint64_t sb, uint64_t sc, int32_t ta, int32_t tb, T_ alpha, T_ beta)"

constexpr const char* tiled_text = "\nKILN_KERNEL void kiln_gemm_tiled" KILN_GEMM_PARAMS R"( {
  KILN_LOCAL T_ as[16 * 64];  // as[kk * 64 + row]
  KILN_LOCAL T_ bs[16 * 64];  // bs[kk * 64 + col]
  const uint32_t tx = (uint32_t)kiln_local_id(0), ty = (uint32_t)kiln_local_id(1);
  const uint32_t lid = ty * 16 + tx;
  const uint64_t row0 = kiln_group_id(1) * 64, col0 = kiln_group_id(0) * 64;
  const uint64_t z = kiln_group_id(2);
  a += z * sa;
  b += z * sb;
  c += z * sc;
  T_ acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = (T_)0;
  for (uint64_t p0 = 0; p0 < k; p0 += 16) {
    for (uint32_t e = lid; e < 1024; e += 256) {
      // Consecutive items read consecutive addresses of the stored matrix.
      const uint32_t ar = ta ? e % 64 : e / 16, ak = ta ? e / 64 : e % 16;
      const uint64_t gr = row0 + ar, gk = p0 + ak;
      T_ v = (T_)0;
      if (gr < m && gk < k) v = LOAD_(ta ? a[gk * lda + gr] : a[gr * lda + gk]);
      as[ak * 64 + ar] = v;
      const uint32_t bc = tb ? e / 16 : e % 64, bk = tb ? e % 16 : e / 64;
      const uint64_t gc = col0 + bc, hk = p0 + bk;
      T_ w = (T_)0;
      if (hk < k && gc < n) w = LOAD_(tb ? b[gc * ldb + hk] : b[hk * ldb + gc]);
      bs[bk * 64 + bc] = w;
    }
    kiln_barrier();
    for (uint32_t kk = 0; kk < 16; ++kk) {
      T_ av[4], bv[4];
      for (int i = 0; i < 4; ++i) av[i] = as[kk * 64 + ty + 16 * i];
      for (int j = 0; j < 4; ++j) bv[j] = bs[kk * 64 + tx + 16 * j];
      for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) acc[i * 4 + j] += av[i] * bv[j];
    }
    kiln_barrier();
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const uint64_t r = row0 + ty + 16 * i, col = col0 + tx + 16 * j;
      if (r < m && col < n) {
        KILN_GLOBAL S_* o = c + r * ldc + col;
        *o = STORE_(beta == (T_)0 ? alpha * acc[i * 4 + j]
                                  : alpha * acc[i * 4 + j] + beta * LOAD_(*o));
      }
    }
}
)";

// beta == 0 never reads the output, so whatever it held (NaN) is overwritten.
constexpr const char* simple_text = "\nKILN_KERNEL void kiln_gemm_simple" KILN_GEMM_PARAMS R"( {
  const uint64_t j = kiln_global_id(0), i = kiln_global_id(1), z = kiln_global_id(2);
  a += z * sa;
  b += z * sb;
  T_ acc = (T_)0;
  for (uint64_t p = 0; p < k; ++p)
    acc += LOAD_(ta ? a[p * lda + i] : a[i * lda + p]) * LOAD_(tb ? b[j * ldb + p] : b[p * ldb + j]);
  KILN_GLOBAL S_* o = c + z * sc + i * ldc + j;
  *o = STORE_(beta == (T_)0 ? alpha * acc : alpha * acc + beta * LOAD_(*o));
}

KILN_KERNEL void kiln_gemv(KILN_GLOBAL S_* y, KILN_GLOBAL const S_* a, KILN_GLOBAL const S_* x,
                           uint64_t m, uint64_t n, uint64_t lda, int32_t tr, T_ alpha, T_ beta) {
  const uint64_t i = kiln_global_id(0);
  const uint64_t len = tr ? m : n;
  T_ acc = (T_)0;
  for (uint64_t p = 0; p < len; ++p) acc += LOAD_(tr ? a[p * lda + i] : a[i * lda + p]) * LOAD_(x[p]);
  y[i] = STORE_(beta == (T_)0 ? alpha * acc : alpha * acc + beta * LOAD_(y[i]));
}
)";

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// The text for element type t: the conversions first (their names hold no S_ or T_), then the
// stored and the computed type.
std::string instantiate(const char* text, scalar_type t) {
  std::string s(text);
  const std::string v = codegen::value_type(t);
  const std::string n = type_name(t);
  const bool r = is_reduced_float(t);
  replace_all(s, "LOAD_(", r ? "kiln_" + n + "_to_float(" : "(");
  replace_all(s, "STORE_(", r ? "kiln_float_to_" + n + "(" : "(");
  replace_all(s, "S_", type_name(t));
  return codegen::with_element_type(s, v);
}

// One instantiation per element type, made on first use.
const std::string& source_for(const char* text, scalar_type t, std::string (&cache)[4],
                              std::once_flag (&once)[4]) {
  const int i = t == scalar_type::f64    ? 1
                : t == scalar_type::f16  ? 2
                : t == scalar_type::bf16 ? 3
                                         : 0;
  std::call_once(once[i], [&] { cache[i] = instantiate(text, t); });
  return cache[i];
}

}  // namespace

const std::string& tiled_source(scalar_type t) {
  static std::string cache[4];
  static std::once_flag once[4];
  return source_for(tiled_text, t, cache, once);
}

const std::string& simple_source(scalar_type t) {
  static std::string cache[4];
  static std::once_flag once[4];
  return source_for(simple_text, t, cache, once);
}

}  // namespace kiln::linalg::detail
