// The "dnn" extension's fused attention through cuDNN's graph (backend) API: the operation
// graphs cudnn-frontend builds for its SDPA nodes (what PyTorch's cuDNN attention runs), which
// cuDNN's runtime-fusion engines recognise as flash attention and run on tensor cores.
//
//   forward:  S = Q K^T (f32), S * scale, [causal: S where row >= col, else -inf], softmax
//             with its row statistics written (Stats = max + log(sum exp)), O = P V;
//   backward: the same recomputed from Stats, with dO, O -> dQ, dK, dV.
//
// One graph and plan per call shape (sizes, strides, alignments, causal, dtype) and queue, built
// on first use: the first engine config heuristics offer that finalizes with a workspace that
// can be had. A refusal is cached too (the core then computes attention itself).
#ifdef KILN_HAVE_CUDNN
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dnn_backend.hpp"

namespace kiln_cuda {
namespace {

// Tensor unique ids in the variant pack (and for the virtual tensors, ids above kVirtual).
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kDO,
  kDQ,
  kDK,
  kDV,
  kMinusInf,
  kOne,
  kSoftmaxSum,  // backward: rowsum(dO * O), f32, in the workspace
  kDqAccum,     // backward: dQ accumulated in f32, in the workspace
  kVirtual = 100,
};

using Dims = std::array<int64_t, 4>;

// The descriptors of one graph, kept alive with its plan (tensors, operations and the graph
// refer to each other by handle).
struct Graph {
  std::vector<Desc> keep;  // tensors and operation-specific descriptors
  std::vector<Desc> ops;
  Desc graph;
  int64_t next_virtual = kVirtual;
  void leak() {
    for (Desc& d : keep) d.leak();
    for (Desc& d : ops) d.leak();
    graph.leak();
  }
};

// A tensor descriptor added to g; null (the status recorded) when cuDNN refuses it.
cudnnBackendDescriptor_t tensor(Graph& g, kiln_status& st, cudnnDataType_t type, const Dims& dims,
                                const Dims& strides, int64_t uid, bool is_virtual,
                                bool by_value = false, int64_t align = 16) {
  if (st) return nullptr;
  Desc t;
  if ((st = backend_create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, &t))) return nullptr;
  st = Setter(t)(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)(
           CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())(
           CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())(
           CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
                                                                   CUDNN_TYPE_INT64, 1, &align)(
           CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual)(
           CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value)
           .finalize();
  if (st) return nullptr;
  g.keep.push_back(std::move(t));
  return g.keep.back().get();
}

// Row-major strides of dims (a virtual tensor's layout).
Dims packed(const Dims& d) { return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1}; }

// A virtual f32 (or other type) tensor of dims.
cudnnBackendDescriptor_t virt(Graph& g, kiln_status& st, const Dims& dims,
                              cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  return tensor(g, st, type, dims, packed(dims), g.next_virtual++, true);
}

// A by-value scalar (attn scale, -inf): a host value in the variant pack.
cudnnBackendDescriptor_t scalar(Graph& g, kiln_status& st, int64_t uid) {
  return tensor(g, st, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, uid, false, true);
}

// An operation of `type` over `tensors` (attribute, tensor; a null tensor is left unset) added to
// g, with its operation-specific descriptor `desc` (pointwise, reduction, matmul; none for a
// reshape) set first as attribute `desc_attr` and kept with g.
using TensorAttrs =
    std::initializer_list<std::pair<cudnnBackendAttributeName_t, cudnnBackendDescriptor_t>>;
void add_op(Graph& g, kiln_status& st, cudnnBackendDescriptorType_t type, TensorAttrs tensors,
            Desc desc = {}, cudnnBackendAttributeName_t desc_attr = {}) {
  if (st) return;
  Desc o;
  if ((st = backend_create(type, &o))) return;
  Setter set(o);
  if (desc.get()) set(desc_attr, desc);
  for (const auto& [name, t] : tensors)
    if (t) set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  if ((st = set.finalize())) return;
  if (desc.get()) g.keep.push_back(std::move(desc));
  g.ops.push_back(std::move(o));
}

// A finalized operation-specific descriptor of `type` with f32 compute attribute `compute` (and
// `more`, when given, setting its other attributes first); empty when cuDNN refuses it.
template <class More>
Desc op_desc(kiln_status& st, cudnnBackendDescriptorType_t type,
             cudnnBackendAttributeName_t compute, More more) {
  Desc d;
  if (st || (st = backend_create(type, &d))) return {};
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  Setter set(d);
  more(set);
  if ((st = set(compute, CUDNN_TYPE_DATA_TYPE, 1, &f32).finalize())) return {};
  return d;
}

