/* Kiln "dnn" extension table, version 1: convolution, pooling and fused attention from a vendor
 * library.
 *
 * A backend that has one returns a kiln_dnn_v1 from get_extension("dnn", 1) and answers
 * supports_op(dev, KILN_OP_CONV2D, dtype) = 1 for each dtype it takes (F32, F64; F16 and BF16
 * are computed in f32, with f32 alpha and beta). Every tensor is dense and
 * contiguous in NCHW order (filters KCRS: out channels, in channels / groups, rows, columns);
 * the core makes strided operands contiguous before calling.
 *
 * Calls are asynchronous on the queue, ordered with the queue's other work. A table chooses
 * its algorithm itself (cuDNN: its heuristics, cached per shape) and owns any workspace. The
 * core validates shapes and buffer sizes before calling; a table may still refuse with
 * KILN_ERR_UNSUPPORTED (a configuration its library lacks: the core then runs its portable
 * kernels) or another status with the message in the plugin's last_error(). Functions never
 * throw.
 */
#ifndef KILN_DNN_ABI_H
#define KILN_DNN_ABI_H

#include "backend_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_DNN_EXTENSION "dnn"
#define KILN_DNN_VERSION 1u

/* kiln_dnn_conv_desc.math_mode: TF32 lets f32 convolutions use TensorFloat-32 tensor cores
 * (~1e-3 relative error); backends without it compute in full f32. Never applies to f64. */
#define KILN_DNN_MATH_DEFAULT 0u
#define KILN_DNN_MATH_TF32 1u

/* One 2-D convolution (cross-correlation, as in PyTorch): input x is n x c x h x w, filters
 * wt are k x (c / groups) x r x s, output y is n x k x p x q with
 *   p = (h + 2 pad_h - dil_h (r - 1) - 1) / stride_h + 1   (q likewise).
 * The three calls share the descriptor; each writes one of x, wt, y:
 *   conv_forward:         y  = alpha conv(x, wt)             + beta y
 *   conv_backward_data:   x  = alpha conv_transpose(y, wt)   + beta x   (y holds dL/dy)
 *   conv_backward_filter: wt = alpha corr(x, y)              + beta wt  (y holds dL/dy)
 * beta == 0 never reads the written tensor (it may hold NaN). */
typedef struct kiln_dnn_conv_desc {
  kiln_dtype dtype; /* F32, F64, F16 or BF16 */
  uint64_t n, c, h, w;
  uint64_t k, r, s;
  uint64_t p, q;
  uint32_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
  uint32_t groups; /* c and k are multiples of it */
  uint32_t math_mode;
  const void* alpha; /* host pointers to one value of dtype (f32 for F16 and BF16) */
  const void* beta;
  kiln_mem_ref x, wt, y; /* device memory; offsets in bytes */
} kiln_dnn_conv_desc;

typedef enum kiln_dnn_pool_mode {
  KILN_DNN_POOL_MAX = 0,
  KILN_DNN_POOL_AVG_INCLUDE_PAD = 1, /* divide by the window's area */
  KILN_DNN_POOL_AVG_EXCLUDE_PAD = 2  /* divide by the window's elements inside the input */
} kiln_dnn_pool_mode;

/* 2-D pooling over each of the n x c planes: x is n x c x h x w, y is n x c x p x q, with
 * p = (h + 2 pad_h - win_h) / stride_h + 1 (q likewise; no dilation, no ceil mode: the core
 * runs its portable kernels for those). Padding never wins a max.
 *   pool_forward:  y = pooled x
 *   pool_backward: dx = gradient of the pooling, given x, y and dy (dx is overwritten). */
typedef struct kiln_dnn_pool_desc {
  kiln_dtype dtype; /* F32, F64, F16 or BF16 */
  kiln_dnn_pool_mode mode;
  uint64_t n, c, h, w, p, q;
  uint32_t win_h, win_w, stride_h, stride_w, pad_h, pad_w;
  kiln_mem_ref x, y, dy, dx; /* pool_forward reads x, writes y; pool_backward reads x, y, dy */
} kiln_dnn_pool_desc;

/* One [batch, heads, rows, cols] operand of attention: element strides of the first three
 * dimensions (the columns are contiguous). */
typedef struct kiln_dnn_view {
  kiln_mem_ref mem;  /* device memory; offset in bytes */
  int64_t stride[3]; /* batch, head, row, in elements */
} kiln_dnn_view;

/* Scaled dot-product attention as flash attention computes it: per batch and head
 *   o = softmax(scale q k^T, with causal: key j > query i dropped) v
 * without the lq x lk scores in memory, and its backward from the saved row statistics.
 * q is lq x d_qk, k lk x d_qk, v lk x d_v, o and grad_o lq x d_v (grad_q, grad_k, grad_v as q,
 * k, v). stats is batch x heads x lq f32, contiguous: each query row's log-sum-exp of its kept
 * scaled scores (natural log), written by attention_forward and read by attention_backward.
 * Calls are asynchronous on the queue. q, k and v may share memory (views of one packed
 * projection); o, stats and the gradients alias nothing. A library may need its operands
 * aligned (cuDNN: 16-byte bases and strides) and refuses the call otherwise. */
typedef struct kiln_dnn_attention_desc {
  uint32_t struct_size; /* sizeof(kiln_dnn_attention_desc): later fields are appended */
  kiln_dtype dtype;     /* F16 or BF16: every view's storage; work in f32 */
  uint32_t causal;      /* nonzero: query i sees keys j <= i (top-left aligned, as PyTorch) */
  uint64_t batch, heads, lq, lk, d_qk, d_v;
  float scale;
  kiln_dnn_view q, k, v, o;
  kiln_mem_ref stats;
  kiln_dnn_view grad_o, grad_q, grad_k, grad_v; /* attention_backward only */
} kiln_dnn_attention_desc;

typedef struct kiln_dnn_v1 {
  kiln_extension_header header; /* {KILN_DNN_VERSION, sizeof(kiln_dnn_v1)} */
  /* What backs the table, for listings and reports: "cuDNN 9.19.0". */
  const char* library;
  /* Each returns KILN_OK once the work is queued; alpha and beta are read before returning. */
  kiln_status (*conv_forward)(kiln_queue_h queue, const kiln_dnn_conv_desc* desc);
  kiln_status (*conv_backward_data)(kiln_queue_h queue, const kiln_dnn_conv_desc* desc);
  kiln_status (*conv_backward_filter)(kiln_queue_h queue, const kiln_dnn_conv_desc* desc);
  kiln_status (*pool_forward)(kiln_queue_h queue, const kiln_dnn_pool_desc* desc);
  kiln_status (*pool_backward)(kiln_queue_h queue, const kiln_dnn_pool_desc* desc);
  /* Appended within version 1: present when header.struct_size covers them, and then may
   * still be NULL (the library has no fused attention). A shape the library lacks (head
   * widths, strides, alignment) returns KILN_ERR_UNSUPPORTED: the core then computes attention
   * itself. */
  kiln_status (*attention_forward)(kiln_queue_h queue, const kiln_dnn_attention_desc* desc);
  kiln_status (*attention_backward)(kiln_queue_h queue, const kiln_dnn_attention_desc* desc);
} kiln_dnn_v1;

#ifdef __cplusplus
}
#endif
#endif
