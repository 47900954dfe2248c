// The CPU backend's "dnn" extension: convolution through oneDNN (Debian's libdnnl-dev, C API
// v2). dnnl.h is found at configure time (types only); libdnnl is loaded with dlopen on first
// need, never linked, so libkiln still loads where oneDNN is absent: the CPU backend then has
// no "dnn" extension and conv2d runs its portable kernels (im2col + GEMM). Calls are queued on
// the queue's worker thread, in order with copies, launches and GEMMs.
//
// Threads: Kiln owns them, as with OpenBLAS (blas.cpp). Debian's libdnnl runs on OpenMP
// (libgomp), whose threads busy-wait at barriers and collapse when other processes share the
// cores. Every thread that calls oneDNN sets its OpenMP thread count to one, and a call is
// split into chunks of images that run over the CPU backend's pool (whose workers steal a
// preempted worker's chunks). Backward filter sums the chunks' partial gradients here.
//
// Layouts: Kiln's tensors are NCHW; oneDNN's fast kernels want blocked layouts (nChw16c, ...),
// so each primitive is created with "any" layout and the operands are reordered in and out,
// as PyTorch does for NCHW tensors. Primitives are created once per shape (costly: JIT code),
// cached, and shared by all threads (executing a primitive is thread-safe; each call brings
// its own scratchpad). A configuration only oneDNN's reference kernels take is refused
// (KILN_ERR_UNSUPPORTED): Kiln's portable path is faster than those.
//
// Pooling stays portable: oneDNN's max pooling lets a NaN lose to later elements, where Kiln
// (as PyTorch) lets it win; and pooling is memory-bound, where oneDNN gains little.
#include "backends/cpu/cpu_backend.hpp"
#include "dl_library.hpp"
#include "dnn_abi.h"
#include "plugin_table.hpp"

