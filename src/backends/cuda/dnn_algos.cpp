// The "dnn" extension's algorithms and workspace. Algorithms come from cuDNN's heuristics
// (cudnnGetConvolution*Algorithm_v7), are filtered by math type, measured for workspace, the
// first few of them timed once on the call's own operands (the legacy heuristics' first pick
// ran at 0.4-0.9x of what PyTorch's cuDNN-frontend picks on the H200), and cached per shape
// for the plugin's lifetime. The workspace is per queue, grown
// on demand in the queue's stream order and freed with the queue.
#ifdef KILN_HAVE_CUDNN
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "dnn.hpp"

namespace kiln_cuda {
namespace {

// Device, direction, dtype, math type and every shape field of the descriptor: everything but
// pointers, alpha and beta.
using AlgoKey = std::tuple<uint64_t, uint64_t, uint64_t, uint64_t, ConvShape>;

// Never destroyed, like state(): a queue may be destroyed from a static destructor. Entries are
// never erased, so pointers to them stay valid.
struct AlgoCache {
  std::mutex mu;
  std::map<AlgoKey, std::vector<ConvAlgo>> map;
};
AlgoCache& cache() {
  static AlgoCache* c = new AlgoCache;
  return *c;
}

// Whether a heuristic result of math type `m` may run for a call set up with `requested`, and
// the math type to run it under. Never FP32-to-FP16 down-conversion; f32 without TF32
// (CUDNN_FMA_MATH) never tensor cores, and runs what cuDNN calls default math as FMA math.
bool usable(cudnnMathType_t m, cudnnMathType_t requested, cudnnMathType_t* run) {
  if (m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  if (requested == CUDNN_FMA_MATH) {
    if (m == CUDNN_TENSOR_OP_MATH) return false;
    *run = CUDNN_FMA_MATH;
    return true;
  }
  *run = m;
  return true;
}

// Keeps the successful, usable results in cuDNN's order, each with its workspace under the
// math type it will run with; a result cuDNN cannot size is skipped.
template <class Perf, class Size>
void keep(const std::vector<Perf>& perf, int n, DnnQueue& s, cudnnMathType_t requested,
          Size workspace_size, std::vector<ConvAlgo>* out) {
  for (int i = 0; i < n && i < static_cast<int>(perf.size()); ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    cudnnMathType_t run = CUDNN_DEFAULT_MATH;
    if (p.status != CUDNN_STATUS_SUCCESS || !usable(p.mathType, requested, &run)) continue;
    bool seen = false;
    for (const ConvAlgo& a : *out)
      seen = seen || (a.algo == static_cast<int>(p.algo) && a.math == run);
    if (seen) continue;
    if (cudnn().cudnnSetConvolutionMathType(s.conv, run) != CUDNN_STATUS_SUCCESS) continue;
    size_t bytes = 0;
    if (workspace_size(p.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
    out->push_back({static_cast<int>(p.algo), run, bytes});
  }
}

#define KILN_DNN_SETUP(call, ...)                                             \
  if (cudnnStatus_t st_ = api.call(__VA_ARGS__); st_ != CUDNN_STATUS_SUCCESS) \
    return dnn_fail(st_, #call, true);

kiln_status heuristics(DnnQueue& s, ConvDir dir, cudnnMathType_t math, std::vector<ConvAlgo>* out) {
  const CudnnApi& api = cudnn();
  int max = 0, n = 0;
  switch (dir) {
    case ConvDir::forward: {
      KILN_DNN_SETUP(cudnnGetConvolutionForwardAlgorithmMaxCount, s.handle, &max);
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max > 0 ? max : 0));
      KILN_DNN_SETUP(cudnnGetConvolutionForwardAlgorithm_v7, s.handle, s.x, s.w, s.conv, s.y, max,
                     &n, perf.data());
      keep(
          perf, n, s, math,
          [&](cudnnConvolutionFwdAlgo_t algo, size_t* bytes) {
            return api.cudnnGetConvolutionForwardWorkspaceSize(s.handle, s.x, s.w, s.conv, s.y,
                                                               algo, bytes);
          },
          out);
      break;
    }
    case ConvDir::backward_data: {
      KILN_DNN_SETUP(cudnnGetConvolutionBackwardDataAlgorithmMaxCount, s.handle, &max);
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max > 0 ? max : 0));
      KILN_DNN_SETUP(cudnnGetConvolutionBackwardDataAlgorithm_v7, s.handle, s.w, s.y, s.conv, s.x,
                     max, &n, perf.data());
      keep(
          perf, n, s, math,
          [&](cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
            return api.cudnnGetConvolutionBackwardDataWorkspaceSize(s.handle, s.w, s.y, s.conv, s.x,
                                                                    algo, bytes);
          },
          out);
      break;
    }
    case ConvDir::backward_filter: {
      KILN_DNN_SETUP(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount, s.handle, &max);
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max > 0 ? max : 0));
      KILN_DNN_SETUP(cudnnGetConvolutionBackwardFilterAlgorithm_v7, s.handle, s.x, s.y, s.conv, s.w,
                     max, &n, perf.data());
      keep(
          perf, n, s, math,
          [&](cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
            return api.cudnnGetConvolutionBackwardFilterWorkspaceSize(s.handle, s.x, s.y, s.conv,
                                                                      s.w, algo, bytes);
          },
          out);
      break;
    }
  }
  return KILN_OK;
}

// Whether the call overwrites its output (beta 0): only then may candidates run on it.
bool overwrites(const kiln_dnn_conv_desc& d) {
  if (d.dtype == KILN_DTYPE_F64) return *static_cast<const double*>(d.beta) == 0.0;
  return *static_cast<const float*>(d.beta) == 0.f;
}

