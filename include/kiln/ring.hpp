// Ring kernels: a kernel launched once that stays resident and serves fixed-size messages from
// a host->device queue, writing one response per request to a device->host queue, until it is
// terminated. No launch per message: a message costs the queue traffic only.
//
//   struct req { uint32_t key; float x; };   KILN_RING_MESSAGE(req, key, x);
//   struct resp { uint32_t key; float y; };  KILN_RING_MESSAGE(resp, key, y);
//   const char* src = R"(
//     KILN_FUNC void scale(const req* in, resp* out, kiln_ring_ctx* ctx) {
//       float* total = (float*)kiln_ring_state(ctx);     // device memory kept across messages
//       out->key = in->key;
//       out->y = 2.0f * in->x;
//       kiln_atomic_add(total, in->x);
//     })";
//   kiln::ring<req, resp> r(dev, src, "scale", kiln::ring_options{}.with_state(0.0f));
//   r.activate();
//   std::uint64_t id = *r.send({7, 1.5f});                 // blocks while the queue is full
//   kiln::ring_response<resp> out = *r.receive(std::chrono::seconds(1));   // out.id == id
//   kiln::ring_report rep = r.terminate();                 // drains what is queued
//
// Responses come back in the order requests were sent (one global order, so every producer
// thread's messages also stay in its order). Handlers run one per message on a unit (a warp on
// CUDA, a thread on the CPU); kiln_ring_fail(ctx, code) gives a response a non-zero status.
// A handler that traps (kiln_trap()) or does not return within options.handler_timeout makes the
// ring faulted: the next call throws kiln::ring_fault with the ids of the messages it lost.
// On CUDA a trapped kernel leaves the device's context unusable (CUDA's sticky errors).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/ring_message.hpp"

namespace kiln {

enum class ring_state { launched, active, paused, terminated, faulted };
enum class ring_stop { drain, drop };  // terminate: serve what is queued, or drop it

struct ring_options {
  std::uint32_t capacity = 1024;  // messages sent and not yet received, at most
  std::uint32_t batch = 32;       // messages a unit takes at once (at most 32 on CUDA)
  std::uint32_t units = 0;        // per stage: warps on CUDA (default 4), threads on the CPU (1)
  std::uint32_t warps_per_block = 4;                 // CUDA
  std::uint64_t start_id = 0;                        // first message id (ids wrap at 2^64)
  std::chrono::microseconds idle_sleep_max{200};     // device pollers' backoff ceiling
  std::chrono::milliseconds handler_timeout{10000};  // pending messages, no progress: hung
  std::vector<std::byte> state;  // initial bytes of the per-kernel state (device memory)
  std::string compile_options;   // passed to the backend compiler

  template <class S>
  ring_options& with_state(const S& s) {
    static_assert(std::is_trivially_copyable_v<S>, "ring state must be trivially copyable");
    state.resize(sizeof(S));
    std::memcpy(state.data(), &s, sizeof(S));
    return *this;
  }
};

template <class Resp>
struct ring_response {
  std::uint64_t id = 0;
  std::int32_t status = 0;  // kiln_ring_fail's code; 0 when the handler did not fail
  Resp value{};
};

struct ring_status {
  ring_state state = ring_state::launched;
  std::uint64_t sent = 0, received = 0, processed = 0;  // processed: handler calls, every stage
  std::uint64_t queued = 0;                             // sent, not yet taken by the first stage
  std::uint64_t in_flight = 0;                          // sent, not yet received
  std::uint64_t dropped = 0;                            // dropped by terminate(ring_stop::drop)
  std::uint64_t handler_faults = 0;                     // responses with a non-zero status
  std::uint32_t units = 0;                              // pollers, every stage
  std::uint64_t device_heartbeat = 0;
  // latency_ns[k]: received messages whose send -> receive time was in [2^(k-1), 2^k) ns.
  std::array<std::uint64_t, 40> latency_ns{};
  std::string fault;                             // why the ring is faulted
  double latency_percentile_us(double p) const;  // from the histogram (bucket midpoints)
};

struct ring_report {
  std::uint64_t processed = 0;         // messages the kernel handled in its life
  std::vector<std::uint64_t> dropped;  // ids terminate(ring_stop::drop) dropped
};

// A faulted ring: a handler trapped or hung, or the device failed. failed_ids() are the
// messages sent and never answered.
class ring_fault : public error {
 public:
  ring_fault(const std::string& m, std::vector<std::uint64_t> ids)
      : error(error_category::backend_failure, m), ids_(std::move(ids)) {}
  const std::vector<std::uint64_t>& failed_ids() const noexcept { return ids_; }

