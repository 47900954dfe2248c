// Helpers over cuDNN's graph (backend) API: dnn_backend.hpp.
#ifdef KILN_HAVE_CUDNN
#include "dnn_backend.hpp"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace kiln_cuda {

kiln_status backend_create(cudnnBackendDescriptorType_t type, Desc* out) {
  if (cudnnStatus_t st = cudnn().cudnnBackendCreateDescriptor(type, out->out());
      st != CUDNN_STATUS_SUCCESS)
    return dnn_fail(st, "cudnnBackendCreateDescriptor", true);
  return KILN_OK;
}

Setter& Setter::operator()(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
                           int64_t count, const void* value) {
  if (st_) return *this;
  if (cudnnStatus_t st = cudnn().cudnnBackendSetAttribute(d_.get(), name, type, count, value);
      st != CUDNN_STATUS_SUCCESS)
    st_ = dnn_fail(st, "cudnnBackendSetAttribute", true);
  return *this;
}

kiln_status Setter::finalize() {
  if (st_) return st_;
  if (cudnnStatus_t st = cudnn().cudnnBackendFinalize(d_.get()); st != CUDNN_STATUS_SUCCESS)
    st_ = dnn_fail(st, "cudnnBackendFinalize", true);
  return st_;
}

int64_t byte_alignment(CUdeviceptr p) {
  int64_t a = 16;
  while (a > 1 && p % static_cast<uint64_t>(a)) a /= 2;
  return a;
}

kiln_status engine_configs(const Desc& graph, cudnnBackendHeurMode_t mode, std::vector<Desc>* out) {
  const CudnnApi& api = cudnn();
  Desc heur;
  if (kiln_status st = backend_create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur)) return st;
  if (kiln_status st = Setter(heur)(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)(
                           CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode)
                           .finalize())
    return st;
  int64_t count = 0;
  if (cudnnStatus_t st =
          api.cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                       CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
      st != CUDNN_STATUS_SUCCESS)
    return dnn_fail(st, "cudnnBackendGetAttribute", true);
  std::vector<Desc> cfgs(static_cast<size_t>(std::max<int64_t>(count, 0)));
  std::vector<cudnnBackendDescriptor_t> raw;
  for (Desc& c : cfgs) {
    if (kiln_status st = backend_create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &c)) return st;
    raw.push_back(c.get());
  }
  int64_t got = 0;
  if (!raw.empty())
    if (cudnnStatus_t st =
            api.cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                         CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data());
        st != CUDNN_STATUS_SUCCESS)
      return dnn_fail(st, "cudnnBackendGetAttribute", true);
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(got, 0, count)));
  *out = std::move(cfgs);
  return KILN_OK;
}

int64_t engine_index(const Desc& cfg) {
  const CudnnApi& api = cudnn();
  Desc engine;
  int64_t n = 0, index = -1;
  if (backend_create(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) ||
      api.cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                   CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n,
                                   engine.out()) != CUDNN_STATUS_SUCCESS)
    return -1;
  api.cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                               &n, &index);
  return index;
}

bool finalize_plan(cudnnHandle_t handle, Desc cfg, int64_t engine, Plan* out) {
  Desc plan;
  const cudnnBackendDescriptor_t c = cfg.get();
  if (backend_create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) ||
      Setter(plan)(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle)(
          CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c)
          .finalize())
    return false;
  int64_t ws = 0, n = 0;
  if (cudnn().cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                       CUDNN_TYPE_INT64, 1, &n, &ws) != CUDNN_STATUS_SUCCESS ||
      ws < 0)
    return false;
  out->cfg = std::move(cfg);
  out->plan = std::move(plan);
  out->engine = engine;
  out->workspace = static_cast<size_t>(ws);
  return true;
}

cudnnStatus_t variant_pack(const int64_t* uids, void* const* ptrs, int64_t count, void* workspace,
                           Desc* vp) {
  const CudnnApi& api = cudnn();
  cudnnStatus_t st =
      api.cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, vp->out());
  if (st == CUDNN_STATUS_SUCCESS)
    st = api.cudnnBackendSetAttribute(vp->get(), CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                      CUDNN_TYPE_INT64, count, uids);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api.cudnnBackendSetAttribute(vp->get(), CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                      CUDNN_TYPE_VOID_PTR, count, ptrs);
  if (st == CUDNN_STATUS_SUCCESS)
    st = api.cudnnBackendSetAttribute(vp->get(), CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                      CUDNN_TYPE_VOID_PTR, 1, &workspace);
  if (st == CUDNN_STATUS_SUCCESS) st = api.cudnnBackendFinalize(vp->get());
  return st;
}

bool env_is(const char* name, const char* value) {
  const char* v = std::getenv(name);
  return v && std::strcmp(v, value) == 0;
}

void debug_log(const char* fmt, ...) {
  if (!env_is("KILN_LOG", "debug") && !env_is("KILN_LOG", "trace")) return;
  char line[768];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "[kiln debug] cuda dnn: %s\n", line);
}

}  // namespace kiln_cuda
#endif  // KILN_HAVE_CUDNN