// Times the first kTimed candidates (best of two runs each: the first may load modules) and
// moves them into the order of their times; one that fails to run goes last. KILN_DNN_TIMING=0
// keeps cuDNN's heuristic order. Failures to time leave the order as it is.
constexpr size_t kTimed = 8;
void order_by_time(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir,
                   std::vector<ConvAlgo>& found) {
  const char* env = std::getenv("KILN_DNN_TIMING");
  if (found.size() < 2 || !overwrites(d) || (env && std::strcmp(env, "0") == 0)) return;
  CUevent e0 = nullptr, e1 = nullptr;
  if (g_cu.cuEventCreate(&e0, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return;
  if (g_cu.cuEventCreate(&e1, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    g_cu.cuEventDestroy(e0);
    return;
  }
  const size_t n = std::min(found.size(), kTimed);
  std::vector<float> ms(n, std::numeric_limits<float>::infinity());
  bool timed = true;
  for (size_t i = 0; i < n && timed; ++i) {
    if (reserve_workspace(q, s, found[i].workspace) != KILN_OK ||
        cudnn().cudnnSetConvolutionMathType(s.conv, found[i].math) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int rep = 0; rep < 2; ++rep) {
      float t = 0;
      timed = g_cu.cuEventRecord(e0, q->stream) == CUDA_SUCCESS;
      const cudnnStatus_t st = run_conv(s, d, dir, found[i]);
      timed = timed && g_cu.cuEventRecord(e1, q->stream) == CUDA_SUCCESS &&
              g_cu.cuEventSynchronize(e1) == CUDA_SUCCESS &&
              g_cu.cuEventElapsedTime(&t, e0, e1) == CUDA_SUCCESS;
      if (st != CUDNN_STATUS_SUCCESS || !timed) break;
      ms[i] = std::min(ms[i], t);
    }
  }
  g_cu.cuEventDestroy(e0);
  g_cu.cuEventDestroy(e1);
  if (!timed) return;
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return ms[a] < ms[b]; });
  std::vector<ConvAlgo> sorted;
  for (size_t i : order) sorted.push_back(found[i]);
  std::copy(sorted.begin(), sorted.end(), found.begin());
}

}  // namespace

kiln_status conv_algos(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir,
                       cudnnMathType_t math, const std::vector<ConvAlgo>** out) {
  const AlgoKey key{static_cast<uint64_t>(q->dev->index), static_cast<uint64_t>(dir),
                    static_cast<uint64_t>(d.dtype), static_cast<uint64_t>(math), conv_shape(d)};
  AlgoCache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (auto it = c.map.find(key); it != c.map.end()) {
      *out = &it->second;
      return KILN_OK;
    }
  }
  // Outside the cache's lock: other queues' shapes need not wait. Two queues may measure the
  // same shape at once; the first to finish is kept.
  std::vector<ConvAlgo> found;
  if (kiln_status st = heuristics(s, dir, math, &found)) return st;
  order_by_time(q, s, d, dir, found);
  std::lock_guard<std::mutex> lock(c.mu);
  *out = &c.map.emplace(key, std::move(found)).first->second;
  return KILN_OK;
}

kiln_status free_workspace(kiln_queue_h q, DnnQueue& s) noexcept {
  if (!s.ws) return KILN_OK;
  if (q->dev->live_graphs.load() > 0) {  // a graph may replay with this address: retire it
    try {
      std::lock_guard<std::mutex> lock(q->dev->retired_mu);
      q->dev->retired.push_back(s.ws);
    } catch (...) {
      return set_error(KILN_ERR_OUT_OF_MEMORY, "retiring the cuDNN workspace");
    }
    s.ws = 0;
    s.ws_bytes = 0;
    return KILN_OK;
  }
  CUresult r;
  const char* call = "cuMemFreeAsync";
  if (q->dev->pool) {
    r = g_cu.cuMemFreeAsync(s.ws, q->stream);
  } else {  // cuMemAlloc'ed: wait for the work that may still use it
    call = "cuStreamSynchronize";
    r = g_cu.cuStreamSynchronize(q->stream);
    if (r == CUDA_SUCCESS) {
      call = "cuMemFree";
      r = g_cu.cuMemFree(s.ws);
    }
  }
  s.ws = 0;
  s.ws_bytes = 0;
  if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED)
    return cu_fail(r, call, "freeing the cuDNN workspace");
  return KILN_OK;
}

kiln_status reserve_workspace(kiln_queue_h q, DnnQueue& s, size_t bytes) noexcept {
  if (bytes <= s.ws_bytes) return KILN_OK;
  constexpr size_t grain = size_t{1} << 20;  // whole MiB: fewer regrowths for nearby shapes
  if (bytes > SIZE_MAX - grain)
    return set_error(KILN_ERR_OUT_OF_MEMORY, "cuDNN workspace of %zu bytes", bytes);
  const size_t size = (bytes + grain - 1) / grain * grain;
  // Free first: in stream order the pool may hand the same memory back at once.
  if (kiln_status st = free_workspace(q, s)) return st;
  CUdeviceptr p = 0;
  CUresult r;
  const char* call = "cuMemAllocFromPoolAsync";
  if (q->dev->pool) {
    r = g_cu.cuMemAllocFromPoolAsync(&p, size, q->dev->pool, q->stream);
  } else {
    call = "cuMemAlloc";
    r = g_cu.cuMemAlloc(&p, size);
  }
  if (r != CUDA_SUCCESS) return cu_fail(r, call, "the cuDNN workspace");
  s.ws = p;
  s.ws_bytes = size;
  return KILN_OK;
}

}  // namespace kiln_cuda
#endif  // KILN_HAVE_CUDNN
