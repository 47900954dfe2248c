// The "dnn" extension's convolutions through cuDNN's graph (backend) API, the path PyTorch takes
// through cudnn-frontend: its engines are often several times faster than what the legacy
// heuristics pick (bf16 backward filter up to 25x on the H100). One operation graph per call
// shape; engine configs from heuristics mode A (then the fallback list), filtered by numerical
// notes; execution plans for the first few, timed once on the call's own operands when it
// overwrites its output; the fastest cached per queue (plans belong to the queue's handle).
// Any failure leaves the call to the legacy path (dnn.cpp), which runs exactly as before.
#ifdef KILN_HAVE_CUDNN
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "dnn_backend.hpp"

namespace kiln_cuda {

struct GraphPlans;

namespace {

// Tensor unique ids in the variant pack.
constexpr int64_t kX = 'x', kW = 'w', kY = 'y';

kiln_status tensor(cudnnDataType_t dt, const std::array<int64_t, 4>& dims, int64_t uid,
                   int64_t align, Desc* out) {
  const std::array<int64_t, 4> strides{dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1};
  if (kiln_status st = backend_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, out)) return st;
  return Setter(*out)(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt)(
             CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())(
             CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())(
             CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)(
             CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align)
      .finalize();
}

// The operation graph of one convolution and everything it refers to, kept alive with the plan.
struct Graph {
  Desc x, w, y, conv, op, graph;
  void leak() {
    for (Desc* d : {&x, &w, &y, &conv, &op, &graph}) d->leak();
  }
};

bool is_f64(const kiln_dnn_conv_desc& d) { return d.dtype == KILN_DTYPE_F64; }

// Builds the graph. Groups are implied, as in cudnn-frontend: x has c channels, w has c / groups.
kiln_status build_graph(cudnnHandle_t handle, const kiln_dnn_conv_desc& d, ConvDir dir, Graph* g) {
  const auto i64 = [](uint64_t v) { return static_cast<int64_t>(v); };
  const cudnnDataType_t dt = data_type(d.dtype);
  // 16-bit tensors compute in f32 (as the legacy path and PyTorch do).
  const cudnnDataType_t compute = is_f64(d) ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (kiln_status st = tensor(dt, {i64(d.n), i64(d.c), i64(d.h), i64(d.w)}, kX,
                              byte_alignment(dptr(d.x)), &g->x))
    return st;
  if (kiln_status st = tensor(dt, {i64(d.k), i64(d.c / d.groups), i64(d.r), i64(d.s)}, kW,
                              byte_alignment(dptr(d.wt)), &g->w))
    return st;
  if (kiln_status st = tensor(dt, {i64(d.n), i64(d.k), i64(d.p), i64(d.q)}, kY,
                              byte_alignment(dptr(d.y)), &g->y))
    return st;

  const int64_t spatial = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::array<int64_t, 2> dil{d.dil_h, d.dil_w}, stride{d.stride_h, d.stride_w},
      pad{d.pad_h, d.pad_w};
  if (kiln_status st = backend_create(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &g->conv)) return st;
  if (kiln_status st =
          Setter(g->conv)(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial)(
              CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)(
              CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)(
              CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil.data())(
              CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, stride.data())(
              CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data())(
              CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad.data())
              .finalize())
    return st;

  // Alpha and beta are baked into the operation: host values of the compute type.
  const cudnnBackendAttributeType_t scalar = is_f64(d) ? CUDNN_TYPE_DOUBLE : CUDNN_TYPE_FLOAT;
  cudnnBackendDescriptorType_t op_type = CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR;
  // Attributes alpha, beta, conv and the three tensors in the order x, w, y.
  std::array<cudnnBackendAttributeName_t, 6> a{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                               CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
  if (dir == ConvDir::backward_data) {
    op_type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR;
    a = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
  } else if (dir == ConvDir::backward_filter) {
    op_type = CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR;
    a = {CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  }
  const cudnnBackendDescriptor_t conv = g->conv.get(), x = g->x.get(), w = g->w.get(),
                                 y = g->y.get();
  if (kiln_status st = backend_create(op_type, &g->op)) return st;
  if (kiln_status st = Setter(g->op)(a[0], scalar, 1, d.alpha)(a[1], scalar, 1, d.beta)(
                           a[2], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &conv)(
                           a[3], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x)(
                           a[4], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w)(
                           a[5], CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y)
                           .finalize())
    return st;

  const cudnnBackendDescriptor_t op = g->op.get();
  if (kiln_status st = backend_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g->graph))
    return st;
  return Setter(g->graph)(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op)(
             CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .finalize();
}

// Whether an engine's numerical notes allow it for d: never down-converted inputs or reduced
// precision reduction (the ABI promises f32 accumulation); f32 without TF32 never tensor cores
// (TF32). 16-bit types and TF32 keep them.
bool allowed(const kiln_dnn_conv_desc& d, const Desc& engine) {
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  int64_t n = 0;
  if (cudnn().cudnnBackendGetAttribute(
          engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
          static_cast<int64_t>(notes.size()), &n, notes.data()) != CUDNN_STATUS_SUCCESS)
    return false;
  const bool fma_only = d.dtype == KILN_DTYPE_F32 && d.math_mode != KILN_DNN_MATH_TF32;
  for (int64_t i = 0; i < n && i < static_cast<int64_t>(notes.size()); ++i) {
    const cudnnBackendNumericalNote_t note = notes[static_cast<size_t>(i)];
    if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
        note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return false;
    if (fma_only && note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE) return false;
  }
  return true;
}

// The plan for engine config `cfg` when its notes allow it and cuDNN finalizes it.
bool make_plan(cudnnHandle_t handle, const kiln_dnn_conv_desc& d, Desc cfg, Plan* out) {
  const CudnnApi& api = cudnn();
  Desc engine;
  int64_t n = 0;
  if (backend_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) ||
      api.cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   engine.out()) != CUDNN_STATUS_SUCCESS ||
      !allowed(d, engine))
    return false;
  int64_t index = -1;
  api.cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                               &n, &index);
  return finalize_plan(handle, std::move(cfg), index, out);
}