// Pointwise mode on x (and y, and the select's mask t) into out.
void pointwise(Graph& g, kiln_status& st, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t y, cudnnBackendDescriptor_t out,
               cudnnBackendDescriptor_t t = nullptr, int64_t axis = -1,
               cudnnDataType_t math = CUDNN_DATA_FLOAT) {
  if (st) return;
  Desc pw;
  if ((st = backend_create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw))) return;
  Setter s(pw);
  s(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)(CUDNN_ATTR_POINTWISE_MATH_PREC,
                                                                    CUDNN_TYPE_DATA_TYPE, 1, &math);
  if (axis >= 0) s(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  if ((st = s.finalize())) return;
  add_op(g, st, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x},
          {CUDNN_ATTR_OPERATION_POINTWISE_BDESC, y},
          {CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t},
          {CUDNN_ATTR_OPERATION_POINTWISE_YDESC, out}},
         std::move(pw), CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR);
}

// Reduction (ADD or MAX) of x into out (out's size-1 dimensions are the reduced ones).
void reduction(Graph& g, kiln_status& st, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
               cudnnBackendDescriptor_t out) {
  Desc r = op_desc(
      st, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, CUDNN_ATTR_REDUCTION_COMP_TYPE, [&](Setter& set) {
        set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
      });
  add_op(g, st, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x}, {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, out}},
         std::move(r), CUDNN_ATTR_OPERATION_REDUCTION_DESC);
}

// Batched product a (M x K) b (K x N) -> c, f32 accumulation.
void matmul(Graph& g, kiln_status& st, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
            cudnnBackendDescriptor_t c) {
  Desc m =
      op_desc(st, CUDNN_BACKEND_MATMUL_DESCRIPTOR, CUDNN_ATTR_MATMUL_COMP_TYPE, [](Setter&) {});
  add_op(g, st, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, a},
          {CUDNN_ATTR_OPERATION_MATMUL_BDESC, b},
          {CUDNN_ATTR_OPERATION_MATMUL_CDESC, c}},
         std::move(m), CUDNN_ATTR_OPERATION_MATMUL_DESC);
}

// x described as y (a transpose: the same elements, dims and strides permuted).
void reshape(Graph& g, kiln_status& st, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  add_op(g, st, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
         {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y}});
}

// The operation graph of g's operations on the handle.
kiln_status finish(cudnnHandle_t handle, Graph& g) {
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const Desc& d : g.ops) raw.push_back(d.get());
  if (kiln_status st = backend_create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &g.graph)) return st;
  return Setter(g.graph)(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                         static_cast<int64_t>(raw.size()), raw.data())(
             CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)
      .finalize();
}

int64_t i64(uint64_t v) { return static_cast<int64_t>(v); }

// A [batch, heads, rows, cols] view's dims and strides.
Dims dims_of(const kiln_dnn_attention_desc& d, uint64_t rows, uint64_t cols) {
  return {i64(d.batch), i64(d.heads), i64(rows), i64(cols)};
}
Dims strides_of(const kiln_dnn_view& v) { return {v.stride[0], v.stride[1], v.stride[2], 1}; }

// The statistics: [batch, heads, lq, 1] f32, contiguous.
Dims stats_dims(const kiln_dnn_attention_desc& d) { return dims_of(d, d.lq, 1); }

// Where causal, x kept where row >= col, else -inf (cudnn-frontend's causal mask); else x.
cudnnBackendDescriptor_t causal_mask(Graph& g, kiln_status& st, const kiln_dnn_attention_desc& d,
                                     cudnnBackendDescriptor_t x) {
  if (!d.causal) return x;
  const Dims sd = dims_of(d, d.lq, d.lk);
  cudnnBackendDescriptor_t row = virt(g, st, sd, CUDNN_DATA_INT32);
  pointwise(g, st, CUDNN_POINTWISE_GEN_INDEX, x, nullptr, row, nullptr, 2, CUDNN_DATA_INT32);
  cudnnBackendDescriptor_t col = virt(g, st, sd, CUDNN_DATA_INT32);
  pointwise(g, st, CUDNN_POINTWISE_GEN_INDEX, x, nullptr, col, nullptr, 3, CUDNN_DATA_INT32);
  cudnnBackendDescriptor_t keep = virt(g, st, sd, CUDNN_DATA_BOOLEAN);
  pointwise(g, st, CUDNN_POINTWISE_CMP_GE, row, col, keep, nullptr, -1, CUDNN_DATA_BOOLEAN);
  cudnnBackendDescriptor_t masked = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_BINARY_SELECT, x, scalar(g, st, kMinusInf), masked, keep);
  return masked;
}