#ifdef KILN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::cpu {
namespace {

#define KILN_DNNL_FUNCS(X)                               \
  X(dnnl_version)                                        \
  X(dnnl_engine_create)                                  \
  X(dnnl_stream_create)                                  \
  X(dnnl_memory_desc_init_by_tag)                        \
  X(dnnl_memory_desc_equal)                              \
  X(dnnl_memory_desc_get_size)                           \
  X(dnnl_memory_create)                                  \
  X(dnnl_memory_destroy)                                 \
  X(dnnl_dilated_convolution_forward_desc_init)          \
  X(dnnl_dilated_convolution_backward_data_desc_init)    \
  X(dnnl_dilated_convolution_backward_weights_desc_init) \
  X(dnnl_primitive_attr_create)                          \
  X(dnnl_primitive_attr_destroy)                         \
  X(dnnl_primitive_attr_set_scratchpad_mode)             \
  X(dnnl_primitive_desc_create)                          \
  X(dnnl_primitive_desc_destroy)                         \
  X(dnnl_primitive_desc_query)                           \
  X(dnnl_primitive_desc_query_md)                        \
  X(dnnl_reorder_primitive_desc_create)                  \
  X(dnnl_primitive_create)                               \
  X(dnnl_primitive_execute)

struct dnnl_api {
  void* lib = nullptr;
  std::string library;  // "oneDNN 2.6.3"
  dnnl_engine_t engine = nullptr;
  KILN_DNNL_FUNCS(KILN_DL_MEMBER)
  // libgomp's, where libdnnl runs on OpenMP.
  void (*omp_set_num_threads)(int) = nullptr;
  int (*omp_get_max_threads)() = nullptr;
};

// $KILN_DNNL_LIBRARY, else the Debian sonames; loaded once. Only the v2 C API (these headers):
// libdnnl.so.3 lacks the *_desc_init functions, so it resolves to no extension.
const dnnl_api& dnnl() {
  static dnnl_api api;
  static std::once_flag once;
  std::call_once(once, [] {
    api.lib = kiln_plugin::dl_open_first("KILN_DNNL_LIBRARY", {"libdnnl.so.2", "libdnnl.so"});
    bool ok = api.lib != nullptr;
    KILN_DNNL_FUNCS(KILN_DL_RESOLVE)
    const dnnl_version_t* v = ok ? api.dnnl_version() : nullptr;
    ok = ok && v && v->major == DNNL_VERSION_MAJOR &&
         api.dnnl_engine_create(&api.engine, dnnl_cpu, 0) == dnnl_success;
    if (!ok) {
      api.lib = nullptr;  // RTLD_NODELETE: stays mapped, unused
      return;
    }
    // dlsym on the handle also searches libdnnl's dependencies (libgomp).
    api.omp_set_num_threads =
        reinterpret_cast<void (*)(int)>(dlsym(api.lib, "omp_set_num_threads"));
    api.omp_get_max_threads = reinterpret_cast<int (*)()>(dlsym(api.lib, "omp_get_max_threads"));
    if (!api.omp_get_max_threads) api.omp_set_num_threads = nullptr;
    api.library = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
                  std::to_string(v->patch);
  });
  return api;
}

// One oneDNN thread on the calling thread (OpenMP's thread count is per thread), and that
// thread's stream (a CPU stream runs primitives inline on the caller).
dnnl_stream_t thread_stream() {
  thread_local dnnl_stream_t stream = [] {
    if (dnnl().omp_set_num_threads) dnnl().omp_set_num_threads(1);
    dnnl_stream_t s = nullptr;
    dnnl().dnnl_stream_create(&s, dnnl().engine, dnnl_stream_default_flags);
    return s;  // never destroyed: the thread may outlive oneDNN's statics at exit
  }();
  return stream;
}

char* at(kiln_mem_ref r) { return static_cast<char*>(r.base) + r.offset; }

// Growable 64-byte-aligned buffers of the calling thread, reused across calls.
struct buffers {
  struct block {
    void* p = nullptr;
    std::size_t size = 0;
  };
  std::array<block, 3> b;
  void* get(unsigned i, std::size_t bytes) {
    if (bytes == 0) return nullptr;
    if (b[i].size < bytes) {
      std::free(b[i].p);
      b[i].size = (bytes + 63) / 64 * 64;
      b[i].p = std::aligned_alloc(64, b[i].size);
      if (!b[i].p) {
        b[i].size = 0;
        throw std::bad_alloc();
      }
    }
    return b[i].p;
  }
  ~buffers() {
    for (block& x : b) std::free(x.p);
  }
};
buffers& thread_buffers() {
  thread_local buffers b;
  return b;
}

// A buffer owned by one call (shared by its chunks).
struct aligned_buffer {
  void* p = nullptr;
  explicit aligned_buffer(std::size_t bytes) {
    if (bytes && !(p = std::aligned_alloc(64, (bytes + 63) / 64 * 64))) throw std::bad_alloc();
  }
  ~aligned_buffer() { std::free(p); }
  aligned_buffer(const aligned_buffer&) = delete;
  aligned_buffer& operator=(const aligned_buffer&) = delete;
};

enum class direction { forward, backward_data, backward_filter };

// What a call's primitives are for: the direction, the images per chunk and the geometry.
using plan_key = std::array<std::uint64_t, 18>;

// One operand of a primitive: its layout in Kiln (NCHW / GOIHW), the primitive's layout, and
// the reorder between them (null when they are the same).
struct operand {
  int arg = 0;
  dnnl_memory_desc_t user{}, inner{};
  dnnl_primitive_t reorder = nullptr;
  std::size_t inner_bytes = 0;
};

// The primitives of one direction and chunk size. in[1] of forward and backward data is the
// weight, reordered once per call; the rest per chunk.
struct plan {
  dnnl_primitive_t prim = nullptr;
  operand in[2], out;
  std::size_t scratch_bytes = 0;
  dnnl_memory_desc_t scratch{};
};

struct dnnl_error : std::runtime_error {
  dnnl_status_t status;
  dnnl_error(dnnl_status_t s, const std::string& what) : std::runtime_error(what), status(s) {}
};
void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success)
    throw dnnl_error(s, std::string(what) + " failed (dnnl status " + std::to_string(int(s)) + ")");
}

// A refusal: only oneDNN's reference kernels (or none) take this configuration.
struct refused {};

