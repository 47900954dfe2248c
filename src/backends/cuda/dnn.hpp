// Internal declarations of the CUDA plugin's "dnn" extension: cuDNN 9's legacy convolution and
// pooling API, loaded with dlopen (never linked); cudnn.h is included for types only. Built
// only where CMake found cuDNN 9's headers (KILN_HAVE_CUDNN).
//   dnn.cpp            finding and loading the library, the table, per-queue state
//   dnn_algos.cpp      algorithms from cuDNN's heuristics cached per shape, the workspace
//   dnn_backend.hpp    helpers over the graph (backend) API: descriptors, heuristics, the log
//   dnn_graph.cpp      convolutions through the graph API, tried first
//   dnn_attention.cpp  fused attention (flash attention) through the graph API
#pragma once

#include <cudnn.h>

#include <array>
#include <string>
#include <vector>

#include "cuda_backend.hpp"
#include "dl_library.hpp"
#include "dnn_abi.h"

// Every cuDNN entry point the plugin calls, all exported by libcudnn.so.9 (which loads
// libcudnn_ops, libcudnn_cnn and the engine libraries itself, from its own folder).
#define KILN_CUDNN_FUNCS(X)                             \
  X(cudnnGetVersion)                                    \
  X(cudnnGetErrorString)                                \
  X(cudnnGetLastErrorString)                            \
  X(cudnnCreate)                                        \
  X(cudnnDestroy)                                       \
  X(cudnnSetStream)                                     \
  X(cudnnCreateTensorDescriptor)                        \
  X(cudnnDestroyTensorDescriptor)                       \
  X(cudnnSetTensor4dDescriptor)                         \
  X(cudnnCreateFilterDescriptor)                        \
  X(cudnnDestroyFilterDescriptor)                       \
  X(cudnnSetFilter4dDescriptor)                         \
  X(cudnnCreateConvolutionDescriptor)                   \
  X(cudnnDestroyConvolutionDescriptor)                  \
  X(cudnnSetConvolution2dDescriptor)                    \
  X(cudnnSetConvolutionGroupCount)                      \
  X(cudnnSetConvolutionMathType)                        \
  X(cudnnGetConvolution2dForwardOutputDim)              \
  X(cudnnGetConvolutionForwardAlgorithmMaxCount)        \
  X(cudnnGetConvolutionBackwardDataAlgorithmMaxCount)   \
  X(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount) \
  X(cudnnGetConvolutionForwardAlgorithm_v7)             \
  X(cudnnGetConvolutionBackwardDataAlgorithm_v7)        \
  X(cudnnGetConvolutionBackwardFilterAlgorithm_v7)      \
  X(cudnnGetConvolutionForwardWorkspaceSize)            \
  X(cudnnGetConvolutionBackwardDataWorkspaceSize)       \
  X(cudnnGetConvolutionBackwardFilterWorkspaceSize)     \
  X(cudnnConvolutionForward)                            \
  X(cudnnConvolutionBackwardData)                       \
  X(cudnnConvolutionBackwardFilter)                     \
  X(cudnnCreatePoolingDescriptor)                       \
  X(cudnnDestroyPoolingDescriptor)                      \
  X(cudnnSetPooling2dDescriptor)                        \
  X(cudnnGetPooling2dForwardOutputDim)                  \
  X(cudnnPoolingForward)                                \
  X(cudnnPoolingBackward)

// The graph (backend) API: optional. Without one of these only the legacy API runs.
#define KILN_CUDNN_GRAPH_FUNCS(X)  \
  X(cudnnBackendCreateDescriptor)  \
  X(cudnnBackendDestroyDescriptor) \
  X(cudnnBackendSetAttribute)      \
  X(cudnnBackendGetAttribute)      \
  X(cudnnBackendFinalize)          \
  X(cudnnBackendExecute)