 private:
  std::vector<std::uint64_t> ids_;
};

namespace detail {
struct ring_impl;
struct ring_type {
  std::string name;
  std::size_t size = 0;
  std::vector<ring_field> fields;
};
template <ring_message T>
ring_type ring_type_of() {
  std::string n = ring_message_traits<T>::name();
  if (auto p = n.rfind("::"); p != std::string::npos) n = n.substr(p + 2);
  return {n, sizeof(T), ring_message_traits<T>::fields()};
}
using ring_sink = void (*)(void* ctx, std::uint64_t id, std::int32_t status, const void* msg);
using ring_clock = std::chrono::nanoseconds;
inline constexpr ring_clock ring_forever = ring_clock::max();

// Untyped ring (src/ring/). types has one entry per queue: stage i reads types[i] and writes
// types[i + 1].
std::shared_ptr<ring_impl> ring_create(const device& dev, std::string_view source,
                                       const std::vector<std::string>& handlers,
                                       const std::vector<ring_type>& types,
                                       const ring_options& opts);
void ring_activate(ring_impl& r, bool active);
ring_report ring_terminate(ring_impl& r, ring_stop how, ring_clock deadline);
// Sends up to n messages (n when wait_all) of the first type; returns how many were sent, the
// first one's id in *first_id. Waits up to `timeout` for room.
std::size_t ring_send(ring_impl& r, const void* msgs, std::size_t n, bool wait_all,
                      ring_clock timeout, std::uint64_t* first_id);
// Passes up to max responses to sink, waiting up to timeout for the first; returns how many.
std::size_t ring_receive(ring_impl& r, std::size_t max, ring_clock timeout, ring_sink sink,
                         void* ctx);
void ring_on_response(ring_impl& r,
                      std::function<void(std::uint64_t, std::int32_t, const void*)> f);
ring_status ring_get_status(ring_impl& r);
void ring_read_state(ring_impl& r, void* out, std::size_t bytes);
void ring_close(ring_impl& r) noexcept;  // the destructor: terminate, dropping, if still running
}  // namespace detail

// Shared by ring and ring_pipeline: the host side of the last queue, typed.
template <class Req, class Resp>
class ring_endpoint {
 public:
  using clock = std::chrono::nanoseconds;

  void activate() { detail::ring_activate(live(), true); }
  void deactivate() { detail::ring_activate(live(), false); }  // paused; state and queue kept
  // Stops the kernel: waits at most `deadline` for it to finish; throws ring_fault if it
  // does not (with the ids left unanswered). Responses already written stay receivable.
  ring_report terminate(ring_stop how = ring_stop::drain,
                        clock deadline = std::chrono::seconds(10)) {
    return detail::ring_terminate(live(), how, deadline);
  }

  // Blocks up to `timeout` for room; returns the message's id, nullopt on timeout.
  [[nodiscard]] std::optional<std::uint64_t> send(const Req& m,
                                                  clock timeout = detail::ring_forever) {
    std::uint64_t id = 0;
    if (detail::ring_send(live(), &m, 1, true, timeout, &id) == 0) return std::nullopt;
    return id;
  }
  [[nodiscard]] std::optional<std::uint64_t> try_send(const Req& m) { return send(m, clock(0)); }
  // Sends all of ms (waiting up to timeout for room) or as many as fit now (try_send_batch);
  // returns how many were sent; their ids are consecutive from *first_id.
  std::size_t send_batch(std::span<const Req> ms, clock timeout = detail::ring_forever,
                         std::uint64_t* first_id = nullptr) {
    std::uint64_t id = 0;
    std::size_t n = detail::ring_send(live(), ms.data(), ms.size(), true, timeout, &id);
    if (first_id) *first_id = id;
    return n;
  }
  std::size_t try_send_batch(std::span<const Req> ms, std::uint64_t* first_id = nullptr) {
    std::uint64_t id = 0;
    std::size_t n = detail::ring_send(live(), ms.data(), ms.size(), false, clock(0), &id);
    if (first_id) *first_id = id;
    return n;
  }