// The scaled scores scale Q K^T (f32, virtual).
cudnnBackendDescriptor_t scaled_scores(Graph& g, kiln_status& st, const kiln_dnn_attention_desc& d,
                                       cudnnBackendDescriptor_t q, cudnnBackendDescriptor_t kt,
                                       cudnnBackendDescriptor_t scale) {
  const Dims sd = dims_of(d, d.lq, d.lk);
  cudnnBackendDescriptor_t s = virt(g, st, sd);
  matmul(g, st, q, kt, s);
  cudnnBackendDescriptor_t scaled = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_MUL, s, scale, scaled);
  return scaled;
}

// An operand transposed in its last two dimensions: the same memory (uid) described with its
// dims and strides swapped.
cudnnBackendDescriptor_t transposed(Graph& g, kiln_status& st, cudnnDataType_t dt,
                                    const kiln_dnn_attention_desc& d, const kiln_dnn_view& v,
                                    uint64_t rows, uint64_t cols, int64_t uid) {
  return tensor(g, st, dt, dims_of(d, cols, rows), {v.stride[0], v.stride[1], 1, v.stride[2]}, uid,
                false);
}

// The forward graph: O and Stats from Q, K, V.
kiln_status build_forward(cudnnHandle_t handle, const kiln_dnn_attention_desc& d, Graph& g) {
  kiln_status st = KILN_OK;
  const cudnnDataType_t dt = data_type(d.dtype);
  cudnnBackendDescriptor_t q =
      tensor(g, st, dt, dims_of(d, d.lq, d.d_qk), strides_of(d.q), kQ, false);
  cudnnBackendDescriptor_t kt = transposed(g, st, dt, d, d.k, d.lk, d.d_qk, kK);
  cudnnBackendDescriptor_t v =
      tensor(g, st, dt, dims_of(d, d.lk, d.d_v), strides_of(d.v), kV, false);
  cudnnBackendDescriptor_t o =
      tensor(g, st, dt, dims_of(d, d.lq, d.d_v), strides_of(d.o), kO, false);
  cudnnBackendDescriptor_t stats =
      tensor(g, st, CUDNN_DATA_FLOAT, stats_dims(d), packed(stats_dims(d)), kStats, false);
  cudnnBackendDescriptor_t s =
      causal_mask(g, st, d, scaled_scores(g, st, d, q, kt, scalar(g, st, kScale)));
  // Softmax with statistics: max, exp(s - max), sum, stats = max + log(sum), p = e / sum.
  const Dims sd = dims_of(d, d.lq, d.lk), rd = stats_dims(d);
  cudnnBackendDescriptor_t mx = virt(g, st, rd);
  reduction(g, st, CUDNN_REDUCE_TENSOR_MAX, s, mx);
  cudnnBackendDescriptor_t centred = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_SUB, s, mx, centred);
  cudnnBackendDescriptor_t e = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_EXP, centred, nullptr, e);
  cudnnBackendDescriptor_t sum = virt(g, st, rd);
  reduction(g, st, CUDNN_REDUCE_TENSOR_ADD, e, sum);
  cudnnBackendDescriptor_t log_sum = virt(g, st, rd);
  pointwise(g, st, CUDNN_POINTWISE_LOG, sum, nullptr, log_sum);
  pointwise(g, st, CUDNN_POINTWISE_ADD, log_sum, mx, stats);
  // The probabilities in the storage type: the second product's operand on tensor cores.
  cudnnBackendDescriptor_t p = virt(g, st, sd, dt);
  pointwise(g, st, CUDNN_POINTWISE_DIV, e, sum, p);
  matmul(g, st, p, v, o);
  return st ? st : finish(handle, g);
}

