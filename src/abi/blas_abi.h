/* Kiln "blas" extension table, version 1: dense matrix products from a vendor library.
 *
 * A backend that has one returns a kiln_blas_v1 from get_extension("blas", 1) and answers
 * supports_op(dev, KILN_OP_GEMM, KILN_DTYPE_F32 / F64) = 1. Everything is ROW-MAJOR, as Kiln
 * and its users (PyTorch) are: element (i, j) of a matrix with leading dimension ld is at
 * index i * ld + j. A backend over a column-major library maps it (cuBLAS: C^T = B^T A^T).
 *
 * Calls are asynchronous on the queue, ordered with the queue's other work. The core
 * validates shapes and buffer sizes before calling; a table may still refuse with
 * KILN_ERR_INVALID_ARGUMENT (e.g. a size its library cannot address) and gives the message
 * through the plugin's last_error(). Functions never throw.
 */
#ifndef KILN_BLAS_ABI_H
#define KILN_BLAS_ABI_H

#include "backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_BLAS_EXTENSION "blas"
#define KILN_BLAS_VERSION 1u

typedef enum kiln_blas_op {
  KILN_BLAS_OP_N = 0, /* the matrix as stored */
  KILN_BLAS_OP_T = 1  /* its transpose */
} kiln_blas_op;

/* kiln_blas_gemm_desc.math_mode. TF32 lets f32 products use TensorFloat-32 tensor cores
 * (10-bit mantissa inputs, f32 accumulation: ~1e-3 relative error); backends without it
 * ignore the flag and compute in full f32. Never applies to f64. */
#define KILN_BLAS_MATH_DEFAULT 0u
#define KILN_BLAS_MATH_TF32 1u

/* C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] for b in [0, batch).
 * op(A) is m x k, op(B) is k x n, C is m x n. A is stored m x k (trans_a N) or k x m (T),
 * B is stored k x n (N) or n x k (T). Every count is in elements, not bytes. */
typedef struct kiln_blas_gemm_desc {
  kiln_dtype dtype; /* KILN_DTYPE_F32, F64, or F16/BF16 (f32 accumulation, f32 alpha and beta) */
  kiln_blas_op trans_a, trans_b;
  uint64_t m, n, k;
  uint64_t lda, ldb, ldc;                /* row pitch of each stored matrix (>= its columns) */
  uint64_t batch;                        /* number of products; 1 for a plain GEMM */
  uint64_t stride_a, stride_b, stride_c; /* distance from matrix b to matrix b + 1 */
  const void* alpha;                     /* host pointer to one value of dtype */
  const void* beta;                      /* host pointer; beta == 0: C is not read (may hold NaN) */
  kiln_mem_ref a, b, c;                  /* device memory; offsets in bytes */
  uint32_t math_mode;                    /* KILN_BLAS_MATH_* */
} kiln_blas_gemm_desc;

/* y = alpha * op(A) * x + beta * y. A is stored m x n with leading dimension lda; op(A) is
 * m x n (N) or n x m (T). x and y are contiguous: x has op(A)'s columns, y its rows. */
typedef struct kiln_blas_gemv_desc {
  kiln_dtype dtype; /* F32 or F64; F16/BF16 where supports_op(KILN_OP_GEMV) (f32 alpha, beta,
                       accumulation) */
  kiln_blas_op trans;
  uint64_t m, n, lda;
  const void* alpha; /* host pointers to one value of dtype; beta == 0: y is not read */
  const void* beta;
  kiln_mem_ref a, x, y;
} kiln_blas_gemv_desc;

/* What gemm_epilogue applies to each element of C after the product, per column j of the
 * row-major C (m x n): C[i][j] = act(alpha (op(A) op(B))[i][j] + bias[j]). */
typedef enum kiln_blas_epilogue {
  KILN_BLAS_EPILOGUE_BIAS = 1,          /* act(v) = v */
  KILN_BLAS_EPILOGUE_BIAS_RELU = 2,     /* max(v, 0) */
  KILN_BLAS_EPILOGUE_BIAS_GELU_TANH = 3 /* 0.5 v (1 + tanh(sqrt(2/pi) (v + 0.044715 v^3))) */
} kiln_blas_epilogue;

/* A GEMM with its elementwise tail fused: batch 1, beta 0 (C is written, never read), bias a
 * contiguous vector of n values of the GEMM's dtype. */
typedef struct kiln_blas_epilogue_desc {
  kiln_blas_epilogue epilogue;
  kiln_mem_ref bias;
} kiln_blas_epilogue_desc;

typedef struct kiln_blas_v1 {
  kiln_extension_header header; /* {KILN_BLAS_VERSION, sizeof(kiln_blas_v1)} */
  /* What backs the table, for listings and reports: "cuBLAS 13.0", "OpenBLAS 0.3.21". */
  const char* library;
  /* Both return KILN_OK once the work is queued; alpha and beta are read before returning. */
  kiln_status (*gemm)(kiln_queue_h queue, const kiln_blas_gemm_desc* desc);
  kiln_status (*gemv)(kiln_queue_h queue, const kiln_blas_gemv_desc* desc);
  /* Appended within version 1: present when header.struct_size covers it and it is not null.
   * KILN_ERR_UNSUPPORTED when the library has no kernel for the configuration (the core then
   * runs the GEMM and the tail apart). */
  kiln_status (*gemm_epilogue)(kiln_queue_h queue, const kiln_blas_gemm_desc* desc,
                               const kiln_blas_epilogue_desc* epilogue);
} kiln_blas_v1;

#ifdef __cplusplus
}
#endif
#endif
