// Deferred device-side checks (deferred_check.hpp): one check_registry for every kind of check, its
// pinned slots reused (a pinned allocation costs far more than the check).
#include "tensor/deferred_check.hpp"

#include <mutex>
#include <utility>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/error.hpp"
#include "runtime/runtime.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {
namespace {

struct pending_check {
  device dev;
  pinned_buffer<std::int64_t> bad;
  event done;
  std::function<std::string(std::int64_t)> what;
  std::uint64_t call;
};
// A check is reported by the first later call that finds it done, and at the latest by the
// call `max_lag` calls later, which waits for it: errors arrive within a few calls.
constexpr std::uint64_t max_lag = 2;

struct check_registry {
  std::mutex mu;
  std::vector<pending_check> pending;
  std::vector<std::pair<device, pinned_buffer<std::int64_t>>> spare;
  std::uint64_t calls = 0;
};
check_registry& checks() {
  static auto* r = new check_registry;  // never destroyed: pinned memory outlives static dtors
  return *r;
}

pinned_buffer<std::int64_t> pinned_slot(const device& dev) {
  check_registry& c = checks();
  {
    std::lock_guard lock(c.mu);
    for (auto it = c.spare.begin(); it != c.spare.end(); ++it)
      if (it->first == dev) {
        pinned_buffer<std::int64_t> b = std::move(it->second);
        c.spare.erase(it);
        return b;
      }
  }
  return pinned_buffer<std::int64_t>(dev, 1);
}

void report(const device& dev, std::uint64_t now) {
  std::vector<pending_check> ready;
  check_registry& c = checks();
  {
    std::lock_guard lock(c.mu);
    for (auto it = c.pending.begin(); it != c.pending.end();) {
      if (it->dev == dev && (it->call + max_lag <= now || it->done.done())) {
        ready.push_back(std::move(*it));
        it = c.pending.erase(it);
      } else {
        ++it;
      }
    }
  }
  std::string error;
  for (pending_check& r : ready) {
    r.done.wait();  // all of them: their slots are reused
    if (const std::int64_t bad = r.bad.data()[0]; bad && error.empty())
      error = r.what(bad) + " in an earlier call on " + dev.id() +
              " (checked on the device, reported by a later call)";
  }
  {
    std::lock_guard lock(c.mu);
    for (pending_check& r : ready)
      if (c.spare.size() < 16) c.spare.emplace_back(dev, std::move(r.bad));
  }
  if (!error.empty()) throw invalid_argument(error);
}

}  // namespace

bool defer_count_check(const tensor& bad, std::function<std::string(std::int64_t)> what) {
  const device dev = bad.get_device();
  check_registry& c = checks();
  std::uint64_t now;
  {
    std::lock_guard lock(c.mu);
    now = ++c.calls;
  }
  report(dev, now);
  const tensor b = bad.eval();
  const tensor_impl& s = *b.impl();
  if (s.kind != tensor_kind::stored || !s.mem) return false;
  queue& q = dev.default_queue();
  if (std::shared_ptr<capture_hold> cap = dev.impl()->active_capture()) {
    // Captured (kiln::step_graph): every replay rewrites the slot; the graph reads it after
    // each replay, so the slot belongs to the graph's hold.
    auto slot = std::make_shared<pinned_buffer<std::int64_t>>(pinned_slot(dev));
    copy_d2h(*q.impl(), slot->data(), *s.mem,
             static_cast<std::uint64_t>(s.offset) * sizeof(std::int64_t), sizeof(std::int64_t));
    std::lock_guard lock(cap->mu);
    cap->checks.push_back([slot, what = std::move(what), id = dev.id()]() -> std::string {
      const std::int64_t n = slot->data()[0];
      return n ? what(n) + " in a replay of a captured step on " + id +
                     " (checked on the device, reported by the next replay)"
               : std::string();
    });
    return true;
  }
  pending_check pc{dev, pinned_slot(dev), event(nullptr), std::move(what), now};
  copy_d2h(*q.impl(), pc.bad.data(), *s.mem,
           static_cast<std::uint64_t>(s.offset) * sizeof(std::int64_t), sizeof(std::int64_t));
  pc.done = q.record();
  std::lock_guard lock(c.mu);
  c.pending.push_back(std::move(pc));
  return true;
}

}  // namespace kiln::detail