// The backward graph: dQ, dK, dV from Q, K, V, O, dO and Stats (cudnn-frontend's, with dQ
// accumulated in f32 in the workspace and converted at the end, as PyTorch runs it):
//   Dsum = rowsum(dO * O); P = exp(mask(scale Q K^T - Stats)); dV = P^T dO;
//   dS = P * (dO V^T - Dsum) * scale; dK = dS^T Q; dQ = dS K.
kiln_status build_backward(cudnnHandle_t handle, const kiln_dnn_attention_desc& d, Graph& g) {
  kiln_status st = KILN_OK;
  const cudnnDataType_t dt = data_type(d.dtype), f32 = CUDNN_DATA_FLOAT;
  const Dims qd = dims_of(d, d.lq, d.d_qk), od = dims_of(d, d.lq, d.d_v);
  const Dims sd = dims_of(d, d.lq, d.lk), rd = stats_dims(d);
  cudnnBackendDescriptor_t q = tensor(g, st, dt, qd, strides_of(d.q), kQ, false);
  cudnnBackendDescriptor_t kt = transposed(g, st, dt, d, d.k, d.lk, d.d_qk, kK);
  cudnnBackendDescriptor_t vt = transposed(g, st, dt, d, d.v, d.lk, d.d_v, kV);
  cudnnBackendDescriptor_t o = tensor(g, st, dt, od, strides_of(d.o), kO, false);
  cudnnBackendDescriptor_t d_o = tensor(g, st, dt, od, strides_of(d.grad_o), kDO, false);
  cudnnBackendDescriptor_t stats = tensor(g, st, f32, rd, packed(rd), kStats, false);
  cudnnBackendDescriptor_t dq = tensor(g, st, dt, qd, strides_of(d.grad_q), kDQ, false);
  cudnnBackendDescriptor_t dk =
      tensor(g, st, dt, dims_of(d, d.lk, d.d_qk), strides_of(d.grad_k), kDK, false);
  cudnnBackendDescriptor_t dv =
      tensor(g, st, dt, dims_of(d, d.lk, d.d_v), strides_of(d.grad_v), kDV, false);
  cudnnBackendDescriptor_t scale = scalar(g, st, kScale);
  cudnnBackendDescriptor_t softmax_sum = tensor(g, st, f32, rd, packed(rd), kSoftmaxSum, false);
  cudnnBackendDescriptor_t dq_accum = tensor(g, st, f32, qd, packed(qd), kDqAccum, false);

  // Dsum = rowsum(dO * O) (times 1: the frontend's dropout slot).
  cudnnBackendDescriptor_t prod = virt(g, st, od);
  pointwise(g, st, CUDNN_POINTWISE_MUL, d_o, o, prod);
  cudnnBackendDescriptor_t rowsum = virt(g, st, rd);
  reduction(g, st, CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
  pointwise(g, st, CUDNN_POINTWISE_MUL, rowsum, scalar(g, st, kOne), softmax_sum);
  // P = exp(mask(scale Q K^T - Stats)): the statistics subtracted before the mask.
  cudnnBackendDescriptor_t s = scaled_scores(g, st, d, q, kt, scale);
  cudnnBackendDescriptor_t centred = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_SUB, s, stats, centred);
  cudnnBackendDescriptor_t p = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_EXP, causal_mask(g, st, d, centred), nullptr, p);
  // dV = P^T dO (P^T: a reshape to the storage type).
  const Dims td = dims_of(d, d.lk, d.lq);
  const Dims ts = {td[1] * td[2] * td[3], td[2] * td[3], 1, i64(d.lk)};
  cudnnBackendDescriptor_t pt = tensor(g, st, dt, td, ts, g.next_virtual++, true);
  reshape(g, st, p, pt);
  matmul(g, st, pt, d_o, dv);
  // dS = P * (dO V^T - Dsum) * scale.
  cudnnBackendDescriptor_t dp = virt(g, st, sd);
  matmul(g, st, d_o, vt, dp);
  cudnnBackendDescriptor_t dp_centred = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_SUB, dp, softmax_sum, dp_centred);
  cudnnBackendDescriptor_t dsp = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_MUL, dp_centred, p, dsp);
  cudnnBackendDescriptor_t ds = virt(g, st, sd);
  pointwise(g, st, CUDNN_POINTWISE_MUL, dsp, scale, ds);
  // dK = dS^T Q.
  cudnnBackendDescriptor_t dst = tensor(g, st, dt, td, ts, g.next_virtual++, true);
  reshape(g, st, ds, dst);
  matmul(g, st, dst, q, dk);
  // dQ = dS K: K back from K^T by a reshape, accumulated in f32, then stored.
  cudnnBackendDescriptor_t k =
      tensor(g, st, f32, dims_of(d, d.lk, d.d_qk), strides_of(d.k), g.next_virtual++, true);
  reshape(g, st, kt, k);
  matmul(g, st, ds, k, dq_accum);
  pointwise(g, st, CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, dq);
  return st ? st : finish(handle, g);
}

