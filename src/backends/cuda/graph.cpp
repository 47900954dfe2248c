// CUDA graphs for kiln::graph: stream capture (relaxed mode), instantiation, in-place update of
// an executable graph, replay. The core forks other queues into a capture with events
// (cuStreamWaitEvent on an event recorded on a capturing stream joins that stream to it).
#include "cuda_backend.hpp"

namespace kiln_cuda {
namespace {

kiln_status no_graphs(const char* what) {
  return set_error(KILN_ERR_UNSUPPORTED, "%s: the CUDA driver lacks the graph API", what);
}

}  // namespace

kiln_status graph_capture_begin(kiln_queue_h queue) {
  if (!queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "graph_capture_begin: queue is NULL");
  if (!g_cu.has_graphs) return no_graphs("graph_capture_begin");
  if (kiln_status st = make_current(queue->dev); st) return st;
  // Relaxed: other threads of the process (another graph's lanes, a ring's host loop) keep
  // making calls the global mode would refuse while this capture runs.
  CUresult r = g_cu.cuStreamBeginCapture(queue->stream, CU_STREAM_CAPTURE_MODE_RELAXED);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuStreamBeginCapture");
}

kiln_status graph_capture_end(kiln_queue_h queue, kiln_graph_h* exec, uint32_t* rebuilt) {
  if (!queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "graph_capture_end: queue is NULL");
  if (!g_cu.has_graphs) return no_graphs("graph_capture_end");
  if (kiln_status st = make_current(queue->dev); st) return st;
  if (rebuilt) *rebuilt = 0;
  CUgraph graph = nullptr;
  // An invalidated capture (an unsupported call on a captured stream) fails here, graph NULL.
  if (CUresult r = g_cu.cuStreamEndCapture(queue->stream, &graph); r != CUDA_SUCCESS)
    return cu_fail(r, "cuStreamEndCapture");
  // The executable graph is independent of the captured one: free it on every path.
  struct graph_guard {
    CUgraph g;
    ~graph_guard() {
      if (g) g_cu.cuGraphDestroy(g);
    }
  } guard{graph};
  if (!exec) return KILN_OK;  // discarded
  if (*exec) {
    CUgraphExecUpdateResultInfo info{};
    CUresult r = g_cu.cuGraphExecUpdate((*exec)->exec, graph, &info);
    if (r == CUDA_SUCCESS) return KILN_OK;
    // Anything but "the topology or node kinds changed" is a real failure.
    if (r != CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE) return cu_fail(r, "cuGraphExecUpdate");
  }
  CUgraphExec made = nullptr;
  if (CUresult r = g_cu.cuGraphInstantiate(&made, graph, 0); r != CUDA_SUCCESS)
    return cu_fail(r, "cuGraphInstantiateWithFlags");
  if (*exec) {
    if (CUresult r = g_cu.cuGraphExecDestroy((*exec)->exec); r != CUDA_SUCCESS)
      cu_fail(r, "cuGraphExecDestroy");  // recorded only: the new one replaces it anyway
    (*exec)->exec = made;
    if (rebuilt) *rebuilt = 1;
  } else {
    *exec = new kiln_graph_s{queue->dev, made};
    queue->dev->live_graphs.fetch_add(1);
  }
  return KILN_OK;
}

kiln_status graph_launch(kiln_graph_h exec, kiln_queue_h queue) {
  if (!exec || !queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "graph_launch: NULL argument");
  if (!g_cu.has_graphs) return no_graphs("graph_launch");
  if (kiln_status st = make_current(queue->dev); st) return st;
  CUresult r = g_cu.cuGraphLaunch(exec->exec, queue->stream);
  return r == CUDA_SUCCESS ? KILN_OK : cu_fail(r, "cuGraphLaunch");
}

void graph_destroy(kiln_graph_h exec) {
  if (!exec) return;
  if (g_cu.has_graphs && make_current(exec->dev) == KILN_OK) {
    CUresult r = g_cu.cuGraphExecDestroy(exec->exec);
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_DEINITIALIZED) cu_fail(r, "cuGraphExecDestroy");
  }
  kiln_device_s* dev = exec->dev;
  delete exec;
  if (dev->live_graphs.fetch_sub(1) == 1) {
    std::vector<CUdeviceptr> retired;
    {
      std::lock_guard<std::mutex> lock(dev->retired_mu);
      retired.swap(dev->retired);
    }
    // Rare (a workspace grew while a graph lived): wait for the device, then free.
    if (!retired.empty() && make_current(dev) == KILN_OK && g_cu.cuCtxSynchronize() == CUDA_SUCCESS)
      for (CUdeviceptr p : retired)
        dev->pool ? g_cu.cuMemFreeAsync(p, dev->internal) : g_cu.cuMemFree(p);
  }
}

}  // namespace kiln_cuda