struct pd_holder {
  dnnl_primitive_desc_t pd = nullptr;
  ~pd_holder() {
    if (pd) dnnl().dnnl_primitive_desc_destroy(pd);
  }
};

// The operand's Kiln layout against the primitive's chosen one, with the reorder when they
// differ (user -> inner for inputs, inner -> user for the output).
operand make_operand(const dnnl_primitive_desc_t pd, dnnl_query_t what, int arg,
                     const dnnl_memory_desc_t& user, bool input) {
  const dnnl_api& d = dnnl();
  operand o;
  o.arg = arg;
  o.user = user;
  o.inner = *d.dnnl_primitive_desc_query_md(pd, what, 0);
  if (d.dnnl_memory_desc_equal(&o.user, &o.inner)) return o;
  o.inner_bytes = d.dnnl_memory_desc_get_size(&o.inner);
  pd_holder r;
  const dnnl_memory_desc_t* from = input ? &o.user : &o.inner;
  const dnnl_memory_desc_t* to = input ? &o.inner : &o.user;
  check(d.dnnl_reorder_primitive_desc_create(&r.pd, from, d.engine, to, d.engine, nullptr),
        "oneDNN reorder descriptor");
  check(d.dnnl_primitive_create(&o.reorder, r.pd), "oneDNN reorder");
  return o;
}

