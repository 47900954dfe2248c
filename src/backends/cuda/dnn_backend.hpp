// Small helpers over cuDNN's graph (backend) API shared by the plugin's graph users
// (dnn_graph.cpp: convolutions; dnn_attention.cpp: fused attention): an owning descriptor
// handle, attribute setting that stops at the first refusal, the engine configs heuristics
// offer, and the KILN_LOG=debug line. Every failure is recorded with dnn_fail.
#pragma once
#ifdef KILN_HAVE_CUDNN
#include <cstdint>
#include <vector>

#include "dnn.hpp"

namespace kiln_cuda {

// One backend descriptor, destroyed with its owner unless leaked (the device gone).
class Desc {
 public:
  Desc() = default;
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  Desc(Desc&& o) noexcept : d_(o.d_) { o.d_ = nullptr; }
  Desc& operator=(Desc&& o) noexcept {
    if (this != &o) {
      reset();
      d_ = o.d_;
      o.d_ = nullptr;
    }
    return *this;
  }
  ~Desc() { reset(); }
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t* out() { return &d_; }
  void leak() { d_ = nullptr; }

 private:
  void reset() {
    if (d_) cudnn().cudnnBackendDestroyDescriptor(d_);
    d_ = nullptr;
  }
  cudnnBackendDescriptor_t d_ = nullptr;
};

kiln_status backend_create(cudnnBackendDescriptorType_t type, Desc* out);

// Sets attributes on a descriptor in order and finalizes it, stopping at the first failure (its
// error recorded).
class Setter {
 public:
  explicit Setter(const Desc& d) : d_(d) {}
  Setter& operator()(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                     int64_t count, const void* value);
  // One backend descriptor as the value.
  Setter& operator()(cudnnBackendAttributeName_t name, const Desc& value) {
    const cudnnBackendDescriptor_t v = value.get();
    return (*this)(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
  }
  kiln_status finalize();
  kiln_status status() const { return st_; }

 private:
  const Desc& d_;
  kiln_status st_ = KILN_OK;
};

// The largest power of two up to 16 that divides the address: the byte alignment a plan may
// assume (part of plan cache keys, so a less aligned operand gets its own plan).
int64_t byte_alignment(CUdeviceptr p);

// The engine configs heuristics mode `mode` offers for an operation graph, best first. May be
// empty.
kiln_status engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode, std::vector<Desc>* out);

// The global index of an engine config's engine (-1 when cuDNN does not say), for the log.
int64_t engine_index(const Desc& cfg);

// A finalized execution plan with its engine config and workspace size.
struct Plan {
  Desc cfg, plan;
  int64_t engine = -1;  // the engine's global index, for the log
  size_t workspace = 0;
  void leak() {
    cfg.leak();
    plan.leak();
  }
};

// The execution plan of engine config `cfg` (engine: its global index) on the handle, with the
// workspace it needs; false when cuDNN does not finalize it.
bool finalize_plan(cudnnHandle_t handle, Desc cfg, int64_t engine, Plan* out);

// A finalized variant pack: the non-virtual tensors' uids and pointers, and the workspace.
cudnnStatus_t variant_pack(const int64_t* uids, void* const* ptrs, int64_t count, void* workspace,
                           Desc* vp);

// Destroys a queue's plan cache (a struct with `map` of entries holding `graph` and `plan`);
// without the device the descriptors are left as the handle is: destroying them may touch it.
template <class Plans>
void release_plans(Plans*& plans, bool device) noexcept {
  Plans* p = plans;
  plans = nullptr;
  if (!p) return;
  if (!device)
    for (auto& [key, e] : p->map) {
      e.graph.leak();
      if (e.plan) e.plan->leak();
    }
  delete p;
}

bool env_is(const char* name, const char* value);

// One line on stderr with KILN_LOG=debug or trace (the core's log levels), prefixed
// "[kiln debug] cuda dnn: ".
void debug_log(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

}  // namespace kiln_cuda
#endif  // KILN_HAVE_CUDNN