// The backward's f32 tensors of the graph (dQ accumulated, rowsum(dO * O)) at the start of the
// workspace, each on 256 bytes, as cudnn-frontend places them; the engine's workspace follows.
struct Scratch {
  size_t accum = 0, sum = 0, total = 0;
};
Scratch scratch_of(const kiln_dnn_attention_desc& d, bool backward) {
  if (!backward) return {};
  const auto round = [](size_t b) { return (b + 255) / 256 * 256; };
  Scratch s;
  s.accum = round(d.batch * d.heads * d.lq * d.d_qk * sizeof(float));
  s.sum = round(d.batch * d.heads * d.lq * sizeof(float));
  s.total = s.accum + s.sum;
  return s;
}

// The plan for the first engine config heuristics offer that finalizes and whose workspace can
// be had.
kiln_status choose(kiln_queue_h q, DnnQueue& s, const Graph& g, size_t scratch, Plan* out) {
  size_t offered = 0;
  bool short_of_memory = false;  // a plan finalized but its workspace could not be had
  set_error(KILN_OK, "%s", "");
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<Desc> cfgs;
    if (engine_configs(g.graph, mode, &cfgs)) continue;
    offered += cfgs.size();
    for (Desc& c : cfgs) {
      const int64_t engine = engine_index(c);
      Plan p;
      if (!finalize_plan(s.handle, std::move(c), engine, &p)) continue;
      if (reserve_workspace(q, s, scratch + p.workspace) != KILN_OK) {
        short_of_memory = true;
        continue;
      }
      *out = std::move(p);
      return KILN_OK;
    }
  }
  const std::string last = last_error();
  if (short_of_memory)  // not a refusal to remember: a later call may have the memory
    return set_error(KILN_ERR_OUT_OF_MEMORY,
                     "cuDNN attention: no workspace for any plan that finalized%s%s",
                     last.empty() ? "" : "; ", last.c_str());
  return set_error(
      KILN_ERR_UNSUPPORTED,
      "cuDNN graph API: of %zu engine configs offered for attention, none finalizes%s%s", offered,
      last.empty() ? "" : "; last refusal: ", last.c_str());
}

// Everything a plan depends on but the pointers' values: direction, dtype, causal, sizes, every
// view's strides and alignment.
using Key = std::vector<int64_t>;

Key key_of(const kiln_dnn_attention_desc& d, bool backward) {
  Key k{backward,  d.dtype,   d.causal,    i64(d.batch), i64(d.heads),
        i64(d.lq), i64(d.lk), i64(d.d_qk), i64(d.d_v)};
  for (const kiln_dnn_view* v : attention_views(d, backward)) {
    k.insert(k.end(), {v->stride[0], v->stride[1], v->stride[2]});
    k.push_back(byte_alignment(dptr(v->mem)));
  }
  return k;
}

struct Entry {
  Graph graph;
  std::unique_ptr<Plan> plan;
  std::string why;    // without a plan
  uint64_t used = 0;  // the queue's call count at its last use
};

// Plans (and refusals) kept per queue: past this many shapes the least recently used goes, so
// a run of ever-new sequence lengths does not grow the cache without bound.
constexpr size_t kMaxPlans = 64;

void* ptr(const kiln_mem_ref& r) { return reinterpret_cast<void*>(dptr(r)); }

// Queues plan p on d's operands (the workspace reserved).
cudnnStatus_t execute(const DnnQueue& s, const Plan& p, const kiln_dnn_attention_desc& d,
                      bool backward) {
  float scale = d.scale, minus_inf = -std::numeric_limits<float>::infinity(), one = 1.f;
  std::vector<int64_t> uids{kQ, kK, kV, kO, kStats, kScale};
  std::vector<void*> ptrs{ptr(d.q.mem), ptr(d.k.mem), ptr(d.v.mem),
                          ptr(d.o.mem), ptr(d.stats), &scale};
  if (d.causal) {
    uids.push_back(kMinusInf);
    ptrs.push_back(&minus_inf);
  }
  const Scratch scratch = scratch_of(d, backward);
  if (backward) {
    uids.insert(uids.end(), {kDO, kDQ, kDK, kDV, kOne, kDqAccum, kSoftmaxSum});
    ptrs.insert(ptrs.end(),
                {ptr(d.grad_o.mem), ptr(d.grad_q.mem), ptr(d.grad_k.mem), ptr(d.grad_v.mem), &one,
                 reinterpret_cast<void*>(s.ws), reinterpret_cast<void*>(s.ws + scratch.accum)});
  }
  Desc vp;
  cudnnStatus_t st = variant_pack(uids.data(), ptrs.data(), static_cast<int64_t>(uids.size()),
                                  reinterpret_cast<void*>(s.ws + scratch.total), &vp);
  if (st == CUDNN_STATUS_SUCCESS)
    st = cudnn().cudnnBackendExecute(s.handle, p.plan.get(), vp.get());
  return st;
}

}  // namespace