// The primitives for nb images of shape c; throws refused or dnnl_error.
plan* make_plan(direction dir, const kiln_dnn_conv_desc& c, std::uint64_t nb) {
  const dnnl_api& d = dnnl();
  const bool grouped = c.groups > 1;
  const dnnl_dim_t g = c.groups;
  const dnnl_dims_t src_dims = {dnnl_dim_t(nb), dnnl_dim_t(c.c), dnnl_dim_t(c.h), dnnl_dim_t(c.w)};
  const dnnl_dims_t dst_dims = {dnnl_dim_t(nb), dnnl_dim_t(c.k), dnnl_dim_t(c.p), dnnl_dim_t(c.q)};
  const dnnl_dims_t wt_dims_g = {g, dnnl_dim_t(c.k) / g, dnnl_dim_t(c.c) / g, dnnl_dim_t(c.r),
                                 dnnl_dim_t(c.s)};
  const dnnl_dims_t wt_dims = {dnnl_dim_t(c.k), dnnl_dim_t(c.c), dnnl_dim_t(c.r), dnnl_dim_t(c.s)};
  const int wt_nd = grouped ? 5 : 4;
  const dnnl_dim_t* wdims = grouped ? wt_dims_g : wt_dims;
  const dnnl_format_tag_t wtag = grouped ? dnnl_goihw : dnnl_oihw;
  dnnl_memory_desc_t src_u, dst_u, wt_u, src_a, dst_a, wt_a;
  check(d.dnnl_memory_desc_init_by_tag(&src_u, 4, src_dims, dnnl_f32, dnnl_nchw), "md");
  check(d.dnnl_memory_desc_init_by_tag(&dst_u, 4, dst_dims, dnnl_f32, dnnl_nchw), "md");
  check(d.dnnl_memory_desc_init_by_tag(&wt_u, wt_nd, wdims, dnnl_f32, wtag), "md");
  check(d.dnnl_memory_desc_init_by_tag(&src_a, 4, src_dims, dnnl_f32, dnnl_format_tag_any), "md");
  check(d.dnnl_memory_desc_init_by_tag(&dst_a, 4, dst_dims, dnnl_f32, dnnl_format_tag_any), "md");
  check(d.dnnl_memory_desc_init_by_tag(&wt_a, wt_nd, wdims, dnnl_f32, dnnl_format_tag_any), "md");
  const dnnl_dims_t strides = {c.stride_h, c.stride_w};
  const dnnl_dims_t dilates = {dnnl_dim_t(c.dil_h) - 1, dnnl_dim_t(c.dil_w) - 1};
  const dnnl_dims_t pad_l = {c.pad_h, c.pad_w};
  // Right padding as oneDNN counts it: what the last window reaches past the input.
  const dnnl_dims_t pad_r = {
      dnnl_dim_t((c.p - 1) * c.stride_h + (c.r - 1) * c.dil_h + 1) - dnnl_dim_t(c.h + c.pad_h),
      dnnl_dim_t((c.q - 1) * c.stride_w + (c.s - 1) * c.dil_w + 1) - dnnl_dim_t(c.w + c.pad_w)};

  struct attr_holder {
    dnnl_primitive_attr_t a = nullptr;
    ~attr_holder() {
      if (a) dnnl().dnnl_primitive_attr_destroy(a);
    }
  } attr;
  check(d.dnnl_primitive_attr_create(&attr.a), "oneDNN attributes");
  check(d.dnnl_primitive_attr_set_scratchpad_mode(attr.a, dnnl_scratchpad_mode_user),
        "oneDNN scratchpad mode");

  dnnl_convolution_desc_t fwd_desc;
  check(d.dnnl_dilated_convolution_forward_desc_init(
            &fwd_desc, dnnl_forward_training, dnnl_convolution_direct, &src_a, &wt_a, nullptr,
            &dst_a, strides, dilates, pad_l, pad_r),
        "oneDNN convolution descriptor");
  pd_holder fwd, pd;
  if (d.dnnl_primitive_desc_create(&fwd.pd, &fwd_desc, attr.a, d.engine, nullptr) != dnnl_success)
    throw refused{};
  if (dir == direction::forward) {
    std::swap(pd.pd, fwd.pd);
  } else {
    dnnl_convolution_desc_t bwd_desc;
    if (dir == direction::backward_data)
      check(d.dnnl_dilated_convolution_backward_data_desc_init(&bwd_desc, dnnl_convolution_direct,
                                                               &src_a, &wt_a, &dst_a, strides,
                                                               dilates, pad_l, pad_r),
            "oneDNN convolution descriptor");
    else
      check(d.dnnl_dilated_convolution_backward_weights_desc_init(
                &bwd_desc, dnnl_convolution_direct, &src_a, &wt_a, nullptr, &dst_a, strides,
                dilates, pad_l, pad_r),
            "oneDNN convolution descriptor");
    if (d.dnnl_primitive_desc_create(&pd.pd, &bwd_desc, attr.a, d.engine, fwd.pd) != dnnl_success)
      throw refused{};
  }
  const char* impl = nullptr;
  d.dnnl_primitive_desc_query(pd.pd, dnnl_query_impl_info_str, 0, &impl);
  if (!impl || std::string_view(impl).starts_with("ref")) throw refused{};

  auto p = std::make_unique<plan>();
  switch (dir) {
    case direction::forward:
      p->in[0] = make_operand(pd.pd, dnnl_query_src_md, DNNL_ARG_SRC, src_u, true);
      p->in[1] = make_operand(pd.pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS, wt_u, true);
      p->out = make_operand(pd.pd, dnnl_query_dst_md, DNNL_ARG_DST, dst_u, false);
      break;
    case direction::backward_data:
      p->in[0] = make_operand(pd.pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST, dst_u, true);
      p->in[1] = make_operand(pd.pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS, wt_u, true);
      p->out = make_operand(pd.pd, dnnl_query_diff_src_md, DNNL_ARG_DIFF_SRC, src_u, false);
      break;
    case direction::backward_filter:
      p->in[0] = make_operand(pd.pd, dnnl_query_src_md, DNNL_ARG_SRC, src_u, true);
      p->in[1] = make_operand(pd.pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST, dst_u, true);
      p->out = make_operand(pd.pd, dnnl_query_diff_weights_md, DNNL_ARG_DIFF_WEIGHTS, wt_u, false);
      break;
  }
  p->scratch = *d.dnnl_primitive_desc_query_md(pd.pd, dnnl_query_scratchpad_md, 0);
  p->scratch_bytes = d.dnnl_memory_desc_get_size(&p->scratch);
  check(d.dnnl_primitive_create(&p->prim, pd.pd), "oneDNN convolution");
  return p.release();
}