namespace kiln_cuda {

struct CudnnApi {
  void* lib = nullptr;
  std::string library;  // "cuDNN 9.19.0"
  std::string path;     // the name or path dlopen accepted
  std::string why;      // with lib null: why, for the availability line
  kiln_dnn_v1 table{};  // get_extension("dnn", 1), set once loaded
  bool graph = false;   // every KILN_CUDNN_GRAPH_FUNCS entry resolved
  KILN_CUDNN_FUNCS(KILN_DL_MEMBER)
  KILN_CUDNN_GRAPH_FUNCS(KILN_DL_MEMBER)
};

// Loads cuDNN once, where the driver found a device; `lib` stays null when it cannot.
const CudnnApi& cudnn();

// A queue's cuDNN state, guarded by kiln_queue_s::dnn_mu. The descriptors are host objects
// created once and set afresh by every call.
struct GraphPlans;      // dnn_graph.cpp: execution plans per call shape, tied to the handle
struct AttentionPlans;  // dnn_attention.cpp: likewise for fused attention
struct DnnQueue {
  cudnnHandle_t handle = nullptr;  // bound to the queue's stream for good
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
  CUdeviceptr ws = 0;  // workspace, allocated in the stream's order
  size_t ws_bytes = 0;
  GraphPlans* graph = nullptr;          // created on first use of the graph API
  AttentionPlans* attention = nullptr;  // created on first fused attention
};

enum class ConvDir { forward = 0, backward_data = 1, backward_filter = 2 };

// One algorithm cuDNN's heuristics offer for a shape, with the math type to run it under and
// the workspace it needs with that math type.
struct ConvAlgo {
  int algo;  // a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t, as dir says
  cudnnMathType_t math;
  size_t workspace;
};

// A convolution's shape fields (everything but dtype, math and pointers), for cache keys.
using ConvShape = std::array<uint64_t, 16>;
inline ConvShape conv_shape(const kiln_dnn_conv_desc& d) {
  return {d.n, d.c,        d.h,        d.w,     d.k,     d.r,     d.s,     d.p,
          d.q, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dil_h, d.dil_w, d.groups};
}

// Records "call failed: CUDNN_STATUS_... (cuDNN status N): detail" and maps the status. A
// setup call (descriptors, heuristics) that cuDNN refuses as a bad parameter is a
// configuration cuDNN lacks, the core having validated the shapes: KILN_ERR_UNSUPPORTED.
kiln_status dnn_fail(cudnnStatus_t st, const char* call, bool setup) noexcept;

// cuDNN's type for a Kiln dtype (F32, F64, F16, BF16).
cudnnDataType_t data_type(kiln_dtype t);

// Whether the graph API may run: its symbols resolved and KILN_CUDNN_GRAPH is not "0" (read
// per call, so tests can compare both paths).
bool graph_enabled();
// Queues convolution d through the graph API: the plan cached for its shape on this queue, else
// engines from the heuristics, the fastest of the first few (timed on d's operands when beta is
// 0). Any status but KILN_OK (the message set, the refusal cached per shape) leaves d to the
// legacy path (an output with beta != 0 untouched). The caller holds q->dnn_mu; may throw
// std::bad_alloc.
kiln_status graph_conv(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir);
// Destroys the queue's plans; without the device they are leaked, as the handle is.
void graph_release(DnnQueue& s, bool device) noexcept;

// The views of attention call d: q, k, v, o, and for the backward grad_o, grad_q, grad_k, grad_v.
inline std::vector<const kiln_dnn_view*> attention_views(const kiln_dnn_attention_desc& d,
                                                         bool backward) {
  std::vector<const kiln_dnn_view*> v{&d.q, &d.k, &d.v, &d.o};
  if (backward) v.insert(v.end(), {&d.grad_o, &d.grad_q, &d.grad_k, &d.grad_v});
  return v;
}

// Queues fused attention d (its backward when `backward`) through the graph API: the plan cached
// for its shape on this queue, else the first engine heuristics offer that finalizes.
// KILN_ERR_UNSUPPORTED (the message set, the refusal cached per shape) where cuDNN has none.
// The caller holds q->dnn_mu and has validated d; may throw std::bad_alloc.
kiln_status graph_attention(kiln_queue_h q, DnnQueue& s, const kiln_dnn_attention_desc& d,
                            bool backward);
void attention_release(DnnQueue& s, bool device) noexcept;

// The candidate algorithms for the convolution described by s's descriptors (already set from
// d), best first: from the cache, else from cuDNN's heuristics, then cached. May be empty.
// `math` is the math type the descriptor was set up with (it is changed as candidates are
// measured). The caller holds q->dnn_mu; may throw std::bad_alloc.
kiln_status conv_algos(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir,
                       cudnnMathType_t math, const std::vector<ConvAlgo>** out);

// Runs convolution d with candidate a (its math type already set on s.conv, the workspace
// large enough).
cudnnStatus_t run_conv(const DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir,
                       const ConvAlgo& a);
// Grows the queue's workspace to at least `bytes` (a no-op when it is that large already):
// the old one is freed and the new one allocated in the stream's order, so work queued before
// still uses the old memory safely. The caller holds q->dnn_mu.
kiln_status reserve_workspace(kiln_queue_h q, DnnQueue& s, size_t bytes) noexcept;
// Frees the workspace in the stream's order (the stream must still exist).
kiln_status free_workspace(kiln_queue_h q, DnnQueue& s) noexcept;

}  // namespace kiln_cuda