struct AttentionPlans {
  std::map<Key, Entry> map;
  uint64_t calls = 0;
};

kiln_status graph_attention(kiln_queue_h q, DnnQueue& s, const kiln_dnn_attention_desc& d,
                            bool backward) {
  const char* what = backward ? "attention_backward" : "attention_forward";
  if (!graph_enabled())
    return set_error(KILN_ERR_UNSUPPORTED, "cuDNN graph API off (KILN_CUDNN_GRAPH=0 or missing)");
  if (!s.attention) s.attention = new AttentionPlans;
  AttentionPlans& plans = *s.attention;
  const Key key = key_of(d, backward);
  auto it = plans.map.find(key);
  if (it == plans.map.end()) {
    if (plans.map.size() >= kMaxPlans) {
      auto oldest = plans.map.begin();
      for (auto j = plans.map.begin(); j != plans.map.end(); ++j)
        if (j->second.used < oldest->second.used) oldest = j;
      plans.map.erase(oldest);  // the queue's work queued with it is already with the driver
    }
    it = plans.map.emplace(key, Entry{}).first;
    Entry& e = it->second;
    kiln_status st = KILN_OK;
    try {
      st = backward ? build_backward(s.handle, d, e.graph) : build_forward(s.handle, d, e.graph);
      auto plan = std::make_unique<Plan>();
      if (!st) st = choose(q, s, e.graph, scratch_of(d, backward).total, plan.get());
      if (!st) e.plan = std::move(plan);
    } catch (...) {  // std::bad_alloc: no entry, so a later call tries again
      plans.map.erase(it);
      throw;
    }
    if (st && st != KILN_ERR_UNSUPPORTED) {  // out of memory, a failing call: not remembered
      plans.map.erase(it);
      return st;
    }
    if (st) {
      e.why = last_error();
      debug_log("%s b%llu h%llu %llux%llu d%llu/%llu%s: refused (%s); Kiln computes it", what,
                static_cast<unsigned long long>(d.batch), static_cast<unsigned long long>(d.heads),
                static_cast<unsigned long long>(d.lq), static_cast<unsigned long long>(d.lk),
                static_cast<unsigned long long>(d.d_qk), static_cast<unsigned long long>(d.d_v),
                d.causal ? " causal" : "", e.why.c_str());
      return st;
    }
    debug_log("%s b%llu h%llu %llux%llu d%llu/%llu%s: engine %lld, workspace %zu bytes", what,
              static_cast<unsigned long long>(d.batch), static_cast<unsigned long long>(d.heads),
              static_cast<unsigned long long>(d.lq), static_cast<unsigned long long>(d.lk),
              static_cast<unsigned long long>(d.d_qk), static_cast<unsigned long long>(d.d_v),
              d.causal ? " causal" : "", static_cast<long long>(e.plan->engine), e.plan->workspace);
  }
  Entry& e = it->second;
  e.used = ++plans.calls;
  if (!e.plan) return set_error(KILN_ERR_UNSUPPORTED, "cuDNN %s: %s", what, e.why.c_str());
  const Scratch scratch = scratch_of(d, backward);
  if (kiln_status st = reserve_workspace(q, s, scratch.total + e.plan->workspace)) return st;
  // dQ's accumulator starts at zero (cudnn-frontend stopped clearing it for cuDNN 9.6 and later;
  // cheap insurance against an engine that accumulates into it).
  if (backward)
    if (CUresult r = g_cu.cuMemsetD32Async(s.ws, 0, scratch.accum / sizeof(float), q->stream);
        r != CUDA_SUCCESS)
      return cu_fail(r, "cuMemsetD32Async");
  if (cudnnStatus_t st = execute(s, *e.plan, d, backward); st != CUDNN_STATUS_SUCCESS)
    return dnn_fail(st, "cudnnBackendExecute", false);
  return KILN_OK;
}

void attention_release(DnnQueue& s, bool device) noexcept { release_plans(s.attention, device); }

}  // namespace kiln_cuda
#endif  // KILN_HAVE_CUDNN
