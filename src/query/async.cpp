// The terminals' two forms over run.cpp's enqueue: synchronous (enqueue on the device's
// default queue, finish it, read the pinned slot) and asynchronous (enqueue on the caller's
// queue, record an event, read the slot at get()).
#include <cstring>

#include "query/fallback.hpp"
#include "query/run.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {

struct async_state {
  std::optional<queue> q;
  std::optional<event> done;  // recorded after the query's last operation
  std::exception_ptr error;   // from enqueuing, or from waiting
  enqueued e;
  bool reduce = false;
  bool waited = false;
  std::mutex mu;  // wait() from several threads

  ~async_state() {
    // A handle dropped before its query finished: the slot returns once the event completes.
    if (e.slot.host) release_slot(e.dev, e.take_slot(), waited ? std::nullopt : done);
  }
};

namespace {

std::uint64_t slot_count(const enqueued& e) {
  std::uint64_t n;
  std::memcpy(&n, e.slot.host, sizeof n);
  return n;
}

reduce_result slot_result(const enqueued& e) {
  reduce_result r;
  std::memcpy(&r, e.slot.host, sizeof r);
  return r;
}

// Resolves a finished collect: the survivor count from the slot.
collect_result finish_collect(enqueued& e) {
  if (e.count_in_slot) {
    e.collected.count = slot_count(e);
    e.count_in_slot = false;
    thread_stats().bytes_written += e.out_bytes * e.collected.count;
  }
  return std::move(e.collected);
}

template <class Enqueue>
std::shared_ptr<async_state> start(query_desc& d, const queue* q, bool reduce,
                                   const Enqueue& enqueue) {
  auto s = std::make_shared<async_state>();
  s->reduce = reduce;
  try {
    const device dev = prepare(d, q);
    s->q = q ? *q : dev.default_queue();
    s->e = enqueue(d, *s->q);
    s->done = s->q->record();
  } catch (...) {
    s->error = std::current_exception();
    // What was enqueued before the failure may still use the slot: keep it until the queue
    // has drained, or give up on it.
    if (s->e.slot.host && s->q) try {
        s->q->finish();
      } catch (...) {
        s->e.take_slot();  // leaked: the queue is broken
      }
  }
  return s;
}

}  // namespace

namespace {
collect_result collect_once(query_desc& d);
reduce_result reduce_once(query_desc& d, const reduce_spec& r);
}  // namespace

collect_result collect(query_desc& d) {
  if (const fallback* chain = fallback_scope::current()) {
    collect_result r;
    run_falling_back(d, *chain, [&](query_desc& dd) {
      // No scope inside: the inner call runs once, on dd's device.
      collect_result attempt = collect_once(dd);
      r = std::move(attempt);
    });
    return r;
  }
  return collect_once(d);
}

reduce_result reduce(query_desc& d, const reduce_spec& r) {
  if (const fallback* chain = fallback_scope::current()) {
    reduce_result out{};
    run_falling_back(d, *chain, [&](query_desc& dd) { out = reduce_once(dd, r); });
    return out;
  }
  return reduce_once(d, r);
}

namespace {
collect_result collect_once(query_desc& d) {
  const device dev = prepare(d, nullptr);
  queue& q = dev.default_queue();
  enqueued e = enqueue_collect(d, q);
  if (e.count_in_slot) q.finish();
  return finish_collect(e);
}

reduce_result reduce_once(query_desc& d, const reduce_spec& r) {
  const device dev = prepare(d, nullptr);
  queue& q = dev.default_queue();
  enqueued e = enqueue_reduce(d, r, q);
  q.finish();
  return slot_result(e);
}
}  // namespace

std::shared_ptr<async_state> collect_async(query_desc& d, const queue* q) {
  return start(d, q, false, [](query_desc& dd, queue& qq) { return enqueue_collect(dd, qq); });
}

std::shared_ptr<async_state> reduce_async(query_desc& d, const reduce_spec& r, const queue* q) {
  return start(d, q, true, [&r](query_desc& dd, queue& qq) { return enqueue_reduce(dd, r, qq); });
}

void async_wait(async_state& s) {
  std::lock_guard lock(s.mu);
  if (!s.error && !s.waited) {
    try {
      s.done->wait();
    } catch (...) {
      s.error = std::current_exception();
    }
    s.waited = true;
  }
  if (s.error) std::rethrow_exception(s.error);
}

bool async_ready(async_state& s) {
  std::lock_guard lock(s.mu);
  if (s.error || s.waited) return true;
  try {
    return s.done->done();
  } catch (...) {
    s.error = std::current_exception();
    return true;
  }
}

event async_event(async_state& s) {
  std::lock_guard lock(s.mu);
  if (!s.done) std::rethrow_exception(s.error);  // nothing was recorded: enqueuing failed
  return *s.done;
}

queue async_queue(async_state& s) {
  std::lock_guard lock(s.mu);
  if (!s.q) std::rethrow_exception(s.error);
  return *s.q;
}

reduce_result async_reduce(async_state& s) {
  async_wait(s);
  return slot_result(s.e);
}

collect_result async_collect(async_state& s) {
  async_wait(s);
  std::lock_guard lock(s.mu);
  return finish_collect(s.e);
}

}  // namespace kiln::detail::q
