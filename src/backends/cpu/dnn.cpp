// The CPU backend's "dnn" extension: convolution through oneDNN (Debian's libdnnl-dev, C API
// v2). dnnl.h is found at configure time (types only); libdnnl is loaded with dlopen on first
// need, never linked, so libkiln still loads where oneDNN is absent: the CPU backend then has
// no "dnn" extension and conv2d runs its portable kernels (im2col + GEMM). Calls are queued on
// the queue's worker thread, in order with copies, launches and GEMMs.
//
// Threads: Kiln owns them, as with OpenBLAS (blas.cpp). Debian's libdnnl runs on OpenMP
// (libgomp): its threads would be a second pool beside Kiln's, busy-waiting at barriers for
// a preempted peer. Instead oneDNN runs with an OpenMP thread count of one (set around each
// call, per thread), and a call is split into chunks of images times slices of channels that run
// over the CPU backend's pool (whose workers steal a preempted worker's tasks). Backward filter
// sums the chunks' partial gradients here, in a fixed order. KILN_DNNL_OPENMP=1 gives oneDNN its
// own OpenMP threads instead, to compare (bench_cpu_load, bench_tensor).
//
// Layouts: Kiln's tensors are NCHW; oneDNN's fast kernels want blocked layouts (nChw16c, ...),
// so each primitive is created with "any" layout and the operands are reordered in and out,
// as PyTorch does for NCHW tensors. Primitives are created once per shape (costly: JIT code),
// cached, and shared by all threads (executing a primitive is thread-safe; each call brings
// its own scratchpad). A configuration only oneDNN's reference kernels take is refused
// (KILN_ERR_UNSUPPORTED): Kiln's portable path is faster than those.
//
// Pooling: average pooling (both divisors) through oneDNN, over chunks of planes. Max pooling
// stays portable: oneDNN's lets a NaN lose to the other elements of its window, where Kiln
// (as PyTorch) lets it win.
#include "backends/cpu/dnn.hpp"

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
namespace onednn {

// $KILN_DNNL_LIBRARY, else the Debian sonames; loaded once. Only the v2 C API (these headers):
// libdnnl.so.3 lacks the *_desc_init functions, so it resolves to no extension.
const dnnl_api& dnnl() {
  static dnnl_api api;
  static std::once_flag once;
  std::call_once(once, [] {
    // KILN_DNNL=0: no oneDNN (the portable kernels; CI's TSan stage runs so).
    if (const char* off = std::getenv("KILN_DNNL"); off && std::string_view(off) == "0") return;
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

}  // namespace onednn

namespace {

using namespace onednn;

// KILN_DNNL_OPENMP=1: for comparison only, oneDNN's own OpenMP threads (as many as the pool)
// and one call per convolution, instead of one thread per task over Kiln's pool.
bool openmp_threads() {
  static const bool on = [] {
    const char* e = std::getenv("KILN_DNNL_OPENMP");
    return e && std::string_view(e) == "1";
  }();
  return on;
}

// The OpenMP thread count oneDNN sees on the calling thread (a per-thread setting) for a
// scope, the caller's own restored after: a task may run on a user's thread (one waiting in
// finish()), whose OpenMP code must keep its threads. One thread, or the pool's size with
// KILN_DNNL_OPENMP=1.
struct omp_threads_scope {
  int before = 0;
  omp_threads_scope() {
    const dnnl_api& d = dnnl();
    if (!d.omp_set_num_threads) return;
    before = d.omp_get_max_threads();
    d.omp_set_num_threads(openmp_threads() ? int(pool().size()) : 1);
  }
  ~omp_threads_scope() {
    if (before > 0) dnnl().omp_set_num_threads(before);
  }
  omp_threads_scope(const omp_threads_scope&) = delete;
  omp_threads_scope& operator=(const omp_threads_scope&) = delete;
};

// The calling thread's stream (a CPU stream runs primitives inline on the caller).
dnnl_stream_t thread_stream() {
  thread_local dnnl_stream_t stream = [] {
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

// The buffers of the thread that runs a call (a queue's worker), for what the call's tasks
// share; kept between calls, since large blocks freed and faulted in again on every call cost
// as much as a small convolution. Separate from thread_buffers(): that thread runs tasks too.
buffers& call_buffers() {
  thread_local buffers b;
  return b;
}

// The cached plan (null: refused). Plans are never destroyed: a cache of a process's shapes,
// kept past exit, when oneDNN's own statics may already be gone.
const plan* plan_for(direction dir, const kiln_dnn_conv_desc& c, std::uint64_t nb,
                     std::uint64_t slices) {
  static std::mutex mu;
  static auto* cache = new std::map<plan_key, const plan*>;
  const plan_key key = {std::uint64_t(dir),
                        nb,
                        slices,
                        c.c,
                        c.h,
                        c.w,
                        c.k,
                        c.r,
                        c.s,
                        c.p,
                        c.q,
                        c.stride_h,
                        c.stride_w,
                        c.pad_h,
                        c.pad_w,
                        c.dil_h,
                        c.dil_w,
                        c.groups,
                        0};
  std::lock_guard lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  // oneDNN sizes a primitive's parallel loops for the creating thread's OpenMP thread count
  // and spawns that many threads when it runs: one.
  const omp_threads_scope threads;
  const plan* p = nullptr;
  try {
    p = make_plan(dir, c, nb, slices);
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
  const omp_threads_scope threads;
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

// How a call is split over the pool: chunks of images times slices of channels (output
// channels for forward and backward filter, input channels for backward data), each slice a
// multiple of 16 channels (oneDNN's block), and the plans of the (at most two) chunk sizes.
// A few tasks per pool thread, so stealing evens out a preempted worker; one task below
// ~0.5 ms of one core. plans[0] null when refused.
struct grid {
  chunking ch{1, 1};
  std::uint64_t slices = 1;
  const plan* plans[2] = {nullptr, nullptr};
  std::uint64_t tasks() const { return ch.parts * slices; }
  int variant(std::uint64_t chunk) const { return ch.size(chunk) == ch.size(0) ? 0 : 1; }
};

grid grid_of(direction dir, const kiln_dnn_conv_desc& c, bool direct) {
  // Tasks: two per pool thread, each at least ~1 MFLOP (some 10 us: a task's memory objects
  // and reorders cost a few), one below ~2 MFLOP.
  const std::uint64_t threads = pool().size();
  const double flops = flops_of(c);
  const bool small = openmp_threads() || threads < 2 || flops < 2e6;
  const std::uint64_t target =
      small ? 1 : std::min<std::uint64_t>(2 * threads, std::uint64_t(flops / 1e6));
  std::uint64_t chunks = std::min<std::uint64_t>(c.n, target);
  if (dir == direction::backward_filter) {  // at most 64 MiB of partial gradients
    const std::uint64_t w_bytes = c.k * (c.c / c.groups) * c.r * c.s * sizeof(float);
    chunks = std::clamp<std::uint64_t>(
        chunks, 1,
        std::max<std::uint64_t>((std::uint64_t(64) << 20) / std::max<std::uint64_t>(w_bytes, 1),
                                1));
  }
  // Slices where the images alone give too few tasks (a dense output: alpha 1, beta 0).
  std::uint64_t slices = 1;
  const std::uint64_t len = dir == direction::backward_data ? c.c : c.k;
  if (direct && c.groups == 1 && chunks < target)
    for (std::uint64_t s = 2; s <= len / 16 && chunks * s <= target; ++s)
      if (len % s == 0 && (len / s) % 16 == 0) slices = s;
  grid g;
  g.slices = slices;
  g.ch = chunking(c.n, chunks);
  for (int attempt = 0; attempt < 2; ++attempt) {
    g.plans[0] = plan_for(dir, c, g.ch.size(0), slices);
    g.plans[1] = g.ch.extra ? plan_for(dir, c, g.ch.base, slices) : nullptr;
    if (!g.plans[0] || (g.ch.extra && !g.plans[1])) return {};
    // Partial filter gradients are summed slot by slot: both sizes must share the layout,
    // else equal chunks (a divisor of n).
    if (dir != direction::backward_filter || !g.plans[1] ||
        dnnl().dnnl_memory_desc_equal(&g.plans[0]->out.inner, &g.plans[1]->out.inner))
      return g;
    std::uint64_t parts = g.ch.parts;
    while (c.n % parts) --parts;
    g.ch = chunking(c.n, parts);
  }
  return g;
}

// One call over the pool. Inputs that only depend on the chunk (the images of in[0]) or only
// on the slice (the weight of forward and backward data) are reordered once, before the tasks,
// when several tasks share them; the rest inside each task. Forward and backward data write
// their slice of the output; backward filter writes each task's partial gradient to its slot,
// and the slots are summed in chunk order (deterministic), then reordered into Kiln's layout.
void run(direction dir, const kiln_dnn_conv_desc& c, float alpha, float beta) {
  const bool direct = alpha == 1 && beta == 0;
  const grid g = grid_of(dir, c, direct);
  const bool filter = dir == direction::backward_filter;
  const std::uint64_t sl = (dir == direction::backward_data ? c.c : c.k) / g.slices;
  const std::uint64_t chw = c.c * c.h * c.w, kpq = c.k * c.p * c.q, crs = c.c * c.r * c.s;
  // Element offsets of chunk i0 / slice j in in[0], in[1] and out.
  const auto in0_at = [&](std::uint64_t i0) {
    return at(dir == direction::backward_data ? c.y : c.x) +
           i0 * (dir == direction::backward_data ? kpq : chw) * sizeof(float);
  };
  const auto in1_at = [&](std::uint64_t i0, std::uint64_t j) {
    if (filter) return at(c.y) + (i0 * kpq + j * sl * c.p * c.q) * sizeof(float);
    // The weight's slice: output channels [j sl, ...) or input channels [j sl, ...).
    return at(c.wt) +
           (dir == direction::forward ? j * sl * crs : j * sl * c.r * c.s) * sizeof(float);
  };
  const auto out_at = [&](std::uint64_t i0, std::uint64_t j) {
    return dir == direction::forward ? at(c.y) + (i0 * kpq + j * sl * c.p * c.q) * sizeof(float)
                                     : at(c.x) + (i0 * chw + j * sl * c.h * c.w) * sizeof(float);
  };
  const std::uint64_t chunks = g.ch.parts, slices = g.slices;

  // What tasks share, carved from one block of the calling thread: in[0] per chunk (shared
  // by the chunk's slices), the weight per slice and per chunk-size variant whose layout
  // differs (shared by the chunks), and backward filter's partial gradients.
  std::size_t total = 0;
  const auto carve = [&](std::size_t bytes) {
    const std::size_t at = total;
    total += (bytes + 63) / 64 * 64;
    return at;
  };
  const bool share0 = slices > 1;
  std::vector<std::size_t> in0_off(share0 ? chunks : 0);
  for (std::uint64_t t = 0; t < in0_off.size(); ++t) {
    const operand& o = g.plans[g.variant(t)]->in[0];
    in0_off[t] = carve(o.reorder ? o.inner_bytes : 0);
  }
  const bool same1 = !g.plans[1] || dnnl().dnnl_memory_desc_equal(&g.plans[0]->in[1].inner,
                                                                  &g.plans[1]->in[1].inner);
  const std::uint64_t variants = filter ? 0 : same1 ? 1 : 2;
  std::vector<std::size_t> w_off(variants * slices);
  for (std::uint64_t v = 0; v < w_off.size(); ++v) {
    const operand& o = g.plans[v / slices]->in[1];
    w_off[v] = carve(o.reorder ? o.inner_bytes : 0);
  }
  const std::size_t slot = filter ? g.plans[0]->out.inner_bytes / sizeof(float) : 0;
  const std::size_t slot_elems =
      filter ? std::max<std::size_t>(slot, sl * (c.c / c.groups) * c.r * c.s) : 0;
  const std::size_t partial_off = carve(slot_elems * chunks * slices * sizeof(float));
  char* shared = static_cast<char*>(call_buffers().get(0, total));
  float* partial = reinterpret_cast<float*>(shared + partial_off);

  std::vector<void*> in0(in0_off.size()), w(w_off.size());
  pool().run(in0.size(), [&](std::uint64_t t) {
    in0[t] = to_inner(g.plans[g.variant(t)]->in[0], in0_at(g.ch.first(t)), shared + in0_off[t]);
  });
  pool().run(w.size(), [&](std::uint64_t v) {
    w[v] = to_inner(g.plans[v / slices]->in[1], in1_at(0, v % slices), shared + w_off[v]);
  });

  pool().run(chunks * slices, [&](std::uint64_t task) {
    const std::uint64_t t = task / slices, j = task % slices, i0 = g.ch.first(t);
    const int variant = g.variant(t);
    const plan& p = *g.plans[variant];
    buffers& b = thread_buffers();
    void* a0 = share0 ? in0[t]
                      : to_inner(p.in[0], in0_at(i0),
                                 p.in[0].reorder ? b.get(0, p.in[0].inner_bytes) : nullptr);
    void* a1 = filter ? to_inner(p.in[1], in1_at(i0, j),
                                 p.in[1].reorder ? b.get(1, p.in[1].inner_bytes) : nullptr)
                      : w[(same1 ? 0 : variant) * slices + j];
    void* scratch = b.get(2, p.scratch_bytes);
    if (filter) {  // the partial gradient, in the primitive's layout
      execute(p.prim, {{p.in[0].arg, &p.in[0].inner, a0},
                       {p.in[1].arg, &p.in[1].inner, a1},
                       {p.out.arg, &p.out.inner, partial + (j * chunks + t) * slot_elems},
                       {DNNL_ARG_SCRATCHPAD, &p.scratch, scratch}});
      return;
    }
    void* out_user = out_at(i0, j);
    // Not direct: slices == 1, so the chunk's output is dense; a temporary, then scaled.
    const std::size_t out_bytes =
        g.ch.size(t) * (dir == direction::forward ? kpq : chw) * sizeof(float);
    void* result =
        p.out.reorder ? b.get(1, p.out.inner_bytes) : (direct ? out_user : b.get(1, out_bytes));
    execute(p.prim, {{p.in[0].arg, &p.in[0].inner, a0},
                     {p.in[1].arg, &p.in[1].inner, a1},
                     {p.out.arg, &p.out.inner, result},
                     {DNNL_ARG_SCRATCHPAD, &p.scratch, scratch}});
    if (direct && !p.out.reorder) return;
    void* plain = result;
    if (p.out.reorder) {
      plain = direct ? out_user : b.get(0, out_bytes);
      execute(p.out.reorder,
              {{DNNL_ARG_FROM, &p.out.inner, result}, {DNNL_ARG_TO, &p.out.user, plain}});
    }
    if (!direct)
      scale_into(static_cast<float*>(out_user), static_cast<const float*>(plain),
                 out_bytes / sizeof(float), alpha, beta);
  });
  if (!filter) return;

  // Sum each slice's chunks into its first slot, over the pool in ranges of the gradient.
  const std::uint64_t ranges =
      chunks > 1 ? std::min<std::uint64_t>(pool().size(), slot / 4096 + 1) : 0;
  pool().run(ranges * slices, [&](std::uint64_t rj) {
    const std::uint64_t r = rj % ranges, j = rj / ranges;
    float* sum = partial + j * chunks * slot_elems;
    const std::size_t e0 = slot * r / ranges, e1 = slot * (r + 1) / ranges;
    for (std::uint64_t t = 1; t < chunks; ++t) {
      const float* src = sum + t * slot_elems;
      for (std::size_t e = e0; e < e1; ++e) sum[e] += src[e];
    }
  });
  // Into Kiln's layout: slice j is weight rows [j sl, (j + 1) sl), dense.
  const operand& dw = g.plans[0]->out;
  const std::size_t w_slice = sl * (c.c / c.groups) * c.r * c.s;
  pool().run(slices, [&](std::uint64_t j) {
    float* sum = partial + j * chunks * slot_elems;
    float* out = reinterpret_cast<float*>(at(c.wt)) + j * w_slice;
    float* plain = sum;
    std::vector<float> tmp;
    if (dw.reorder) {
      if (!direct) tmp.resize(w_slice);
      plain = direct ? out : tmp.data();
      execute(dw.reorder, {{DNNL_ARG_FROM, &dw.inner, sum}, {DNNL_ARG_TO, &dw.user, plain}});
    }
    if (direct && !dw.reorder) std::memcpy(out, plain, w_slice * sizeof(float));
    if (!direct) scale_into(out, plain, w_slice, alpha, beta);
  });
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
  if (!grid_of(dir, c, alpha == 1 && beta == 0).plans[0])
    return set_error(KILN_ERR_UNSUPPORTED, "oneDNN %s: only reference kernels take this shape",
                     what);
  q->q.push([c, alpha, beta, dir] {
    try {
      run(dir, c, alpha, beta);
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
// Average pooling of planes [i0, i0 + np) of n x c, each task a chunk of planes read as one
// [1, np, h, w] NCHW tensor (no reorder: oneDNN's kernels take NCHW for pooling).
struct pool_plan {
  dnnl_primitive_t prim = nullptr;
  dnnl_memory_desc_t src{}, dst{}, scratch{};
  std::size_t scratch_bytes = 0;
};

const pool_plan* pool_plan_for(const kiln_dnn_pool_desc& p, std::uint64_t planes) {
  static std::mutex mu;
  static auto* cache = new std::map<std::array<std::uint64_t, 12>, const pool_plan*>;
  const std::array<std::uint64_t, 12> key = {std::uint64_t(p.mode),
                                             planes,
                                             p.h,
                                             p.w,
                                             p.p,
                                             p.q,
                                             p.win_h,
                                             p.win_w,
                                             p.stride_h,
                                             p.stride_w,
                                             p.pad_h,
                                             p.pad_w};
  std::lock_guard lock(mu);
  if (auto it = cache->find(key); it != cache->end()) return it->second;
  const omp_threads_scope threads;
  const dnnl_api& d = dnnl();
  using D = dnnl_dim_t;
  auto pp = std::make_unique<pool_plan>();
  const dnnl_dims_t src_dims = {1, D(planes), D(p.h), D(p.w)},
                    dst_dims = {1, D(planes), D(p.p), D(p.q)};
  check(d.dnnl_memory_desc_init_by_tag(&pp->src, 4, src_dims, dnnl_f32, dnnl_nchw), "md");
  check(d.dnnl_memory_desc_init_by_tag(&pp->dst, 4, dst_dims, dnnl_f32, dnnl_nchw), "md");
  const dnnl_dims_t strides = {p.stride_h, p.stride_w}, kernel = {p.win_h, p.win_w}, dil = {0, 0};
  const dnnl_dims_t pad_l = {p.pad_h, p.pad_w};
  const dnnl_dims_t pad_r = {D((p.p - 1) * p.stride_h + p.win_h) - D(p.h + p.pad_h),
                             D((p.q - 1) * p.stride_w + p.win_w) - D(p.w + p.pad_w)};
  dnnl_pooling_v2_desc_t desc;
  const dnnl_alg_kind_t alg = p.mode == KILN_DNN_POOL_AVG_INCLUDE_PAD
                                  ? dnnl_pooling_avg_include_padding
                                  : dnnl_pooling_avg_exclude_padding;
  check(d.dnnl_pooling_v2_forward_desc_init(&desc, dnnl_forward_inference, alg, &pp->src, &pp->dst,
                                            strides, kernel, dil, pad_l, pad_r),
        "oneDNN pooling descriptor");
  const scratchpad_attr attr;
  pd_holder pd;
  const pool_plan* out = nullptr;
  const char* impl = nullptr;
  if (d.dnnl_primitive_desc_create(&pd.pd, &desc, attr.a, d.engine, nullptr) == dnnl_success &&
      d.dnnl_primitive_desc_query(pd.pd, dnnl_query_impl_info_str, 0, &impl) == dnnl_success &&
      impl && !std::string_view(impl).starts_with("ref")) {
    pp->scratch = *d.dnnl_primitive_desc_query_md(pd.pd, dnnl_query_scratchpad_md, 0);
    pp->scratch_bytes = d.dnnl_memory_desc_get_size(&pp->scratch);
    check(d.dnnl_primitive_create(&pp->prim, pd.pd), "oneDNN pooling");
    out = pp.release();
  }
  cache->emplace(key, out);
  return out;
}

// Planes per task: a few chunks per pool thread; one below ~0.2 ms of one core.
chunking pool_chunks(const kiln_dnn_pool_desc& p) {
  const std::uint64_t planes = p.n * p.c, threads = pool().size();
  const double work = double(planes) * double(p.p * p.q * p.win_h * p.win_w + p.h * p.w);
  const std::uint64_t parts =
      threads < 2 || work < 1e6 ? 1 : std::min<std::uint64_t>(planes, threads * 4);
  return chunking(planes, parts);
}

// Average pooling (both divisors) through oneDNN; max pooling is refused: oneDNN lets a NaN
// lose to the other elements of its window, Kiln (as PyTorch) lets it win.
kiln_status pool_forward(kiln_queue_h q, const kiln_dnn_pool_desc* d) noexcept try {
  if (!d) return set_error(KILN_ERR_INVALID_ARGUMENT, "oneDNN pool_forward: null descriptor");
  if (d->mode == KILN_DNN_POOL_MAX)
    return set_error(KILN_ERR_UNSUPPORTED,
                     "oneDNN pool_forward: max pooling stays portable (oneDNN drops NaN)");
  if (d->mode != KILN_DNN_POOL_AVG_INCLUDE_PAD && d->mode != KILN_DNN_POOL_AVG_EXCLUDE_PAD)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "oneDNN pool_forward: unknown mode %d",
                     int(d->mode));
  if (d->dtype != KILN_DTYPE_F32)
    return set_error(KILN_ERR_UNSUPPORTED, "oneDNN pool_forward: f32 only on the CPU");
  if (d->win_h == 0 || d->win_w == 0 || d->stride_h == 0 || d->stride_w == 0 ||
      d->h + 2 * d->pad_h < d->win_h || d->w + 2 * d->pad_w < d->win_w ||
      d->p != (d->h + 2 * d->pad_h - d->win_h) / d->stride_h + 1 ||
      d->q != (d->w + 2 * d->pad_w - d->win_w) / d->stride_w + 1 || d->pad_h >= d->win_h ||
      d->pad_w >= d->win_w)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "oneDNN pool_forward: window and stride must be >= 1, padding below the "
                     "window, and p x q the output of h x w");
  if (d->n * d->c == 0) return set_error(KILN_ERR_UNSUPPORTED, "oneDNN pool_forward: empty");
  const kiln_dnn_pool_desc p = *d;
  const chunking ch = pool_chunks(p);
  if (!pool_plan_for(p, ch.size(0)) || (ch.extra && !pool_plan_for(p, ch.base)))
    return set_error(KILN_ERR_UNSUPPORTED,
                     "oneDNN pool_forward: only reference kernels take this shape");
  q->q.push([p] {
    try {
      const chunking ch = pool_chunks(p);
      const pool_plan* plans[2] = {pool_plan_for(p, ch.size(0)),
                                   ch.extra ? pool_plan_for(p, ch.base) : nullptr};
      pool().run(ch.parts, [&](std::uint64_t t) {
        const pool_plan& pp = *plans[ch.size(t) == ch.size(0) ? 0 : 1];
        const std::uint64_t i0 = ch.first(t);
        execute(pp.prim,
                {{DNNL_ARG_SRC, &pp.src, at(p.x) + i0 * p.h * p.w * sizeof(float)},
                 {DNNL_ARG_DST, &pp.dst, at(p.y) + i0 * p.p * p.q * sizeof(float)},
                 {DNNL_ARG_SCRATCHPAD, &pp.scratch, thread_buffers().get(2, pp.scratch_bytes)}});
      });
    } catch (...) {  // out of memory or a oneDNN failure on the worker: nothing to report to
      std::abort();
    }
  });
  return KILN_OK;
} catch (const dnnl_error& e) {
  return set_error(KILN_ERR_BACKEND, "oneDNN pool_forward: %s", e.what());
} catch (const std::exception& e) {
  return set_error(KILN_ERR_OUT_OF_MEMORY, "oneDNN pool_forward: %s", e.what());
}

// The core computes pooling gradients with its own kernels (cuDNN's need the forward's
// output, which a caller holding indices does not keep): none here.
kiln_status pool_backward(kiln_queue_h, const kiln_dnn_pool_desc*) noexcept {
  return set_error(KILN_ERR_UNSUPPORTED, "oneDNN pool_backward: not provided (portable kernels)");
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
                                    pool_forward,
                                    pool_backward,
                                    nullptr,  // no fused attention: the core computes it
                                    nullptr};
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
