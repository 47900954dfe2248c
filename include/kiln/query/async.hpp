// Asynchronous terminals: `kiln::async(terminal, queue)` enqueues a query on a queue and
// returns at once with a kiln::pending<R>, a future-like handle to the terminal's result R.
//
//   kiln::queue q(dev);
//   kiln::pending<float> s = xs | kiln::transform(_1 * _1) | kiln::async(kiln::sum(), q);
//   kiln::pending<kiln::buffer<float>> big = xs | kiln::filter(_1 > 0.5f)
//                                               | kiln::async(kiln::to_buffer(), q);
//   norm.launch(q, kiln::range(n), ys, 2.0f);   // queued behind both, no host wait between
//   other.wait(s.event());                      // another queue, ordered after the sum
//   float total = s.get();                      // waits; rethrows the query's error
//
// Queries on one queue run in the order they were enqueued, like kernels and copies, so work
// enqueued on q after an asynchronous query sees its results, and a query sees everything
// enqueued on its queue before it. The result (a value, a survivor count) is copied into
// pinned host memory on the queue and read by get(): the host never waits before get() or
// wait(), except for a query with positions after a filter (take, skip, enumerate, _i, a scan
// or argmin/argmax after a filter), which reads the filter's survivor count in the middle.
// Every error, whether found while enqueuing (an empty input, a device mismatch, a compile
// error) or by the device, is rethrown by wait() and get(). A handle may be dropped without
// get(): the query still runs. Host ranges (`kiln::on`) must outlive the query.
#pragma once

#include <memory>
#include <optional>
#include <utility>

#include "kiln/query/pipeline.hpp"
#include "kiln/queue.hpp"

namespace kiln {

namespace detail::q {
struct async_state;
// src/query/async.cpp. q null: the device's default queue.
std::shared_ptr<async_state> collect_async(query_desc& d, const kiln::queue* q);
std::shared_ptr<async_state> reduce_async(query_desc& d, const reduce_spec& r,
                                          const kiln::queue* q);
void async_wait(async_state& s);   // rethrows the query's error
bool async_ready(async_state& s);  // done or failed
kiln::event async_event(async_state& s);
kiln::queue async_queue(async_state& s);
reduce_result async_reduce(async_state& s);    // waits
collect_result async_collect(async_state& s);  // waits; once
}  // namespace detail::q

// The result of an asynchronous query, once its queue reaches it (std::future's contract:
// get() once; wait(), ready() and event() any number of times; move-only).
template <class R>
class pending {
 public:
  using finisher = R (*)(detail::q::async_state&);
  pending() = default;
  pending(std::shared_ptr<detail::q::async_state> s, finisher f) : s_(std::move(s)), f_(f) {}

  // Waits for the query and returns its result; rethrows its error. Once: valid() is false after.
  R get() {
    check("get");
    auto s = std::move(s_);
    return f_(*s);
  }
  // Waits for the query; rethrows its error.
  void wait() const {
    check("wait");
    detail::q::async_wait(*s_);
  }
  // Whether the query has finished (or failed): get() will not block.
  bool ready() const {
    check("ready");
    return detail::q::async_ready(*s_);
  }
  bool valid() const noexcept { return s_ != nullptr; }
  // Recorded on the query's queue after its last operation: `other.wait(p.event())` orders
  // another queue's later work after the query without the host waiting. Throws the query's
  // error when enqueuing it failed (nothing was recorded).
  kiln::event event() const {
    check("event");
    return detail::q::async_event(*s_);
  }
  kiln::queue get_queue() const {
    check("get_queue");
    return detail::q::async_queue(*s_);
  }

 private:
  void check(const char* what) const {
    if (!s_)
      throw invalid_argument(std::string("kiln::pending::") + what +
                             ": no query (moved from, or get() was called)");
  }
  std::shared_ptr<detail::q::async_state> s_;
  finisher f_ = nullptr;
};

namespace detail::q {
// async(t, q): a terminal whose apply_async enqueues the query on q and returns pending<R>.
template <class T>
struct async_t : terminal_tag {
  T t;
  std::optional<kiln::queue> q;
  template <class... Ts>
  auto apply(kiln::query<Ts...> query) const {
    return t.apply_async(std::move(query), q ? &*q : nullptr);
  }
};
}  // namespace detail::q

// Any terminal, asynchronous on q (or on the device's default queue).
template <std::derived_from<detail::q::terminal_tag> T>
auto async(T terminal, const queue& q) {
  return detail::q::async_t<T>{{}, std::move(terminal), q};
}
template <std::derived_from<detail::q::terminal_tag> T>
auto async(T terminal) {
  return detail::q::async_t<T>{{}, std::move(terminal), std::nullopt};
}

}  // namespace kiln
