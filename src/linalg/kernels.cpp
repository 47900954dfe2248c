// The portable GEMM and GEMV kernels, in Kiln's kernel language, for float and double.
// The tiled GEMM: a 16 x 16 work-group computes a 64 x 64 tile of C, each item a 4 x 4 block
// in registers (rows ty + 16 i, columns tx + 16 j, so local reads are spread over banks),
// from 64 x 16 tiles of op(A) and 16 x 64 tiles of op(B) staged in local memory.
#include <string>

#include "codegen/text.hpp"
#include "linalg/linalg.hpp"

namespace kiln::linalg::detail {
namespace {

// Both GEMM kernels take one argument list, so gemm.cpp binds it once for either.
#define KILN_GEMM_PARAMS                                                              \
  "(KILN_GLOBAL T_* c, KILN_GLOBAL const T_* a, KILN_GLOBAL const T_* b, uint64_t m," \
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
      if (gr < m && gk < k) v = ta ? a[gk * lda + gr] : a[gr * lda + gk];
      as[ak * 64 + ar] = v;
      const uint32_t bc = tb ? e / 16 : e % 64, bk = tb ? e % 16 : e / 64;
      const uint64_t gc = col0 + bc, hk = p0 + bk;
      T_ w = (T_)0;
      if (hk < k && gc < n) w = tb ? b[gc * ldb + hk] : b[hk * ldb + gc];
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
        KILN_GLOBAL T_* o = c + r * ldc + col;
        *o = beta == (T_)0 ? alpha * acc[i * 4 + j] : alpha * acc[i * 4 + j] + beta * *o;
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
    acc += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
  KILN_GLOBAL T_* o = c + z * sc + i * ldc + j;
  *o = beta == (T_)0 ? alpha * acc : alpha * acc + beta * *o;
}

KILN_KERNEL void kiln_gemv(KILN_GLOBAL T_* y, KILN_GLOBAL const T_* a, KILN_GLOBAL const T_* x,
                           uint64_t m, uint64_t n, uint64_t lda, int32_t tr, T_ alpha, T_ beta) {
  const uint64_t i = kiln_global_id(0);
  const uint64_t len = tr ? m : n;
  T_ acc = (T_)0;
  for (uint64_t p = 0; p < len; ++p) acc += (tr ? a[p * lda + i] : a[i * lda + p]) * x[p];
  y[i] = beta == (T_)0 ? alpha * acc : alpha * acc + beta * y[i];
}
)";

// The text with every "T_" spelled as the element type.
std::string instantiate(const char* text, scalar_type t) {
  return codegen::with_element_type(text, t == scalar_type::f64 ? "double" : "float");
}

}  // namespace

const std::string& tiled_source(scalar_type t) {
  static const std::string f = instantiate(tiled_text, scalar_type::f32),
                           d = instantiate(tiled_text, scalar_type::f64);
  return t == scalar_type::f64 ? d : f;
}

const std::string& simple_source(scalar_type t) {
  static const std::string f = instantiate(simple_text, scalar_type::f32),
                           d = instantiate(simple_text, scalar_type::f64);
  return t == scalar_type::f64 ? d : f;
}

}  // namespace kiln::linalg::detail
