// CPU queues (one worker thread each) and events (generations completed by queue tasks).
#include <cstring>

#include "backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {

work_queue::work_queue() : thread_([this] { loop(); }) {}

work_queue::~work_queue() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();  // the loop drains the queue before it stops
}

void work_queue::run_or_push(std::function<void()> task) {
  bool idle;
  {
    std::lock_guard lock(mu_);
    idle = tasks_.empty() && !busy_;
  }
  if (idle)
    task();
  else
    push(std::move(task));
}

void work_queue::push(std::function<void()> task) {
  {
    std::lock_guard lock(mu_);
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void work_queue::finish() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [&] { return tasks_.empty() && !busy_; });
}

void work_queue::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop_ and drained
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    task();
    lock.lock();
    busy_ = false;
    if (tasks_.empty()) idle_cv_.notify_all();
  }
}

namespace abi {

kiln_status queue_create(kiln_device_h, kiln_queue_h* out) {
  try {
    *out = new kiln_queue_s();
    return KILN_OK;
  } catch (const std::exception& e) {
    return fail(KILN_ERR_BACKEND, std::string("cannot start a queue thread: ") + e.what());
  }
}

void queue_destroy(kiln_queue_h q) { delete q; }

kiln_status queue_finish(kiln_queue_h q) {
  q->q.finish();
  return KILN_OK;
}

kiln_status queue_wait_event(kiln_queue_h q, kiln_event_h e) {
  std::uint64_t gen;
  {
    std::lock_guard lock(e->s->mu);
    gen = e->s->recorded;  // waits for the most recent record, as CUDA does
  }
  q->q.push([s = e->s, gen] {
    std::unique_lock lock(s->mu);
    s->cv.wait(lock, [&] { return s->completed >= gen; });
  });
  return KILN_OK;
}

kiln_status event_create(kiln_device_h, kiln_event_h* out) {
  *out = new kiln_event_s();
  return KILN_OK;
}

void event_destroy(kiln_event_h e) { delete e; }

kiln_status event_record(kiln_event_h e, kiln_queue_h q) {
  std::uint64_t gen;
  {
    std::lock_guard lock(e->s->mu);
    gen = ++e->s->recorded;
  }
  q->q.push([s = e->s, gen] {
    {
      std::lock_guard lock(s->mu);
      if (gen > s->completed) {
        s->completed = gen;
        s->when = std::chrono::steady_clock::now();
      }
    }
    s->cv.notify_all();
  });
  return KILN_OK;
}

kiln_status event_wait(kiln_event_h e) {
  event_state& s = *e->s;
  std::unique_lock lock(s.mu);
  const std::uint64_t gen = s.recorded;
  s.cv.wait(lock, [&] { return s.completed >= gen; });
  return KILN_OK;
}

kiln_status event_query(kiln_event_h e) {
  std::lock_guard lock(e->s->mu);
  return e->s->completed >= e->s->recorded ? KILN_OK : KILN_ERR_NOT_FOUND;
}

kiln_status event_elapsed_ms(kiln_event_h a, kiln_event_h b, float* out) {
  std::chrono::steady_clock::time_point ta, tb;
  for (auto [e, t] : {std::pair{a, &ta}, std::pair{b, &tb}}) {
    std::lock_guard lock(e->s->mu);
    if (e->s->recorded == 0) return fail(KILN_ERR_INVALID_ARGUMENT, "event was never recorded");
    if (e->s->completed < e->s->recorded)
      return fail(KILN_ERR_INVALID_ARGUMENT, "event has not completed yet: wait for it first");
    *t = e->s->when;
  }
  *out = std::chrono::duration<float, std::milli>(tb - ta).count();
  return KILN_OK;
}

}  // namespace abi
}  // namespace kiln::cpu