// The cached plan (null: refused). Plans are never destroyed: a cache of a process's shapes,
// kept past exit, when oneDNN's own statics may already be gone.
const plan* plan_for(direction dir, const kiln_dnn_conv_desc& c, std::uint64_t nb) {
  static std::mutex mu;
  static auto* cache = new std::map<plan_key, const plan*>;
  const plan_key key = {
      std::uint64_t(dir), nb,         c.c,     c.h,     c.w,     c.k,     c.r,      c.s, c.p, c.q,
      c.stride_h,         c.stride_w, c.pad_h, c.pad_w, c.dil_h, c.dil_w, c.groups, 0};
  std::lock_guard lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  // oneDNN sizes a primitive's parallel loops for the creating thread's OpenMP thread count
  // and spawns that many threads when it runs: one. The caller's own count comes back after.
  const dnnl_api& d = dnnl();
  const int threads = d.omp_get_max_threads ? d.omp_get_max_threads() : 1;
  if (d.omp_set_num_threads) d.omp_set_num_threads(1);
  struct restore {
    int n;
    ~restore() {
      if (dnnl().omp_set_num_threads) dnnl().omp_set_num_threads(n);
    }
  } back{threads};
  const plan* p = nullptr;
  try {
    p = make_plan(dir, c, nb);
  } catch (const refused&) {
  }
  cache->emplace(key, p);
  return p;
}

// Runs a primitive (or a reorder) on the calling thread; args are {arg, desc, pointer}.
struct exec_arg {
  int arg;
  const dnnl_memory_desc_t* md;
  void* ptr;
};
void execute(dnnl_primitive_t prim, std::initializer_list<exec_arg> args) {
  const dnnl_api& d = dnnl();
  dnnl_exec_arg_t a[4];
  int n = 0;
  struct guard {
    dnnl_exec_arg_t* a;
    int& n;
    ~guard() {
      for (int i = 0; i < n; ++i) dnnl().dnnl_memory_destroy(a[i].memory);
    }
  } g{a, n};
  for (const exec_arg& x : args) {
    if (!x.ptr) continue;  // an empty scratchpad
    dnnl_memory_t m = nullptr;
    check(d.dnnl_memory_create(&m, x.md, d.engine, x.ptr), "oneDNN memory");
    a[n++] = {x.arg, m};
  }
  check(d.dnnl_primitive_execute(prim, thread_stream(), n, a), "oneDNN execute");
}

// An input in the primitive's layout: user itself, or reordered into buf.
void* to_inner(const operand& o, void* user, void* buf) {
  if (!o.reorder) return user;
  execute(o.reorder, {{DNNL_ARG_FROM, &o.user, user}, {DNNL_ARG_TO, &o.inner, buf}});
  return buf;
}

// out = alpha v + beta out over n floats (beta == 0 never reads out).
void scale_into(float* out, const float* v, std::size_t n, float alpha, float beta) {
  if (beta == 0)
    for (std::size_t i = 0; i < n; ++i) out[i] = alpha * v[i];
  else
    for (std::size_t i = 0; i < n; ++i) out[i] = alpha * v[i] + beta * out[i];
}

std::size_t elements(const dnnl_memory_desc_t& md) {
  return dnnl().dnnl_memory_desc_get_size(&md) / sizeof(float);
}

// How many chunks of images a call of `flops` over n images is split into: a few per pool
// thread (stealing evens out a preempted worker), one below ~0.5 ms of one core.
std::uint64_t chunks_of(std::uint64_t n, double flops, std::uint64_t cap) {
  const std::uint64_t threads = pool().size();
  if (threads < 2 || flops < 2e6) return 1;
  return std::clamp<std::uint64_t>(std::min(n, threads * 2), 1, std::max<std::uint64_t>(cap, 1));
}

double flops_of(const kiln_dnn_conv_desc& c) {
  return 2.0 * double(c.n) * double(c.k) * double(c.p) * double(c.q) * double(c.c / c.groups) *
         double(c.r) * double(c.s);
}

// Image range of chunk t of `parts` over n images: at most two chunk sizes.
struct chunking {
  std::uint64_t n, parts, base, extra;  // the first `extra` chunks have base + 1 images
  chunking(std::uint64_t n_, std::uint64_t parts_)
      : n(n_), parts(parts_), base(n_ / parts_), extra(n_ % parts_) {}
  std::uint64_t size(std::uint64_t t) const { return base + (t < extra ? 1 : 0); }
  std::uint64_t first(std::uint64_t t) const { return t * base + std::min(t, extra); }
};

