// The CUDA plugin's "dnn" extension: convolution and pooling by cuDNN 9, loaded with dlopen
// (never linked) on first need; cudnn.h is included for types only. One cuDNN handle per queue
// (its stream), created on first use, as the "blas" extension does with cuBLAS. Convolutions
// try the graph API first (dnn_graph.cpp), then the legacy API; legacy algorithms and the
// workspace: dnn_algos.cpp.
#include "cuda_backend.hpp"

#ifdef KILN_HAVE_CUDNN
#include <glob.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "dnn.hpp"
#include "plugin_guard.hpp"
#include "plugin_table.hpp"

namespace kiln_cuda {
namespace {

kiln_status conv_forward(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept;
kiln_status conv_backward_data(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept;
kiln_status conv_backward_filter(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept;
kiln_status pool_forward(kiln_queue_h q, const kiln_dnn_pool_desc* d) noexcept;
kiln_status pool_backward(kiln_queue_h q, const kiln_dnn_pool_desc* d) noexcept;
kiln_status attention_forward(kiln_queue_h q, const kiln_dnn_attention_desc* d) noexcept;
kiln_status attention_backward(kiln_queue_h q, const kiln_dnn_attention_desc* d) noexcept;

constexpr const char* kSoname = "libcudnn.so.9";

// Where libcudnn.so.9 may be, in order: $KILN_CUDNN_LIBRARY; the soname (the loader's path,
// or the copy a process that imported PyTorch already has); the toolkit's library folders
// ($CUDA_PATH, /usr/local/cuda), where cuDNN's tarball is often unpacked; then the pip wheel
// PyTorch depends on, site-packages/nvidia/cudnn/lib, in $PYTHONPATH, the active virtual or
// conda environment, ~/.local and the system's Pythons. That copy finds the cuBLAS and NVRTC
// of the neighbouring wheels through its RUNPATH.
std::vector<std::string> candidates() {
  std::vector<std::string> out;
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (std::string v = env("KILN_CUDNN_LIBRARY"); !v.empty()) out.push_back(v);
  out.push_back(kSoname);
  if (std::string cp = env("CUDA_PATH"); !cp.empty()) {
    out.push_back(cp + "/lib64/" + kSoname);
    out.push_back(cp + "/lib/" + kSoname);
  }
  out.push_back(std::string("/usr/local/cuda/lib64/") + kSoname);
  out.push_back(std::string("/usr/local/cuda/lib/") + kSoname);

  const std::string wheel = std::string("/nvidia/cudnn/lib/") + kSoname;
  std::vector<std::string> patterns;
  const std::string pythonpath = env("PYTHONPATH");
  for (size_t at = 0; at <= pythonpath.size() && !pythonpath.empty();) {
    const size_t end = std::min(pythonpath.find(':', at), pythonpath.size());
    if (end > at) patterns.push_back(pythonpath.substr(at, end - at) + wheel);
    at = end + 1;
  }
  std::vector<std::string> prefixes;
  for (const char* v : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (std::string p = env(v); !p.empty()) prefixes.push_back(p);
  if (std::string home = env("HOME"); !home.empty()) prefixes.push_back(home + "/.local");
  for (const char* p : {"/usr/local", "/usr", "/opt/conda"}) prefixes.push_back(p);
  for (const std::string& p : prefixes)
    for (const char* dir : {"site-packages", "dist-packages"})
      patterns.push_back(p + "/lib/python3*/" + dir + wheel);
  for (const std::string& pattern : patterns) {
    glob_t g{};
    if (glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  return out;
}

CudnnApi& cudnn_storage() {
  static CudnnApi api;
  return api;
}

void load(CudnnApi& api_out) {
  std::string first_error;
  for (const std::string& name : candidates()) {
    dlerror();
    CudnnApi api;
    // RTLD_NODELETE, as dl_open_first: a library stays mapped until exit.
    api.lib = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
    if (!api.lib) {
      if (first_error.empty()) {
        const char* e = dlerror();
        first_error = e ? e : name + ": dlopen failed";
      }
      continue;
    }
    const char* missing = nullptr;
#define KILN_CUDNN_RESOLVE(fn)                                      \
  api.fn = reinterpret_cast<decltype(api.fn)>(dlsym(api.lib, #fn)); \
  if (!api.fn && !missing) missing = #fn;
    KILN_CUDNN_FUNCS(KILN_CUDNN_RESOLVE)
#undef KILN_CUDNN_RESOLVE
    if (missing) {
      if (first_error.empty()) first_error = name + " lacks " + missing;
      continue;  // stays mapped, unused
    }
    // The graph API is optional: without it only the legacy API runs.
    api.graph = true;
#define KILN_CUDNN_RESOLVE_GRAPH(fn)                                \
  api.fn = reinterpret_cast<decltype(api.fn)>(dlsym(api.lib, #fn)); \
  api.graph = api.graph && api.fn;
    KILN_CUDNN_GRAPH_FUNCS(KILN_CUDNN_RESOLVE_GRAPH)
#undef KILN_CUDNN_RESOLVE_GRAPH
    // cuDNN 9 numbers versions major * 10000 + minor * 100 + patch.
    const size_t v = api.cudnnGetVersion();
    if (v / 10000 != 9) {
      if (first_error.empty()) first_error = name + " is cuDNN version " + std::to_string(v);
      continue;
    }
    api.library = "cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                  std::to_string(v % 100);
    api.path = name;
    api_out = std::move(api);
    // After the move: the table points into the stored string.
    api_out.table = {{KILN_DNN_VERSION, sizeof(kiln_dnn_v1)},
                     api_out.library.c_str(),
                     conv_forward,
                     conv_backward_data,
                     conv_backward_filter,
                     pool_forward,
                     pool_backward,
                     api_out.graph ? attention_forward : nullptr,
                     api_out.graph ? attention_backward : nullptr};
    return;
  }
  api_out.why = "no cuDNN (" + (first_error.empty() ? std::string("not found") : first_error) +
                "; looked for $KILN_CUDNN_LIBRARY, " + kSoname +
                ", the CUDA toolkit's lib folders and Python's nvidia/cudnn/lib)";
}

}  // namespace

// Loads cuDNN once, only where the driver found a device: cuDNN cannot run without one.
const CudnnApi& cudnn() {
  static std::once_flag once;
  std::call_once(once, [] {
    CudnnApi& api = cudnn_storage();
    if (state().driver_ok)
      load(api);
    else
      api.why = "no cuDNN: no CUDA device";
  });
  return cudnn_storage();
}

kiln_status dnn_fail(cudnnStatus_t st, const char* call, bool setup) noexcept {
  const int code = static_cast<int>(st), category = code / 1000 * 1000;
  const kiln_status k =
      st == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
              st == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED
          ? KILN_ERR_OUT_OF_MEMORY
      : category == CUDNN_STATUS_NOT_SUPPORTED ? KILN_ERR_UNSUPPORTED
      // An operand at an offset some engine cannot take: the next algorithm or the portable
      // kernels may.
      : st == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER ? KILN_ERR_UNSUPPORTED
      // Setting up: a parameter cuDNN refuses, or a library that cannot start (a sublibrary
      // missing, a driver too old), leaves the work to the portable kernels.
      : setup && (category == CUDNN_STATUS_BAD_PARAM || category == 1000) ? KILN_ERR_UNSUPPORTED
      : category == CUDNN_STATUS_BAD_PARAM ? KILN_ERR_INVALID_ARGUMENT
                                           : KILN_ERR_BACKEND;
  const CudnnApi& api = cudnn();
  char detail[512] = "";
  if (api.cudnnGetLastErrorString) api.cudnnGetLastErrorString(detail, sizeof detail);
  const char* name = api.cudnnGetErrorString ? api.cudnnGetErrorString(st) : nullptr;
  return set_error(k, "%s failed: %s (cuDNN status %d)%s%s", call, name ? name : "unknown", code,
                   detail[0] ? ": " : "", detail);
}

namespace {

#define KILN_DNN_CHECK(setup, call, ...)                                          \
  if (cudnnStatus_t st_ = cudnn().call(__VA_ARGS__); st_ != CUDNN_STATUS_SUCCESS) \
    return dnn_fail(st_, #call, setup);

void destroy(DnnQueue& s) noexcept {
  const CudnnApi& api = cudnn();
  if (s.pool) api.cudnnDestroyPoolingDescriptor(s.pool);
  if (s.conv) api.cudnnDestroyConvolutionDescriptor(s.conv);
  if (s.w) api.cudnnDestroyFilterDescriptor(s.w);
  if (s.y) api.cudnnDestroyTensorDescriptor(s.y);
  if (s.x) api.cudnnDestroyTensorDescriptor(s.x);
  s.pool = nullptr;
  s.conv = nullptr;
  s.w = nullptr;
  s.x = s.y = nullptr;
}

kiln_status create(kiln_queue_h q, DnnQueue& s) {
  KILN_DNN_CHECK(true, cudnnCreate, &s.handle);
  KILN_DNN_CHECK(true, cudnnSetStream, s.handle, q->stream);
  KILN_DNN_CHECK(true, cudnnCreateTensorDescriptor, &s.x);
  KILN_DNN_CHECK(true, cudnnCreateTensorDescriptor, &s.y);
  KILN_DNN_CHECK(true, cudnnCreateFilterDescriptor, &s.w);
  KILN_DNN_CHECK(true, cudnnCreateConvolutionDescriptor, &s.conv);
  KILN_DNN_CHECK(true, cudnnCreatePoolingDescriptor, &s.pool);
  return KILN_OK;
}

// Makes the context current and creates the queue's cuDNN state on first use. The caller holds
// q->dnn_mu.
kiln_status bind(kiln_queue_h q, DnnQueue** out) {
  if (kiln_status st = make_current(q->dev)) return st;
  if (!q->dnn) {
    auto* s = new DnnQueue;
    if (kiln_status st = create(q, *s)) {
      destroy(*s);
      if (s->handle) cudnn().cudnnDestroy(s->handle);
      delete s;
      return st;
    }
    q->dnn = s;
  }
  *out = q->dnn;
  return KILN_OK;
}

bool fits_int(std::initializer_list<uint64_t> values) {
  for (uint64_t v : values)
    if (v > static_cast<uint64_t>(INT_MAX)) return false;
  return true;
}

// The product of nonzero values fits an int (cuDNN's element strides and counts).
bool product_fits_int(std::initializer_list<uint64_t> values) {
  uint64_t p = 1;
  for (uint64_t v : values) {
    if (v > static_cast<uint64_t>(INT_MAX) / p) return false;
    p *= v;
  }
  return true;
}

void* ptr(const kiln_mem_ref& r) { return reinterpret_cast<void*>(dptr(r)); }

bool dtype_ok(kiln_dtype t) {
  return t == KILN_DTYPE_F32 || t == KILN_DTYPE_F64 || t == KILN_DTYPE_F16 || t == KILN_DTYPE_BF16;
}

constexpr const char* kConvNames[] = {"cuDNN conv_forward", "cuDNN conv_backward_data",
                                      "cuDNN conv_backward_filter"};

}  // namespace

cudnnDataType_t data_type(kiln_dtype t) {
  switch (t) {
    case KILN_DTYPE_F64: return CUDNN_DATA_DOUBLE;
    case KILN_DTYPE_F16: return CUDNN_DATA_HALF;
    case KILN_DTYPE_BF16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}

cudnnStatus_t run_conv(const DnnQueue& s, const kiln_dnn_conv_desc& d, ConvDir dir,
                       const ConvAlgo& a) {
  const CudnnApi& api = cudnn();
  void* ws = reinterpret_cast<void*>(s.ws);
  switch (dir) {
    case ConvDir::forward:
      return api.cudnnConvolutionForward(s.handle, d.alpha, s.x, ptr(d.x), s.w, ptr(d.wt), s.conv,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(a.algo), ws,
                                         a.workspace, d.beta, s.y, ptr(d.y));
    case ConvDir::backward_data:
      return api.cudnnConvolutionBackwardData(s.handle, d.alpha, s.w, ptr(d.wt), s.y, ptr(d.y),
                                              s.conv,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(a.algo),
                                              ws, a.workspace, d.beta, s.x, ptr(d.x));
    case ConvDir::backward_filter:
      return api.cudnnConvolutionBackwardFilter(
          s.handle, d.alpha, s.x, ptr(d.x), s.y, ptr(d.y), s.conv,
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(a.algo), ws, a.workspace, d.beta, s.w,
          ptr(d.wt));
  }
  return CUDNN_STATUS_BAD_PARAM;
}

namespace {

constexpr const char* kRunCalls[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                     "cudnnConvolutionBackwardFilter"};

kiln_status conv(kiln_queue_h q, const kiln_dnn_conv_desc* d, ConvDir dir) {
  const char* what = kConvNames[static_cast<int>(dir)];
  if (!q || !d) return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL queue or descriptor", what);
  if (!d->alpha || !d->beta)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL alpha or beta", what);
  if (!dtype_ok(d->dtype))
    return set_error(KILN_ERR_UNSUPPORTED, "%s: only f32, f64, f16 and bf16 (dtype %d)", what,
                     static_cast<int>(d->dtype));
  if (d->groups == 0 || d->c % d->groups || d->k % d->groups || !d->stride_h || !d->stride_w ||
      !d->dil_h || !d->dil_w)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "%s: groups, strides and dilations must be positive, groups divide c and k",
                     what);
  if (!d->n || !d->c || !d->h || !d->w || !d->k || !d->r || !d->s || !d->p || !d->q)
    return set_error(KILN_ERR_UNSUPPORTED, "%s: empty tensors are left to the portable kernels",
                     what);
  const uint64_t cg = d->c / d->groups;
  if (!fits_int({d->n, d->c, d->h, d->w, d->k, d->r, d->s, d->p, d->q, d->stride_h, d->stride_w,
                 d->pad_h, d->pad_w, d->dil_h, d->dil_w, d->groups}) ||
      !product_fits_int({d->n, d->c, d->h, d->w}) || !product_fits_int({d->n, d->k, d->p, d->q}) ||
      !product_fits_int({d->k, cg, d->r, d->s}))
    return set_error(KILN_ERR_UNSUPPORTED, "%s: a tensor exceeds cuDNN's 32-bit sizes", what);
  const cudnnDataType_t dt = data_type(d->dtype);
  // 16-bit tensors are computed in f32 (PyTorch's choice too): tensor cores, f32 accumulation.
  const cudnnDataType_t compute =
      dt == CUDNN_DATA_HALF || dt == CUDNN_DATA_BFLOAT16 ? CUDNN_DATA_FLOAT : dt;
  // TF32 for f32 only when asked: cuDNN's default math allows it on Ampere and later, FMA math
  // never uses tensor cores. f64 has no reduced-precision mode; 16-bit types take the default
  // (tensor cores).
  const cudnnMathType_t math = d->dtype == KILN_DTYPE_F32 && d->math_mode != KILN_DNN_MATH_TF32
                                   ? CUDNN_FMA_MATH
                                   : CUDNN_DEFAULT_MATH;
  const auto i = [](uint64_t v) { return static_cast<int>(v); };

  std::lock_guard<std::mutex> lock(q->dnn_mu);
  DnnQueue* s = nullptr;
  if (kiln_status st = bind(q, &s)) return st;
  KILN_DNN_CHECK(true, cudnnSetTensor4dDescriptor, s->x, CUDNN_TENSOR_NCHW, dt, i(d->n), i(d->c),
                 i(d->h), i(d->w));
  KILN_DNN_CHECK(true, cudnnSetFilter4dDescriptor, s->w, dt, CUDNN_TENSOR_NCHW, i(d->k), i(cg),
                 i(d->r), i(d->s));
  KILN_DNN_CHECK(true, cudnnSetTensor4dDescriptor, s->y, CUDNN_TENSOR_NCHW, dt, i(d->n), i(d->k),
                 i(d->p), i(d->q));
  KILN_DNN_CHECK(true, cudnnSetConvolution2dDescriptor, s->conv, i(d->pad_h), i(d->pad_w),
                 i(d->stride_h), i(d->stride_w), i(d->dil_h), i(d->dil_w), CUDNN_CROSS_CORRELATION,
                 compute);
  KILN_DNN_CHECK(true, cudnnSetConvolutionGroupCount, s->conv, i(d->groups));
  KILN_DNN_CHECK(true, cudnnSetConvolutionMathType, s->conv, math);
  int on = 0, oc = 0, oh = 0, ow = 0;
  KILN_DNN_CHECK(true, cudnnGetConvolution2dForwardOutputDim, s->conv, s->x, s->w, &on, &oc, &oh,
                 &ow);
  if (on != i(d->n) || oc != i(d->k) || oh != i(d->p) || ow != i(d->q))
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "%s: output %llu x %llu x %llu x %llu, cuDNN computes %d x %d x %d x %d", what,
                     static_cast<unsigned long long>(d->n), static_cast<unsigned long long>(d->k),
                     static_cast<unsigned long long>(d->p), static_cast<unsigned long long>(d->q),
                     on, oc, oh, ow);

  // The graph API first (its engines are PyTorch's); on any refusal the legacy API, as before.
  if (graph_enabled() && graph_conv(q, *s, *d, dir) == KILN_OK) return KILN_OK;

  const std::vector<ConvAlgo>* algos = nullptr;
  if (kiln_status st = conv_algos(q, *s, *d, dir, math, &algos)) return st;
  if (algos->empty())
    return set_error(KILN_ERR_UNSUPPORTED,
                     "%s: cuDNN's heuristics offer no algorithm for this shape (dtype %d)", what,
                     static_cast<int>(d->dtype));
  // Best first; one whose workspace cannot be had, or that cuDNN turns down when it runs, gives
  // way to the next.
  kiln_status last = KILN_OK;
  for (const ConvAlgo& a : *algos) {
    if ((last = reserve_workspace(q, *s, a.workspace)) != KILN_OK) {
      if (last == KILN_ERR_OUT_OF_MEMORY) continue;
      return last;
    }
    KILN_DNN_CHECK(true, cudnnSetConvolutionMathType, s->conv, a.math);
    const cudnnStatus_t st = run_conv(*s, *d, dir, a);
    if (st == CUDNN_STATUS_SUCCESS) return KILN_OK;
    last = dnn_fail(st, kRunCalls[static_cast<int>(dir)], false);
    if (last != KILN_ERR_UNSUPPORTED) return last;
  }
  return last;
}

kiln_status pool(kiln_queue_h q, const kiln_dnn_pool_desc* d, bool backward) {
  const char* what = backward ? "cuDNN pool_backward" : "cuDNN pool_forward";
  if (!q || !d) return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL queue or descriptor", what);
  if (!dtype_ok(d->dtype))
    return set_error(KILN_ERR_UNSUPPORTED, "%s: only f32, f64, f16 and bf16 (dtype %d)", what,
                     static_cast<int>(d->dtype));
  cudnnPoolingMode_t mode;
  switch (d->mode) {
    // Deterministic: the backward pass then sums in a fixed order where windows overlap.
    case KILN_DNN_POOL_MAX: mode = CUDNN_POOLING_MAX_DETERMINISTIC; break;
    case KILN_DNN_POOL_AVG_INCLUDE_PAD: mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING; break;
    case KILN_DNN_POOL_AVG_EXCLUDE_PAD: mode = CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING; break;
    default:
      return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: unknown pooling mode %d", what,
                       static_cast<int>(d->mode));
  }
  if (!d->win_h || !d->win_w || !d->stride_h || !d->stride_w)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: windows and strides must be positive", what);
  if (!d->n || !d->c || !d->h || !d->w || !d->p || !d->q)
    return set_error(KILN_ERR_UNSUPPORTED, "%s: empty tensors are left to the portable kernels",
                     what);
  if (!fits_int({d->n, d->c, d->h, d->w, d->p, d->q, d->win_h, d->win_w, d->stride_h, d->stride_w,
                 d->pad_h, d->pad_w}) ||
      !product_fits_int({d->n, d->c, d->h, d->w}) || !product_fits_int({d->n, d->c, d->p, d->q}))
    return set_error(KILN_ERR_UNSUPPORTED, "%s: a tensor exceeds cuDNN's 32-bit sizes", what);
  const cudnnDataType_t dt = data_type(d->dtype);
  const auto i = [](uint64_t v) { return static_cast<int>(v); };

  std::lock_guard<std::mutex> lock(q->dnn_mu);
  DnnQueue* s = nullptr;
  if (kiln_status st = bind(q, &s)) return st;
  // A NaN in a window is its maximum, as in PyTorch and the portable kernels.
  KILN_DNN_CHECK(true, cudnnSetPooling2dDescriptor, s->pool, mode, CUDNN_PROPAGATE_NAN, i(d->win_h),
                 i(d->win_w), i(d->pad_h), i(d->pad_w), i(d->stride_h), i(d->stride_w));
  KILN_DNN_CHECK(true, cudnnSetTensor4dDescriptor, s->x, CUDNN_TENSOR_NCHW, dt, i(d->n), i(d->c),
                 i(d->h), i(d->w));
  KILN_DNN_CHECK(true, cudnnSetTensor4dDescriptor, s->y, CUDNN_TENSOR_NCHW, dt, i(d->n), i(d->c),
                 i(d->p), i(d->q));
  int on = 0, oc = 0, oh = 0, ow = 0;
  KILN_DNN_CHECK(true, cudnnGetPooling2dForwardOutputDim, s->pool, s->x, &on, &oc, &oh, &ow);
  if (on != i(d->n) || oc != i(d->c) || oh != i(d->p) || ow != i(d->q))
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "%s: output %llu x %llu x %llu x %llu, cuDNN computes %d x %d x %d x %d", what,
                     static_cast<unsigned long long>(d->n), static_cast<unsigned long long>(d->c),
                     static_cast<unsigned long long>(d->p), static_cast<unsigned long long>(d->q),
                     on, oc, oh, ow);
  // Scaling factors are host values of the compute type: double for f64, float otherwise.
  const float one_f = 1.f, zero_f = 0.f;
  const double one_d = 1.0, zero_d = 0.0;
  const bool f64 = d->dtype == KILN_DTYPE_F64;
  const void* one = f64 ? static_cast<const void*>(&one_d) : &one_f;
  const void* zero = f64 ? static_cast<const void*>(&zero_d) : &zero_f;
  if (!backward) {
    KILN_DNN_CHECK(false, cudnnPoolingForward, s->handle, s->pool, one, s->x, ptr(d->x), zero, s->y,
                   ptr(d->y));
  } else {
    KILN_DNN_CHECK(false, cudnnPoolingBackward, s->handle, s->pool, one, s->y, ptr(d->y), s->y,
                   ptr(d->dy), s->x, ptr(d->x), zero, s->x, ptr(d->dx));
  }
  return KILN_OK;
}

// Validates a fused attention call: what the ABI forbids is an invalid argument; a shape cuDNN's
// flash attention does not take (its head widths, 16-byte strides and bases, 32-bit sizes) is
// KILN_ERR_UNSUPPORTED, so the core computes it itself.
kiln_status attention_check(kiln_queue_h q, const kiln_dnn_attention_desc* d, bool backward) {
  const char* what = backward ? "cuDNN attention_backward" : "cuDNN attention_forward";
  if (!q || !d) return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: NULL queue or descriptor", what);
  if (d->struct_size < sizeof(kiln_dnn_attention_desc))
    return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: descriptor of %u bytes, expected %zu", what,
                     d->struct_size, sizeof(kiln_dnn_attention_desc));
  if (d->dtype != KILN_DTYPE_F16 && d->dtype != KILN_DTYPE_BF16)
    return set_error(KILN_ERR_UNSUPPORTED, "%s: only f16 and bf16 (dtype %d)", what,
                     static_cast<int>(d->dtype));
  if (!d->batch || !d->heads || !d->lq || !d->lk || !d->d_qk || !d->d_v)
    return set_error(KILN_ERR_UNSUPPORTED, "%s: empty tensors are left to the core", what);
  if (!std::isfinite(d->scale))
    return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: scale is not finite", what);
  // cuDNN 9 on sm80-sm90: head widths multiples of 8, up to 256 forward; the backward is kept
  // to 128 (the widths its Ampere engines take; wider backwards run Kiln's fused kernels).
  const uint64_t widest = backward ? 128 : 256;
  if (d->d_qk % 8 || d->d_v % 8 || d->d_qk > widest || d->d_v > widest)
    return set_error(KILN_ERR_UNSUPPORTED,
                     "%s: head widths %llu and %llu (cuDNN takes multiples of 8 up to %llu)", what,
                     static_cast<unsigned long long>(d->d_qk),
                     static_cast<unsigned long long>(d->d_v),
                     static_cast<unsigned long long>(widest));
  if (!fits_int({d->batch, d->heads, d->lq, d->lk}) ||
      !product_fits_int({d->batch, d->heads, d->lq, std::max(d->d_qk, d->d_v)}) ||
      !product_fits_int({d->batch, d->heads, d->lk, std::max(d->d_qk, d->d_v)}))
    return set_error(KILN_ERR_UNSUPPORTED, "%s: a tensor exceeds cuDNN's 32-bit sizes", what);
  for (const kiln_dnn_view* v : attention_views(*d, backward)) {
    if (!v->mem.base)
      return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: an operand has no memory", what);
    bool aligned = dptr(v->mem) % 16 == 0;
    for (int64_t s : v->stride) aligned = aligned && s > 0 && s % 8 == 0;
    if (!aligned)
      return set_error(KILN_ERR_UNSUPPORTED,
                       "%s: cuDNN needs 16-byte aligned operands with positive strides of a "
                       "multiple of 8 elements",
                       what);
  }
  if (!d->stats.base) return set_error(KILN_ERR_INVALID_ARGUMENT, "%s: no statistics memory", what);
  if (dptr(d->stats) % 16)
    return set_error(KILN_ERR_UNSUPPORTED, "%s: statistics not 16-byte aligned", what);
  return KILN_OK;
}

kiln_status attention(kiln_queue_h q, const kiln_dnn_attention_desc* d, bool backward) {
  if (kiln_status st = attention_check(q, d, backward)) return st;
  std::lock_guard<std::mutex> lock(q->dnn_mu);
  DnnQueue* s = nullptr;
  if (kiln_status st = bind(q, &s)) return st;
  return graph_attention(q, *s, *d, backward);
}

// The table's entries: never throw (std::bad_alloc becomes KILN_ERR_OUT_OF_MEMORY).
template <class F>
kiln_status guarded(F f) noexcept {
  try {
    return f();
  } catch (...) {
    return kiln_plugin::from_exception<&set_error>();
  }
}

kiln_status conv_forward(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept {
  return guarded([&] { return conv(q, d, ConvDir::forward); });
}
kiln_status conv_backward_data(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept {
  return guarded([&] { return conv(q, d, ConvDir::backward_data); });
}
kiln_status conv_backward_filter(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept {
  return guarded([&] { return conv(q, d, ConvDir::backward_filter); });
}
kiln_status pool_forward(kiln_queue_h q, const kiln_dnn_pool_desc* d) noexcept {
  return guarded([&] { return pool(q, d, false); });
}
kiln_status pool_backward(kiln_queue_h q, const kiln_dnn_pool_desc* d) noexcept {
  return guarded([&] { return pool(q, d, true); });
}
kiln_status attention_forward(kiln_queue_h q, const kiln_dnn_attention_desc* d) noexcept {
  return guarded([&] { return attention(q, d, false); });
}
kiln_status attention_backward(kiln_queue_h q, const kiln_dnn_attention_desc* d) noexcept {
  return guarded([&] { return attention(q, d, true); });
}

}  // namespace

bool dnn_loaded() noexcept {
  try {
    return cudnn().lib != nullptr;
  } catch (...) {  // std::bad_alloc building the candidates: no extension
    return false;
  }
}

const void* dnn_extension(const char* name, uint32_t version) noexcept {
  if (!kiln_plugin::is_op(name, KILN_DNN_EXTENSION) || version != KILN_DNN_VERSION || !dnn_loaded())
    return nullptr;
  return &cudnn().table;
}

void dnn_note_availability() noexcept {
  try {
    if (!state().driver_ok) return;
    const CudnnApi& api = cudnn();
    const std::string note =
        "; " + (api.lib ? api.library + " loaded (" + api.path + ")" +
                              (api.graph ? "" : ", without its graph API: legacy convolutions")
                        : api.why);
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    // Once: init runs again after a shutdown, the note is then appended to a fresh line.
    const std::string& a = s.availability;
    if (a.size() < note.size() || a.compare(a.size() - note.size(), note.size(), note) != 0)
      s.availability += note;
  } catch (...) {  // std::bad_alloc: the line stays without the note
  }
}

void dnn_release(kiln_queue_s* q, bool device) noexcept {
  DnnQueue* s = q->dnn;
  if (!s) return;
  q->dnn = nullptr;
  // Only a queue that used cuDNN has state, so cuDNN is loaded here.
  graph_release(*s, device);
  attention_release(*s, device);
  destroy(*s);  // host objects
  if (device) {
    free_workspace(q, *s);
    if (s->handle) cudnn().cudnnDestroy(s->handle);
  }
  delete s;
}

}  // namespace kiln_cuda

#else  // no cuDNN 9 headers at build time: no "dnn" extension

namespace kiln_cuda {

bool dnn_loaded() noexcept { return false; }
const void* dnn_extension(const char*, uint32_t) noexcept { return nullptr; }
void dnn_note_availability() noexcept {}
void dnn_release(kiln_queue_s*, bool) noexcept {}

}  // namespace kiln_cuda

#endif  // KILN_HAVE_CUDNN
