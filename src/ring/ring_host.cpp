// The host ends of a ring: send, receive, lifecycle, health checks and telemetry.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <thread>

#include "ring/ring_impl.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {
namespace {

using namespace ring_detail;

std::uint64_t load_acquire(const std::uint64_t& w) {
  return std::atomic_ref<const std::uint64_t>(w).load(std::memory_order_acquire);
}
std::uint64_t load_relaxed(const std::uint64_t& w) {
  return std::atomic_ref<const std::uint64_t>(w).load(std::memory_order_relaxed);
}
void store_release(std::uint64_t& w, std::uint64_t v) {
  std::atomic_ref<std::uint64_t>(w).store(v, std::memory_order_release);
}

std::uint64_t now_ns() {
  return static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(steady::now().time_since_epoch())
          .count());
}

// Host pollers spin briefly (a round trip is a few microseconds), then yield, then sleep with
// a doubling period up to 200 us, so a waiting host thread does not burn a core.
class backoff {
 public:
  void wait() {
    if (n_ < 256) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    } else if (n_ < 320) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
      sleep_us_ = std::min<std::uint64_t>(sleep_us_ * 2, 200);
    }
    ++n_;
  }
  bool slow() const { return n_ >= 256; }

 private:
  std::uint64_t n_ = 0, sleep_us_ = 1;
};

steady::time_point deadline_after(ring_clock timeout) {
  const auto now = steady::now();
  if (timeout >= std::chrono::duration_cast<ring_clock>(steady::time_point::max() - now))
    return steady::time_point::max();
  return now + timeout;
}

std::string ids_text(const std::vector<std::uint64_t>& ids) {
  std::string s;
  for (std::size_t i = 0; i < ids.size() && i < 8; ++i)
    s += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 8) s += ", ... (" + std::to_string(ids.size()) + " in all)";
  return s;
}

}  // namespace

std::uint64_t ring_impl::processed_total() const {
  std::uint64_t n = 0;
  for (std::uint32_t u = 0; u < total_units; ++u) n += load_relaxed(records()[u].processed);
  return n;
}

std::vector<std::uint64_t> ring_impl::unanswered() const {
  std::vector<std::uint64_t> ids;
  const std::uint64_t end = sent.load(std::memory_order_acquire);
  for (std::uint64_t p = received.load(std::memory_order_acquire); p != end; ++p) {
    if (load_acquire(*reinterpret_cast<const std::uint64_t*>(out_slot(p))) != p + 1)
      ids.push_back(p);
  }
  return ids;
}

bool ring_impl::kernel_ended() {
  for (const event& e : ended)
    if (!e.done()) return false;  // throws when the kernel failed on the device
  return true;
}

void ring_impl::raise_fault(const std::string& why) {
  {
    std::lock_guard lock(state_mu);
    if (st.load() != ring_state::faulted) {
      fault_ids = unanswered();
      fault = why;
      if (!fault_ids.empty()) fault += "; messages without a response: " + ids_text(fault_ids);
      terminated = true;
      st.store(ring_state::faulted);
    }
  }
  throw ring_fault("ring kernel on " + dev.id() + " faulted: " + fault, fault_ids);
}