// A call's chunks and the plans of their (at most two) sizes; plans[0] null when refused.
struct call_plans {
  chunking ch{1, 1};
  const plan* plans[2] = {nullptr, nullptr};
  const plan& of(std::uint64_t t) const { return ch.size(t) == ch.size(0) ? *plans[0] : *plans[1]; }
};
call_plans plans_of(direction dir, const kiln_dnn_conv_desc& c) {
  std::uint64_t cap = c.n;
  if (dir == direction::backward_filter) {  // at most 64 MiB of partial gradients
    const std::uint64_t w_bytes = c.k * (c.c / c.groups) * c.r * c.s * sizeof(float);
    cap = (std::uint64_t(64) << 20) / std::max<std::uint64_t>(w_bytes, 1);
  }
  call_plans cp;
  cp.ch = chunking(c.n, chunks_of(c.n, flops_of(c), cap));
  for (int attempt = 0; attempt < 2; ++attempt) {
    cp.plans[0] = plan_for(dir, c, cp.ch.size(0));
    cp.plans[1] = cp.ch.extra ? plan_for(dir, c, cp.ch.base) : nullptr;
    if (!cp.plans[0] || (cp.ch.extra && !cp.plans[1])) return {};
    // Partial filter gradients are summed slot by slot: both sizes must share the layout,
    // else equal chunks (a divisor of n).
    if (dir != direction::backward_filter || !cp.plans[1] ||
        dnnl().dnnl_memory_desc_equal(&cp.plans[0]->out.inner, &cp.plans[1]->out.inner))
      return cp;
    std::uint64_t parts = cp.ch.parts;
    while (c.n % parts) --parts;
    cp.ch = chunking(c.n, parts);
  }
  return cp;
}

// Forward and backward data: per chunk, in[0] and out are the chunk's images; in[1] (the
// weight) is shared. out = alpha result + beta out.
void run_per_image(direction dir, const kiln_dnn_conv_desc& c, float alpha, float beta) {
  const bool fwd = dir == direction::forward;
  char* in_base = at(fwd ? c.x : c.y);
  char* out_base = at(fwd ? c.y : c.x);
  const std::size_t in_image = (fwd ? c.c * c.h * c.w : c.k * c.p * c.q) * sizeof(float);
  const std::size_t out_image = (fwd ? c.k * c.p * c.q : c.c * c.h * c.w) * sizeof(float);
  const call_plans cp = plans_of(dir, c);
  const chunking& ch = cp.ch;
  const plan* const* plans = cp.plans;
  // The weight in each plan's layout, once per call (the second only if it differs).
  const operand& w0 = plans[0]->in[1];
  aligned_buffer wbuf0(w0.reorder ? w0.inner_bytes : 0);
  void* wts[2] = {to_inner(w0, at(c.wt), wbuf0.p), nullptr};
  const bool same_w = !plans[1] || dnnl().dnnl_memory_desc_equal(&w0.inner, &plans[1]->in[1].inner);
  const operand& w1 = same_w ? w0 : plans[1]->in[1];
  aligned_buffer wbuf1(!same_w && w1.reorder ? w1.inner_bytes : 0);
  wts[1] = same_w ? wts[0] : to_inner(w1, at(c.wt), wbuf1.p);
  const bool direct = alpha == 1 && beta == 0;
  pool().run(ch.parts, [&](std::uint64_t t) {
    const bool second = ch.size(t) != ch.size(0);
    const plan& p = second ? *plans[1] : *plans[0];
    void* wt = wts[second ? 1 : 0];
    const std::uint64_t i0 = ch.first(t);
    buffers& b = thread_buffers();
    void* in = to_inner(p.in[0], in_base + i0 * in_image,
                        p.in[0].reorder ? b.get(0, p.in[0].inner_bytes) : nullptr);
    void* out_user = out_base + i0 * out_image;
    const std::size_t out_bytes = ch.size(t) * out_image;
    // The result in the primitive's layout, then in Kiln's (into a temporary unless direct).
    void* result =
        p.out.reorder ? b.get(1, p.out.inner_bytes) : (direct ? out_user : b.get(1, out_bytes));
    void* scratch = b.get(2, p.scratch_bytes);
    execute(p.prim, {{p.in[0].arg, &p.in[0].inner, in},
                     {p.in[1].arg, &p.in[1].inner, wt},
                     {p.out.arg, &p.out.inner, result},
                     {DNNL_ARG_SCRATCHPAD, &p.scratch, scratch}});
    if (direct && !p.out.reorder) return;
    void* plain = result;
    if (p.out.reorder) {
      // Reorder straight into Kiln's tensor when direct; else into a temporary first.
      plain = direct ? out_user : b.get(0, out_bytes);
      execute(p.out.reorder,
              {{DNNL_ARG_FROM, &p.out.inner, result}, {DNNL_ARG_TO, &p.out.user, plain}});
    }
    if (!direct)
      scale_into(static_cast<float*>(out_user), static_cast<const float*>(plain),
                 out_bytes / sizeof(float), alpha, beta);
  });
}

