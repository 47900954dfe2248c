// Queues (streams) run copies and kernels in order; events mark points in a queue.
//
//   kiln::queue q(dev);
//   kiln::event start = q.record();
//   q.copy(host.data(), buf);                   // asynchronous
//   kernel.launch(q, kiln::range(n), buf, 2.0f);
//   kiln::event stop = q.record();
//   other_queue.wait(stop);                     // other_queue waits on the device, not the host
//   stop.wait();
//   float ms = kiln::elapsed_ms(start, stop);
#pragma once

#include <memory>

#include "kiln/device.hpp"

namespace kiln {

namespace detail {
struct queue_impl;
struct event_impl;
// Throws kiln::invalid_argument "<what>: an empty (moved-from or null) <kind> handle".
[[noreturn]] void throw_empty_handle(const char* what, const char* kind);
}  // namespace detail

class event {
 public:
  void wait() const;
  bool done() const;
  explicit event(std::shared_ptr<detail::event_impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::event_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::event_impl> impl_;
};

// Milliseconds between two events recorded on queues of one device.
float elapsed_ms(const event& start, const event& stop);

// Dropping a queue neither waits for nor cancels the work on it: the work runs, and memory it
// uses is freed only after it. To order later work on other queues after it, record an event
// before dropping the queue (other.wait(q.record())).
class queue {
 public:
  explicit queue(const device& dev);
  const device& get_device() const;
  event record();
  void wait(const event& e);  // later work on this queue waits for e
  void finish();              // blocks the host until the queue is idle

  // Asynchronous copies and fills, defined in buffer.hpp. Either side of a copy is a device
  // buffer (or view) or contiguous host memory (a span, vector, array, pinned_buffer). Host
  // memory must stay valid until the queue reaches the copy; pinned memory lets it overlap.
  // Buffers of two devices copy on a queue of either: peer to peer where peer_access(a, b),
  // else staged through pinned host memory and complete on return (docs/collective.md).
  template <class Src, class Dst>
  void copy(const Src& src, Dst&& dst);
  template <class Dst, class T>
  void fill(Dst&& dst, const T& value);

  explicit queue(std::shared_ptr<detail::queue_impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::queue_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::queue_impl> impl_;
};

}  // namespace kiln