  // Waits up to `timeout` for the next response; nullopt on timeout.
  std::optional<ring_response<Resp>> receive(clock timeout = detail::ring_forever) {
    ring_response<Resp> r;
    if (detail::ring_receive(live(), 1, timeout, &sink_one, &r) == 0) return std::nullopt;
    return r;
  }
  std::optional<ring_response<Resp>> try_receive() { return receive(clock(0)); }
  // Fills out with the responses ready now (waiting up to timeout for the first); returns how
  // many it wrote.
  std::size_t receive_batch(std::span<ring_response<Resp>> out,
                            clock timeout = detail::ring_forever) {
    auto* p = out.data();
    return detail::ring_receive(live(), out.size(), timeout, &sink_many, &p);
  }
  // Responses go to f, on a thread of the ring, instead of receive(); nullptr stops that.
  void on_response(std::function<void(const ring_response<Resp>&)> f) {
    if (!f) return detail::ring_on_response(live(), nullptr);
    detail::ring_on_response(
        live(), [f = std::move(f)](std::uint64_t id, std::int32_t st, const void* msg) {
          ring_response<Resp> r;
          r.id = id;
          r.status = st;
          std::memcpy(&r.value, msg, sizeof(Resp));
          f(r);
        });
  }

  ring_status status() const { return detail::ring_get_status(live()); }
  // A copy of the kernel's state (of its first stage); a snapshot while it runs.
  template <class S>
  S state() const {
    static_assert(std::is_trivially_copyable_v<S>);
    S s;
    detail::ring_read_state(live(), &s, sizeof(S));
    return s;
  }

  ~ring_endpoint() {
    if (impl_) detail::ring_close(*impl_);
  }
  ring_endpoint(ring_endpoint&&) noexcept = default;
  ring_endpoint& operator=(ring_endpoint&&) noexcept = default;

 protected:
  explicit ring_endpoint(std::shared_ptr<detail::ring_impl> impl) : impl_(std::move(impl)) {}

 private:
  detail::ring_impl& live() const {
    if (!impl_) throw invalid_argument("kiln::ring: an empty (moved-from) ring handle");
    return *impl_;
  }
  static void sink_one(void* ctx, std::uint64_t id, std::int32_t st, const void* msg) {
    auto* r = static_cast<ring_response<Resp>*>(ctx);
    r->id = id;
    r->status = st;
    std::memcpy(&r->value, msg, sizeof(Resp));
  }
  static void sink_many(void* ctx, std::uint64_t id, std::int32_t st, const void* msg) {
    auto*& p = *static_cast<ring_response<Resp>**>(ctx);
    sink_one(p++, id, st, msg);
  }
  std::shared_ptr<detail::ring_impl> impl_;
};

// One resident kernel: handler(const Req*, Resp*, kiln_ring_ctx*) from `source`.
template <ring_message Req, ring_message Resp>
class ring : public ring_endpoint<Req, Resp> {
 public:
  ring(const device& dev, std::string_view source, std::string_view handler,
       const ring_options& opts = {})
      : ring_endpoint<Req, Resp>(detail::ring_create(
            dev, source, {std::string(handler)},
            {detail::ring_type_of<Req>(), detail::ring_type_of<Resp>()}, opts)) {}
};

// Two resident kernels, the first feeding the second through a queue in device memory:
// first(const Req*, Mid*, ctx), then second(const Mid*, Resp*, ctx). Sends go to the first,
// responses come from the second, in order.
template <ring_message Req, ring_message Mid, ring_message Resp>
class ring_pipeline : public ring_endpoint<Req, Resp> {
 public:
  ring_pipeline(const device& dev, std::string_view source, std::string_view first,
                std::string_view second, const ring_options& opts = {})
      : ring_endpoint<Req, Resp>(
            detail::ring_create(dev, source, {std::string(first), std::string(second)},
                                {detail::ring_type_of<Req>(), detail::ring_type_of<Mid>(),
                                 detail::ring_type_of<Resp>()},
                                opts)) {}
};

}  // namespace kiln