// The variant pack of d's operands and the queue's workspace (already reserved).
cudnnStatus_t variant_pack(const DnnQueue& s, const kiln_dnn_conv_desc& d, Desc* vp) {
  const std::array<int64_t, 3> uids{kX, kW, kY};
  const std::array<void*, 3> ptrs{reinterpret_cast<void*>(dptr(d.x)),
                                  reinterpret_cast<void*>(dptr(d.wt)),
                                  reinterpret_cast<void*>(dptr(d.y))};
  return kiln_cuda::variant_pack(uids.data(), ptrs.data(), 3, reinterpret_cast<void*>(s.ws), vp);
}

// Queues plan p on d's operands (the workspace already reserved).
cudnnStatus_t execute(const DnnQueue& s, const Plan& p, const kiln_dnn_conv_desc& d) {
  Desc vp;
  const cudnnStatus_t st = variant_pack(s, d, &vp);
  return st == CUDNN_STATUS_SUCCESS ? cudnn().cudnnBackendExecute(s.handle, p.plan.get(), vp.get())
                                    : st;
}

// Whether the call overwrites its output (beta 0): only then may candidates run on it.
bool overwrites(const kiln_dnn_conv_desc& d) {
  if (is_f64(d)) return *static_cast<const double*>(d.beta) == 0.0;
  return *static_cast<const float*>(d.beta) == 0.f;
}

constexpr const char* kDirNames[] = {"conv_forward", "conv_backward_data", "conv_backward_filter"};