// Ends a kernel whose handler does not return: CUDA's watchdog warp traps on ABORT (the
// context is lost with it); a CPU unit thread cannot be stopped and is abandoned.
void abort_kernel(ring_impl& r) {
  store_release(r.control()->command, KILN_RING_ABORT);
  if (!r.gpu) {
    r.abandoned = true;
    return;
  }
  const auto until = steady::now() + std::chrono::seconds(5);
  while (steady::now() < until) {
    try {
      if (r.kernel_ended()) return;
    } catch (const error&) {
      return;  // the trap: what we asked for
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  r.abandoned = true;
}

void ring_impl::check_health() {
  if (st.load() == ring_state::faulted) {
    std::lock_guard lock(state_mu);
    throw ring_fault("ring kernel on " + dev.id() + " faulted: " + fault, fault_ids);
  }
  if (terminated) return;
  // Whether the kernel ended is read before the trap records: a unit records its trap before
  // it exits, so a kernel seen ended has its trap visible (read the other way round, a trap
  // landing between the two reads looked like an unexplained exit).
  bool ended_now = false;
  std::string failed_why;
  try {
    ended_now = kernel_ended();
  } catch (const error& e) {
    failed_why = e.what();
  }
  for (std::uint32_t u = 0; u < total_units; ++u)
    if (load_acquire(records()[u].state) == KILN_RING_UNIT_TRAPPED) {
      const std::uint64_t at = load_relaxed(records()[u].trap_position);
      store_release(control()->command, KILN_RING_ABORT);  // the other units stop too
      raise_fault("a handler trapped (kiln_trap) on message " + std::to_string(at));
    }
  if (!failed_why.empty())
    raise_fault("the kernel failed on the device (a handler trapped or faulted): " + failed_why);
  if (ended_now) raise_fault("the kernel ended without being terminated");
  const ring_state s = st.load();
  const auto timeout = opts.handler_timeout;
  std::string busy;
  {
    std::lock_guard lock(state_mu);
    const std::uint64_t p = processed_total();
    const auto now = steady::now();
    const bool pending = p < (sent.load() - start) * stage_units.size();
    if (p != last_processed || s != ring_state::active || timeout.count() <= 0 || !pending) {
      last_processed = p;
      last_progress = now;
      return;
    }
    if (now - last_progress < timeout) return;
    for (std::uint32_t u = 0; u < total_units; ++u)
      if (const std::uint64_t n = load_relaxed(records()[u].busy_count))
        busy += (busy.empty() ? "" : ", ") + std::to_string(load_relaxed(records()[u].busy_from)) +
                (n > 1 ? " (+" + std::to_string(n - 1) + " more)" : "");
  }
  abort_kernel(*this);
  raise_fault("a handler has not returned for " + std::to_string(timeout.count()) + " ms" +
              (busy.empty() ? "" : " (busy with message " + busy + ")") +
              (gpu ? "; the kernel was trapped to stop it" : "; its CPU thread is abandoned"));
}

void ring_activate(ring_impl& r, bool active) {
  r.check_health();
  std::lock_guard lock(r.state_mu);
  if (r.terminated) throw invalid_argument("ring kernel on " + r.dev.id() + ": already terminated");
  store_release(r.control()->command, active ? KILN_RING_ACTIVE : KILN_RING_INACTIVE);
  r.st.store(active ? ring_state::active : ring_state::paused);
  r.last_progress = steady::now();
}

std::size_t ring_send(ring_impl& r, const void* msgs, std::size_t n, bool wait_all,
                      ring_clock timeout, std::uint64_t* first_id) {
  if (r.st.load() == ring_state::faulted) r.check_health();
  if (r.terminated)
    throw invalid_argument("ring kernel on " + r.dev.id() + ": send after terminate");
  std::lock_guard lock(r.send_mu);
  std::uint64_t pos = r.sent.load(std::memory_order_relaxed);
  *first_id = pos;
  const auto until = deadline_after(timeout);
  const auto* src = static_cast<const unsigned char*>(msgs);
  std::size_t done = 0;
  backoff b;
  while (done < n) {
    const std::uint64_t room = r.capacity - (pos - r.received.load(std::memory_order_acquire));
    if (room == 0) {
      if (!wait_all || timeout.count() == 0 || steady::now() >= until) break;
      if (b.slow()) r.check_health();
      if (r.terminated)
        throw invalid_argument("ring kernel on " + r.dev.id() + ": send after terminate");
      b.wait();
      continue;
    }
    const std::uint64_t k = std::min<std::uint64_t>(room, n - done);
    const std::uint64_t t = now_ns();
    for (std::uint64_t j = 0; j < k; ++j, ++pos) {
      unsigned char* slot = r.in_slot(pos);
      std::memcpy(slot + 16, src + (done + j) * r.in_size, r.in_size);
      r.send_time[pos & r.mask].store(t, std::memory_order_relaxed);
      store_release(*reinterpret_cast<std::uint64_t*>(slot), pos + 1);  // publishes the slot
    }
    done += k;
    r.sent.store(pos, std::memory_order_release);
    store_release(r.control()->tail, pos);
    b = backoff();
  }
  return done;
}

namespace {
std::size_t receive_locked(ring_impl& r, std::size_t max, ring_clock timeout, ring_sink sink,
                           void* ctx) {
  std::lock_guard lock(r.recv_mu);
  std::uint64_t pos = r.received.load(std::memory_order_relaxed);
  const auto ready = [&](std::uint64_t p) {
    return load_acquire(*reinterpret_cast<const std::uint64_t*>(r.out_slot(p))) == p + 1;
  };
  if (max == 0) return 0;
  if (!ready(pos)) {
    const auto until = deadline_after(timeout);
    backoff b;
    for (;;) {
      if (ready(pos)) break;
      if (r.terminated && r.st.load() != ring_state::faulted) {
        if (pos == r.sent.load() || r.kernel_ended()) return 0;  // nothing more will come
      }
      if (timeout.count() == 0 || steady::now() >= until) return 0;
      if (b.slow()) r.check_health();
      b.wait();
    }
  }
  const std::uint64_t t = now_ns();
  std::size_t n = 0;
  std::array<std::uint32_t, 40> hist{};  // added to the shared histogram once per call
  // seq == pos + 1 proves the response is this lap's: no need to consult `sent`, which the
  // producer updates after the device may already have answered.
  while (n < max && ready(pos)) {
    const unsigned char* slot = r.out_slot(pos);
    std::uint64_t aux;
    std::memcpy(&aux, slot + 8, sizeof aux);
    const auto status = static_cast<std::int32_t>(static_cast<std::int64_t>(aux));
    if (status != 0) r.handler_faults.fetch_add(1, std::memory_order_relaxed);
    const std::uint64_t dt =
        t - std::min(t, r.send_time[pos & r.mask].load(std::memory_order_relaxed));
    ++hist[std::min<std::size_t>(std::bit_width(dt), 39)];
    sink(ctx, pos, status, slot + 16);
    ++pos;
    ++n;
  }
  r.received.store(pos, std::memory_order_release);
  for (std::size_t k = 0; k < hist.size(); ++k)
    if (hist[k]) r.latency[k].fetch_add(hist[k], std::memory_order_relaxed);
  return n;
}
}  // namespace

std::size_t ring_receive(ring_impl& r, std::size_t max, ring_clock timeout, ring_sink sink,
                         void* ctx) {
  if (r.callback_thread.joinable())
    throw invalid_argument("ring kernel on " + r.dev.id() +
                           ": responses go to the on_response callback; receive() is not allowed");
  return receive_locked(r, max, timeout, sink, ctx);
}

void ring_impl::stop_callback() {
  if (!callback_thread.joinable()) return;
  callback_stop = true;
  callback_thread.join();
  callback_stop = false;
}

void ring_on_response(ring_impl& r,
                      std::function<void(std::uint64_t, std::int32_t, const void*)> f) {
  r.stop_callback();
  if (!f) return;
  r.callback = std::move(f);
  r.callback_thread = std::thread([&r] {
    auto sink = [](void* ctx, std::uint64_t id, std::int32_t st, const void* msg) {
      (*static_cast<ring_impl*>(ctx)).callback(id, st, msg);
    };
    while (!r.callback_stop.load()) {
      try {
        receive_locked(r, 256, std::chrono::milliseconds(5), sink, &r);
      } catch (const ring_fault&) {
        return;  // the fault is reported to the next caller of the ring
      }
    }
  });
}

ring_report ring_terminate(ring_impl& r, ring_stop how, ring_clock deadline) {
  r.check_health();
  ring_report rep;
  {
    std::lock_guard lock(r.state_mu);
    if (r.terminated) {
      rep.processed = r.processed_total();
      return rep;
    }
    store_release(r.control()->command, how == ring_stop::drain ? KILN_RING_DRAIN : KILN_RING_DROP);
    r.st.store(ring_state::active);  // draining counts as active for the hang watch
    r.last_progress = steady::now();
  }
  const auto until = deadline_after(deadline);
  backoff b;
  for (;;) {
    bool done;
    try {
      done = r.kernel_ended();
    } catch (const error& e) {
      r.raise_fault(std::string("the kernel failed on the device while terminating: ") + e.what());
    }
    if (done) break;
    for (std::uint32_t u = 0; u < r.total_units; ++u)
      if (load_acquire(r.records()[u].state) == KILN_RING_UNIT_TRAPPED) r.check_health();
    if (steady::now() >= until) {
      abort_kernel(r);
      r.raise_fault(
          "terminate: the kernel did not finish within " +
          std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(deadline).count()) +
          " ms" + (r.gpu ? "; it was trapped" : "; its CPU threads are abandoned"));
    }
    b.wait();
  }
  std::lock_guard lock(r.state_mu);
  r.terminated = true;
  r.st.store(ring_state::terminated);
  rep.processed = r.processed_total();
  rep.dropped = r.unanswered();
  r.dropped = rep.dropped.size();
  return rep;
}

ring_status ring_get_status(ring_impl& r) {
  ring_status s;
  try {
    r.check_health();
  } catch (const ring_fault&) {
  }
  s.state = r.st.load();
  s.sent = r.sent.load() - r.start;
  s.received = r.received.load() - r.start;
  s.processed = r.processed_total();
  std::uint64_t first = 0;
  for (std::uint32_t u = 0; u < r.stage_units.front(); ++u)
    first += load_relaxed(r.records()[u].processed);
  s.queued = s.sent - std::min(s.sent, first);
  s.in_flight = s.sent - s.received;
  s.dropped = r.dropped.load();
  s.handler_faults = r.handler_faults.load();
  s.units = r.total_units;
  s.device_heartbeat = load_relaxed(r.control()->watchdog_heartbeat);
  for (std::uint32_t u = 0; u < r.total_units; ++u)
    s.device_heartbeat += load_relaxed(r.records()[u].heartbeat);
  for (std::size_t i = 0; i < s.latency_ns.size(); ++i) s.latency_ns[i] = r.latency[i].load();
  std::lock_guard lock(r.state_mu);
  s.fault = r.fault;
  return s;
}

void ring_read_state(ring_impl& r, void* out, std::size_t bytes) {
  if (bytes > r.state_bytes)
    throw invalid_argument("ring kernel state is " + std::to_string(r.state_bytes) +
                           " bytes; cannot read " + std::to_string(bytes));
  std::vector<std::uint8_t> tmp(r.state_bytes);
  r.state->copy_to(tmp);
  std::memcpy(out, tmp.data(), bytes);
}

void ring_close(ring_impl& r) noexcept {
  r.stop_callback();
  if (!r.terminated) {
    try {
      ring_terminate(r, ring_stop::drop, std::chrono::seconds(5));
    } catch (...) {
    }
  }
  if (r.abandoned) {
    // A unit still runs the kernel's code and touches this memory: keep everything alive.
    static auto* graveyard = new std::vector<std::shared_ptr<ring_impl>>;
    static std::mutex mu;
    std::lock_guard lock(mu);
    graveyard->push_back(r.shared_from_this());
  }
}

}  // namespace kiln::detail

namespace kiln {
double ring_status::latency_percentile_us(double p) const {
  std::uint64_t total = 0;
  for (auto n : latency_ns) total += n;
  if (total == 0) return 0.0;
  const double want = p / 100.0 * static_cast<double>(total);
  std::uint64_t seen = 0;
  for (std::size_t k = 0; k < latency_ns.size(); ++k) {
    seen += latency_ns[k];
    if (static_cast<double>(seen) >= want)
      return (k == 0 ? 0.0 : 0.75 * std::ldexp(1.0, static_cast<int>(k))) / 1000.0;
  }
  return 0.0;
}
}  // namespace kiln
