// In-order command queues with profiling, and events as markers.
#include "opencl_backend.hpp"

namespace kiln_opencl {

namespace {

kiln_status marker_time(cl_event e, cl_ulong* ns) {
  cl_int r = g_cl.clGetEventProfilingInfo(e, CL_PROFILING_COMMAND_END, sizeof *ns, ns, nullptr);
  return r == CL_SUCCESS ? KILN_OK : cl_fail(r, "clGetEventProfilingInfo(COMMAND_END)");
}

}  // namespace

kiln_status queue_create(kiln_device_h dev, kiln_queue_h* out) {
  if (!dev || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "queue_create: NULL argument");
  cl_int e = CL_SUCCESS;
  cl_command_queue q = g_cl.clCreateCommandQueue(dev->ctx, dev->id, CL_QUEUE_PROFILING_ENABLE, &e);
  if (e != CL_SUCCESS) return cl_fail(e, "clCreateCommandQueue");
  auto* queue = new kiln_queue_s{dev, q};
  arm_exit_guard();
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    s.queues.push_back(queue);
  }
  *out = queue;
  return KILN_OK;
}

void queue_destroy(kiln_queue_h queue) {
  if (!queue) return;
  {
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    std::erase(s.queues, queue);
  }
  g_cl.clFinish(queue->q);
  g_cl.clReleaseCommandQueue(queue->q);
  delete queue;
}

kiln_status queue_finish(kiln_queue_h queue) {
  if (!queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "queue_finish: queue is NULL");
  cl_int e = g_cl.clFinish(queue->q);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clFinish");
}

kiln_status queue_native(kiln_queue_h queue, void** out) {
  if (!queue || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "queue_native: NULL argument");
  *out = queue->q;
  return KILN_OK;
}

// An OpenCL queue says nothing of its commands' state: a marker event would be what the core's
// own fallback (record, then query) does.
kiln_status queue_idle(kiln_queue_h) {
  return set_error(KILN_ERR_UNSUPPORTED, "queue_idle: OpenCL queues are polled through an event");
}

kiln_status queue_wait_event(kiln_queue_h queue, kiln_event_h event) {
  if (!queue || !event)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "queue_wait_event: NULL argument");
  if (!event->ev) return KILN_OK;  // never recorded: nothing to wait for
  if (event->dev != queue->dev) {
    // Another device's context: OpenCL cannot wait on its events in a queue; wait here.
    cl_int e = g_cl.clWaitForEvents(1, &event->ev);
    return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clWaitForEvents");
  }
  cl_int e = g_cl.clEnqueueBarrierWithWaitList(queue->q, 1, &event->ev, nullptr);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clEnqueueBarrierWithWaitList");
}

kiln_status event_create(kiln_device_h dev, kiln_event_h* out) {
  if (!dev || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "event_create: NULL argument");
  *out = new kiln_event_s{dev, nullptr};
  return KILN_OK;
}

void event_destroy(kiln_event_h event) {
  if (!event) return;
  if (event->ev) g_cl.clReleaseEvent(event->ev);
  delete event;
}

kiln_status event_record(kiln_event_h event, kiln_queue_h queue) {
  if (!event || !queue) return set_error(KILN_ERR_INVALID_ARGUMENT, "event_record: NULL argument");
  if (event->dev != queue->dev)
    return set_error(KILN_ERR_INVALID_ARGUMENT,
                     "event_record: the event and the queue belong to different devices");
  cl_event e = nullptr;
  cl_int r = g_cl.clEnqueueMarkerWithWaitList(queue->q, 0, nullptr, &e);
  if (r != CL_SUCCESS) return cl_fail(r, "clEnqueueMarkerWithWaitList");
  // Submit now: another thread may poll or wait on the event without touching this queue.
  if ((r = g_cl.clFlush(queue->q)) != CL_SUCCESS) {
    g_cl.clReleaseEvent(e);
    return cl_fail(r, "clFlush");
  }
  if (event->ev) g_cl.clReleaseEvent(event->ev);
  event->ev = e;
  return KILN_OK;
}

kiln_status event_wait(kiln_event_h event) {
  if (!event) return set_error(KILN_ERR_INVALID_ARGUMENT, "event_wait: event is NULL");
  if (!event->ev) return KILN_OK;
  cl_int e = g_cl.clWaitForEvents(1, &event->ev);
  return e == CL_SUCCESS ? KILN_OK : cl_fail(e, "clWaitForEvents");
}

kiln_status event_query(kiln_event_h event) {
  if (!event) return set_error(KILN_ERR_INVALID_ARGUMENT, "event_query: event is NULL");
  if (!event->ev) return KILN_OK;
  cl_int status = CL_COMPLETE;
  cl_int e = g_cl.clGetEventInfo(event->ev, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status,
                                 &status, nullptr);
  if (e != CL_SUCCESS) return cl_fail(e, "clGetEventInfo");
  if (status < 0) return cl_fail(status, "an earlier command on the queue failed");
  return status == CL_COMPLETE ? KILN_OK : KILN_ERR_NOT_FOUND;
}

kiln_status event_elapsed_ms(kiln_event_h start, kiln_event_h end, float* out_ms) {
  if (!start || !end || !out_ms)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "event_elapsed_ms: NULL argument");
  if (!start->ev || !end->ev)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "event_elapsed_ms: an event was never recorded");
  if (event_query(start) != KILN_OK || event_query(end) != KILN_OK)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "event_elapsed_ms: an event has not completed");
  cl_ulong a = 0, b = 0;
  if (kiln_status st = marker_time(start->ev, &a); st) return st;
  if (kiln_status st = marker_time(end->ev, &b); st) return st;
  *out_ms = static_cast<float>((static_cast<double>(b) - static_cast<double>(a)) * 1e-6);
  return KILN_OK;
}

}  // namespace kiln_opencl