// Times each plan (best of two runs: the first may load modules) on d's operands; a plan that
// fails to run, or whose workspace cannot be had, times infinite. False when timing itself
// failed (the events).
bool time_plans(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d,
                const std::vector<Plan>& plans, std::vector<float>* ms) {
  ms->assign(plans.size(), std::numeric_limits<float>::infinity());
  CUevent e0 = nullptr, e1 = nullptr;
  if (g_cu.cuEventCreate(&e0, CU_EVENT_DEFAULT) != CUDA_SUCCESS) return false;
  if (g_cu.cuEventCreate(&e1, CU_EVENT_DEFAULT) != CUDA_SUCCESS) {
    g_cu.cuEventDestroy(e0);
    return false;
  }
  bool timed = true;
  for (size_t i = 0; i < plans.size() && timed; ++i) {
    // The variant pack is made before the first event: only the GPU's work is timed.
    Desc vp;
    if (reserve_workspace(q, s, plans[i].workspace) != KILN_OK ||
        variant_pack(s, d, &vp) != CUDNN_STATUS_SUCCESS)
      continue;
    for (int rep = 0; rep < 2; ++rep) {
      float t = 0;
      timed = g_cu.cuEventRecord(e0, q->stream) == CUDA_SUCCESS;
      const cudnnStatus_t st = cudnn().cudnnBackendExecute(s.handle, plans[i].plan.get(), vp.get());
      timed = timed && g_cu.cuEventRecord(e1, q->stream) == CUDA_SUCCESS &&
              g_cu.cuEventSynchronize(e1) == CUDA_SUCCESS &&
              g_cu.cuEventElapsedTime(&t, e0, e1) == CUDA_SUCCESS;
      if (st != CUDNN_STATUS_SUCCESS || !timed) break;
      (*ms)[i] = std::min((*ms)[i], t);
    }
  }
  g_cu.cuEventDestroy(e0);
  g_cu.cuEventDestroy(e1);
  return timed;
}

// Direction, dtype, TF32, every shape field, alpha and beta (their bits) and the operands'
// alignments: everything a plan depends on but the pointers. Per queue, so no device.
using GraphKey = std::tuple<uint64_t, uint64_t, uint64_t, ConvShape, uint64_t, uint64_t, uint64_t,
                            uint64_t, uint64_t>;

uint64_t scalar_bits(const kiln_dnn_conv_desc& d, const void* v) {
  if (is_f64(d)) {
    uint64_t b;
    std::memcpy(&b, v, sizeof b);
    return b;
  }
  uint32_t b;
  std::memcpy(&b, v, sizeof b);
  return b;
}

GraphKey key_of(const kiln_dnn_conv_desc& d, ConvDir dir) {
  return {static_cast<uint64_t>(dir),
          static_cast<uint64_t>(d.dtype),
          d.dtype == KILN_DTYPE_F32 && d.math_mode == KILN_DNN_MATH_TF32,
          conv_shape(d),
          scalar_bits(d, d.alpha),
          scalar_bits(d, d.beta),
          static_cast<uint64_t>(byte_alignment(dptr(d.x))),
          static_cast<uint64_t>(byte_alignment(dptr(d.wt))),
          static_cast<uint64_t>(byte_alignment(dptr(d.y)))};
}

// The chosen plan for one key; null plan: cuDNN's graph API has none (the legacy path runs).
struct Entry {
  Graph graph;
  std::unique_ptr<Plan> plan;
  std::string why;  // without a plan
};

}  // namespace

struct GraphPlans {
  std::map<GraphKey, Entry> map;
};

