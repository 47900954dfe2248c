#include "kiln/native_handle.hpp"
#include "kiln/queue_poll.hpp"
#include "runtime/runtime.hpp"

namespace kiln {
namespace detail {

// Objects of a generation before a device reset died with it: never hand them back.
queue_impl::~queue_impl() {
  if (handle && !dev->stale(gen)) dev->api->queue_destroy(handle);  // waits; never throws
}

event_impl::~event_impl() {
  if (handle && !dev->stale(gen)) dev->api->event_destroy(handle);
}

void throw_empty_handle(const char* what, const char* kind) {
  throw invalid_argument(std::string(what) + ": an empty (moved-from or null) " + kind + " handle");
}

}  // namespace detail

namespace {
detail::queue_impl& live(const std::shared_ptr<detail::queue_impl>& q, const char* what) {
  if (!q) detail::throw_empty_handle(what, "queue");
  return *q;
}
detail::event_impl& live(const std::shared_ptr<detail::event_impl>& e, const char* what) {
  if (!e) detail::throw_empty_handle(what, "event");
  return *e;
}
}  // namespace

namespace {
detail::device_impl& live_device(const device& dev) {
  if (!dev.impl()) detail::throw_empty_handle("kiln::queue", "device");
  return *dev.impl();
}
}  // namespace

queue::queue(const device& dev) : impl_(live_device(dev).make_queue()) {}

const device& queue::get_device() const { return live(impl_, "queue::get_device").public_device; }

event queue::record() {
  live(impl_, "queue::record");
  impl_->dev->check_alive(impl_->gen, "recording an event");
  auto e = std::make_shared<detail::event_impl>();
  e->dev = impl_->dev;
  e->gen = impl_->gen;
  const kiln_backend& api = *impl_->dev->api;
  detail::check(api, api.event_create(impl_->dev->handle(), &e->handle), "creating an event");
  detail::check(api, api.event_record(e->handle, impl_->handle), "recording an event");
  return event(std::move(e));
}

void queue::wait(const event& e) {
  live(impl_, "queue::wait");
  live(e.impl(), "queue::wait");
  if (e.impl()->dev != impl_->dev)
    throw invalid_argument("queue::wait: the event belongs to device " + e.impl()->dev->id +
                           ", the queue to " + impl_->dev->id);
  impl_->dev->check_alive(impl_->gen, "waiting on an event");
  impl_->dev->check_alive(e.impl()->gen, "waiting on an event");
  const kiln_backend& api = *impl_->dev->api;
  detail::check(api, api.queue_wait_event(impl_->handle, e.impl()->handle), "waiting on an event");
}

void queue::finish() {
  live(impl_, "queue::finish");
  impl_->dev->check_alive(impl_->gen, "finishing a queue");
  const kiln_backend& api = *impl_->dev->api;
  detail::check(api, api.queue_finish(impl_->handle), "finishing a queue");
}

bool idle(const queue& q) {
  const auto& impl = q.impl();
  live(impl, "kiln::idle");
  impl->dev->check_alive(impl->gen, "polling a queue");
  const kiln_backend& api = *impl->dev->api;
  if (KILN_BACKEND_HAS(&api, queue_idle)) {
    const kiln_status st = api.queue_idle(impl->handle);
    if (st == KILN_OK) return true;
    if (st == KILN_ERR_NOT_FOUND) return false;
    if (st != KILN_ERR_UNSUPPORTED) detail::check(api, st, "polling a queue");
  }
  queue handle = q;  // recording is not const: a second handle to the same queue records
  return handle.record().done();  // a backend that tells only through an event
}

void* native_handle(const queue& q) {
  const auto& impl = q.impl();
  live(impl, "kiln::native_handle");
  impl->dev->check_alive(impl->gen, "taking a queue's native handle");
  const kiln_backend& api = *impl->dev->api;
  if (!KILN_BACKEND_HAS(&api, queue_native))
    throw unsupported(std::string("kiln::native_handle: the ") + api.name +
                      " plugin predates native queue handles; rebuild it");
  void* out = nullptr;
  detail::check(api, api.queue_native(impl->handle, &out), "taking a queue's native handle");
  return out;
}

void event::wait() const {
  live(impl_, "event::wait");
  impl_->dev->check_alive(impl_->gen, "waiting for an event");
  const kiln_backend& api = *impl_->dev->api;
  detail::check(api, api.event_wait(impl_->handle), "waiting for an event");
}

bool event::done() const {
  live(impl_, "event::done");
  impl_->dev->check_alive(impl_->gen, "querying an event");
  const kiln_backend& api = *impl_->dev->api;
  kiln_status s = api.event_query(impl_->handle);
  if (s == KILN_ERR_NOT_FOUND) return false;
  detail::check(api, s, "querying an event");
  return true;
}

float elapsed_ms(const event& start, const event& stop) {
  live(start.impl(), "elapsed_ms (start)");
  live(stop.impl(), "elapsed_ms (stop)");
  if (start.impl()->dev != stop.impl()->dev)
    throw invalid_argument("elapsed_ms: events of different devices (" + start.impl()->dev->id +
                           ", " + stop.impl()->dev->id + ")");
  start.impl()->dev->check_alive(start.impl()->gen, "measuring time between events");
  start.impl()->dev->check_alive(stop.impl()->gen, "measuring time between events");
  const kiln_backend& api = *start.impl()->dev->api;
  float ms = 0;
  detail::check(api, api.event_elapsed_ms(start.impl()->handle, stop.impl()->handle, &ms),
                "measuring time between events");
  return ms;
}

}  // namespace kiln