// Backward filter: each chunk's partial gradient (in the primitive's layout) into its own
// slot; the slots summed in chunk order (deterministic), then reordered into Kiln's layout.
void run_filter(const kiln_dnn_conv_desc& c, float alpha, float beta) {
  const std::size_t x_image = c.c * c.h * c.w * sizeof(float);
  const std::size_t y_image = c.k * c.p * c.q * sizeof(float);
  const std::size_t w_elems = c.k * (c.c / c.groups) * c.r * c.s;
  const call_plans cp = plans_of(direction::backward_filter, c);
  const chunking& ch = cp.ch;
  const operand& dw = cp.plans[0]->out;
  const std::size_t slot = elements(dw.inner);
  std::vector<float> partial(slot * ch.parts);
  pool().run(ch.parts, [&](std::uint64_t t) {
    const plan& p = cp.of(t);
    const std::uint64_t i0 = ch.first(t);
    buffers& b = thread_buffers();
    void* x = to_inner(p.in[0], at(c.x) + i0 * x_image,
                       p.in[0].reorder ? b.get(0, p.in[0].inner_bytes) : nullptr);
    void* dy = to_inner(p.in[1], at(c.y) + i0 * y_image,
                        p.in[1].reorder ? b.get(1, p.in[1].inner_bytes) : nullptr);
    execute(p.prim, {{p.in[0].arg, &p.in[0].inner, x},
                     {p.in[1].arg, &p.in[1].inner, dy},
                     {p.out.arg, &p.out.inner, partial.data() + t * slot},
                     {DNNL_ARG_SCRATCHPAD, &p.scratch, b.get(2, p.scratch_bytes)}});
  });
  // Sum the slots into slot 0, over the pool in ranges of the gradient.
  const std::uint64_t ranges =
      ch.parts > 1 ? std::min<std::uint64_t>(pool().size(), slot / 4096 + 1) : 0;
  pool().run(ranges, [&](std::uint64_t r) {
    const std::size_t e0 = slot * r / ranges, e1 = slot * (r + 1) / ranges;
    for (std::uint64_t t = 1; t < ch.parts; ++t) {
      const float* src = partial.data() + t * slot;
      for (std::size_t e = e0; e < e1; ++e) partial[e] += src[e];
    }
  });
  float* out = reinterpret_cast<float*>(at(c.wt));
  const bool direct = alpha == 1 && beta == 0;
  const float* plain = partial.data();
  std::vector<float> tmp;
  if (dw.reorder) {
    float* to = out;
    if (!direct) {
      tmp.resize(w_elems);
      to = tmp.data();
    }
    execute(dw.reorder, {{DNNL_ARG_FROM, &dw.inner, partial.data()}, {DNNL_ARG_TO, &dw.user, to}});
    plain = to;
  }
  if (direct && !dw.reorder) std::memcpy(out, plain, w_elems * sizeof(float));
  if (!direct) scale_into(out, plain, w_elems, alpha, beta);
}