namespace {

// Plans built (and, when the call overwrites its output, timed) per shape; at most this many,
// and no more once building has taken kBuildBudget: an engine compiled at run time (NVRTC) may
// take a second to finalize, and a network has dozens of shapes.
constexpr size_t kCandidates = 8;
constexpr std::chrono::milliseconds kBuildBudget{500};

// Chooses the plan for d: the fastest of the first kCandidates that finalize, or the first when
// the call accumulates into its output or KILN_DNN_TIMING=0.
kiln_status choose(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir,
                   Entry* e) {
  if (kiln_status st = build_graph(s.handle, d, dir, &e->graph)) return st;
  const bool timing = overwrites(d) && !env_is("KILN_DNN_TIMING", "0");
  const auto start = std::chrono::steady_clock::now();
  std::vector<Plan> plans;
  size_t offered = 0;
  set_error(KILN_OK, "%s", "");  // so a refusal below names only its own causes
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> cfgs;
    if (kiln_status st = engine_configs(e->graph.graph, mode, &cfgs)) {
      if (mode == CUDNN_HEUR_MODE_A) continue;  // the fallback list may still have one
      if (plans.empty()) return st;
      break;
    }
    offered += cfgs.size();
    for (Desc& c : cfgs) {
      Plan p;
      if (!make_plan(s.handle, d, std::move(c), &p)) continue;
      // A workspace that cannot be had rules the plan out (the next one may need less).
      if (reserve_workspace(q, s, p.workspace) != KILN_OK) continue;
      plans.push_back(std::move(p));
      if (plans.size() == (timing ? kCandidates : 1) ||
          std::chrono::steady_clock::now() - start > kBuildBudget)
        break;
    }
    if (!plans.empty()) break;
  }
  if (plans.empty()) {
    const std::string last = last_error();  // the last refusal, if any (set_error overwrites it)
    return set_error(KILN_ERR_UNSUPPORTED,
                     "cuDNN graph API: of %zu engine configs offered, none is allowed by its "
                     "numerical notes and finalizes%s%s",
                     offered, last.empty() ? "" : "; last refusal: ", last.c_str());
  }
  size_t best = 0;
  std::vector<float> ms;
  if (plans.size() > 1 && !time_plans(q, s, d, plans, &ms)) ms.clear();  // heuristic order
  if (!ms.empty()) {
    best = static_cast<size_t>(std::min_element(ms.begin(), ms.end()) - ms.begin());
    if (!(ms[best] < std::numeric_limits<float>::infinity()))
      return set_error(KILN_ERR_UNSUPPORTED, "cuDNN graph API: no plan ran");
  }
  e->plan = std::make_unique<Plan>(std::move(plans[best]));
  debug_log(
      "%s dtype %d n%llu c%llu %llux%llu k%llu %llux%llu g%u: graph engine %lld (%s%zu plans)",
      kDirNames[static_cast<int>(dir)], static_cast<int>(d.dtype),
      static_cast<unsigned long long>(d.n), static_cast<unsigned long long>(d.c),
      static_cast<unsigned long long>(d.h), static_cast<unsigned long long>(d.w),
      static_cast<unsigned long long>(d.k), static_cast<unsigned long long>(d.r),
      static_cast<unsigned long long>(d.s), d.groups, static_cast<long long>(e->plan->engine),
      ms.empty() ? "first of " : "fastest of ", plans.size());
  return KILN_OK;
}

}  // namespace

bool graph_enabled() { return cudnn().graph && !env_is("KILN_CUDNN_GRAPH", "0"); }

kiln_status graph_conv(kiln_queue_h q, DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir) {
  if (!graph_enabled())
    return set_error(KILN_ERR_UNSUPPORTED, "cuDNN graph API off (KILN_CUDNN_GRAPH=0 or missing)");
  if (!s.graph) s.graph = new GraphPlans;
  const GraphKey key = key_of(d, dir);
  auto it = s.graph->map.find(key);
  if (it == s.graph->map.end()) {
    it = s.graph->map.emplace(key, Entry{}).first;
    kiln_status st = KILN_OK;
    try {
      st = choose(q, s, d, dir, &it->second);
    } catch (...) {  // std::bad_alloc: no entry, so a later call tries again
      s.graph->map.erase(it);
      throw;
    }
    if (st) {
      it->second.why = last_error();
      it->second.plan.reset();
      debug_log("%s dtype %d: graph API refused (%s); the legacy API runs",
                kDirNames[static_cast<int>(dir)], static_cast<int>(d.dtype),
                it->second.why.c_str());
      return st;
    }
  }
  const Entry& e = it->second;
  if (!e.plan) return set_error(KILN_ERR_UNSUPPORTED, "cuDNN graph API: %s", e.why.c_str());
  if (kiln_status st = reserve_workspace(q, s, e.plan->workspace)) return st;
  if (cudnnStatus_t st = execute(s, *e.plan, d); st != CUDNN_STATUS_SUCCESS) {
    const kiln_status k = dnn_fail(st, "cudnnBackendExecute", false);
    debug_log("%s: %s; the legacy API runs", kDirNames[static_cast<int>(dir)], last_error());
    return k;
  }
  return KILN_OK;
}

void graph_release(DnnQueue& s, bool device) noexcept { release_plans(s.graph, device); }

}  // namespace kiln_cuda
#endif  // KILN_HAVE_CUDNN