// Checks, reads alpha and beta, resolves the plans (so a refusal comes back now, before
// anything is queued), then queues the run.
kiln_status submit(kiln_queue_h q, const kiln_dnn_conv_desc* d, direction dir,
                   const char* what) noexcept try {
  if (!d) return set_error(KILN_ERR_INVALID_ARGUMENT, "oneDNN %s: null descriptor", what);
  if (d->dtype != KILN_DTYPE_F32)
    return set_error(KILN_ERR_UNSUPPORTED, "oneDNN %s: f32 only on the CPU", what);
  if (d->groups == 0 || d->c % d->groups || d->k % d->groups || d->stride_h == 0 ||
      d->stride_w == 0 || d->dil_h == 0 || d->dil_w == 0 || !d->alpha || !d->beta)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "oneDNN %s: groups, strides and dilations must be >= 1 and divide the "
                     "channels; alpha and beta must be given",
                     what);
  if (d->n == 0 || d->k == 0 || d->c == 0 || d->p == 0 || d->q == 0)
    return set_error(KILN_ERR_UNSUPPORTED, "oneDNN %s: empty convolution", what);
  float alpha, beta;
  std::memcpy(&alpha, d->alpha, sizeof alpha);
  std::memcpy(&beta, d->beta, sizeof beta);
  const kiln_dnn_conv_desc c = *d;
  // Refusals must come back from this call: build the plans of the call's chunk sizes now.
  if (!plans_of(dir, c).plans[0])
    return set_error(KILN_ERR_UNSUPPORTED, "oneDNN %s: only reference kernels take this shape",
                     what);
  q->q.push([c, alpha, beta, dir] {
    try {
      if (dir == direction::backward_filter)
        run_filter(c, alpha, beta);
      else
        run_per_image(dir, c, alpha, beta);
    } catch (...) {  // out of memory or a oneDNN failure on the worker: nothing to report to
      std::abort();
    }
  });
  return KILN_OK;
} catch (const dnnl_error& e) {
  return set_error(KILN_ERR_BACKEND, "oneDNN %s: %s", what, e.what());
} catch (const std::exception& e) {
  return set_error(KILN_ERR_OUT_OF_MEMORY, "oneDNN %s: %s", what, e.what());
}

kiln_status conv_forward(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept {
  return submit(q, d, direction::forward, "conv_forward");
}
kiln_status conv_backward_data(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept {
  return submit(q, d, direction::backward_data, "conv_backward_data");
}
kiln_status conv_backward_filter(kiln_queue_h q, const kiln_dnn_conv_desc* d) noexcept {
  return submit(q, d, direction::backward_filter, "conv_backward_filter");
}
kiln_status pool_refused(kiln_queue_h, const kiln_dnn_pool_desc*) noexcept {
  return set_error(KILN_ERR_UNSUPPORTED,
                   "oneDNN pooling: not used (Kiln's max pooling lets NaN win; portable kernels)");
}

bool loaded() noexcept {
  try {
    return dnnl().lib != nullptr;
  } catch (...) {  // std::bad_alloc naming the library: no extension
    return false;
  }
}

}  // namespace

const void* dnn_extension(const char* name, uint32_t version) noexcept {
  if (!kiln_plugin::is_op(name, KILN_DNN_EXTENSION) || version != KILN_DNN_VERSION || !loaded())
    return nullptr;
  static const kiln_dnn_v1 table = {{KILN_DNN_VERSION, sizeof(kiln_dnn_v1)},
                                    dnnl().library.c_str(),
                                    conv_forward,
                                    conv_backward_data,
                                    conv_backward_filter,
                                    pool_refused,
                                    pool_refused};
  return &table;
}
bool dnn_loaded() noexcept { return loaded(); }
bool dnn_supports(kiln_dtype t) noexcept { return t == KILN_DTYPE_F32 && loaded(); }

}  // namespace kiln::cpu

#else  // no oneDNN headers at configure time: no extension

namespace kiln::cpu {
const void* dnn_extension(const char*, uint32_t) noexcept { return nullptr; }
bool dnn_loaded() noexcept { return false; }
bool dnn_supports(kiln_dtype) noexcept { return false; }
}  // namespace kiln::cpu

#endif
