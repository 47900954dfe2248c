// kiln::step_graph (kiln/step_graph.hpp): a tensor step captured on the device's default queue
// through the plugin's graph entries and replayed with one launch. While the capture runs, the
// device's memory joins the capture's hold (runtime.hpp: capture_hold), so no address the graph
// replays is freed or reused before the graph is gone.
#include "kiln/step_graph.hpp"

#include <deque>
#include <optional>

#include "graph/graph_impl.hpp"
#include "kiln/collective.hpp"
#include "runtime/runtime.hpp"

namespace kiln {

struct step_graph::impl {
  device dev{nullptr};
  step_function step;
  step_graph_options options;
  std::vector<tensor> outputs;
  std::uint64_t runs = 0;  // since the last (re)capture request
  std::uint64_t replays = 0;
  replay_kind kind = replay_kind::none;
  std::string reason;
  bool capture_failed = false;  // stays eager until recapture()
  kiln_graph_h exec = nullptr;
  std::shared_ptr<detail::capture_hold> hold;
  std::deque<event> in_flight;  // the end of the last replays, oldest first

  const kiln_backend& api() const { return *dev.impl()->api; }

  std::string support() const {
    if (options.mode == graph_mode::queues) return "graph_mode::queues was asked for";
    return detail::graph_support(dev);
  }

  // Reports a device-side check that failed in a finished replay; waits for the oldest replay
  // when two are in flight, so a failure surfaces at most two runs late.
  void check_replays() {
    while (!in_flight.empty() && (in_flight.size() >= 2 || in_flight.front().done())) {
      in_flight.front().wait();
      in_flight.pop_front();
      std::vector<std::function<std::string()>> checks;
      {
        std::lock_guard lock(hold->mu);
        checks = hold->checks;
      }
      for (const auto& c : checks)
        if (std::string why = c(); !why.empty()) throw invalid_argument(why);
    }
  }

  void release() {
    if (exec) {
      try {
        dev.default_queue().finish();  // the last replay still uses the hold's memory
      } catch (...) {                  // a lost device: nothing runs any more
      }
      api().graph_destroy(exec);
      exec = nullptr;
    }
    in_flight.clear();
    hold.reset();  // frees what the capture parked (on the queues that used it)
  }

  // The device leaves capture mode: allocations and frees stop joining the hold.
  void stop_capturing() {
    detail::device_impl& d = *dev.impl();
    std::lock_guard lock(d.capture_mu);
    d.capturing.reset();
    d.capture_active.store(false, std::memory_order_release);
  }

  void end_capture(bool keep) {
    kiln_graph_h h = nullptr;
    const kiln_status s =
        api().graph_capture_end(dev.default_queue().impl()->handle, keep ? &h : nullptr, nullptr);
    stop_capturing();
    if (keep && s != KILN_OK) {
      const char* m = api().last_error();
      throw unsupported(std::string("instantiating the captured step failed: ") +
                        (m && *m ? m : "no message"));
    }
    exec = h;
  }

  // Captures the step. False (and `reason` says why) when it could not be captured: the work
  // of this run is then not done yet.
  bool capture() {
    detail::device_impl& d = *dev.impl();
    queue& q = dev.default_queue();
    hold = std::make_shared<detail::capture_hold>();
    {
      std::lock_guard lock(d.capture_mu);
      if (d.capturing) {
        reason = "another step is being captured on " + dev.id();
        return false;
      }
      d.capturing = hold;
      d.capture_active.store(true, std::memory_order_release);
    }
    if (api().graph_capture_begin(q.impl()->handle) != KILN_OK) {
      const char* m = api().last_error();
      reason = std::string("starting the capture failed: ") + (m && *m ? m : "no message");
      stop_capturing();
      hold.reset();
      return false;
    }
    std::vector<tensor> outs;
    try {
      outs = step();
      for (tensor& t : outs) t = t.eval();
    } catch (...) {
      end_capture(false);
      error_category c;
      reason = "capturing the step failed (" + detail::describe(std::current_exception(), &c) +
               "); it runs eagerly";
      hold.reset();
      return false;
    }
    try {
      end_capture(true);
    } catch (const std::exception& e) {
      reason = e.what();
      hold.reset();
      d.refresh_lost();
      return false;
    }
    outputs = std::move(outs);
    return true;
  }

  // Meets the ranks whose collectives the graph holds (see capture_hold::barriers); throws when
  // one of them failed.
  void meet_ranks(const std::string& mine) {
    std::vector<std::function<std::string(const std::string&)>> barriers;
    {
      std::lock_guard lock(hold->mu);
      for (const auto& b : hold->barriers) barriers.push_back(b.second);
    }
    for (const auto& b : barriers)
      if (const std::string why = b(mine); !why.empty() && mine.empty())
        throw collective_error("replaying the captured step on " + dev.id() +
                               ": another rank could not replay it: " + why);
  }

  void launch() {
    check_replays();
    queue& q = dev.default_queue();
    dev.impl()->check_alive(q.impl()->gen, "replaying a captured step");
    meet_ranks({});
    try {
      if (kiln_status s = api().graph_launch(exec, q.impl()->handle); s != KILN_OK)
        detail::throw_status(api(), s, "replaying the captured step on " + dev.id());
    } catch (const std::exception& e) {
      meet_ranks(e.what());  // the others throw instead of waiting
      throw;
    }
    meet_ranks({});
    in_flight.push_back(q.record());
    ++replays;
  }

  const std::vector<tensor>& eager() {
    outputs = step();
    for (tensor& t : outputs) t = t.eval();
    return outputs;
  }
};

step_graph::step_graph(const device& dev, step_function step, step_graph_options options)
    : impl_(std::make_unique<impl>()) {
  if (!dev.impl()) detail::throw_empty_handle("kiln::step_graph", "device");
  if (!step) throw invalid_argument("kiln::step_graph: the step function is empty");
  if (options.warmup < 0) throw invalid_argument("kiln::step_graph: warmup must be >= 0");
  impl_->dev = dev;
  impl_->step = std::move(step);
  impl_->options = options;
}

step_graph::~step_graph() {
  if (impl_) impl_->release();
}
step_graph::step_graph(step_graph&&) noexcept = default;
step_graph& step_graph::operator=(step_graph&& o) noexcept {
  if (this != &o) {
    if (impl_) impl_->release();
    impl_ = std::move(o.impl_);
  }
  return *this;
}

const std::vector<tensor>& step_graph::run() {
  if (!impl_) detail::throw_empty_handle("step_graph::run", "step_graph");
  impl& s = *impl_;
  const std::uint64_t n = s.runs++;
  if (s.exec) {
    s.launch();
    return s.outputs;
  }
  if (s.capture_failed || n < static_cast<std::uint64_t>(s.options.warmup)) return s.eager();
  if (std::string why = s.support(); !why.empty()) {
    s.reason = std::move(why);
    s.kind = replay_kind::queues;
    s.capture_failed = true;
    return s.eager();
  }
  if (!s.capture()) {
    s.kind = replay_kind::queues;
    s.capture_failed = true;
    return s.eager();  // the capture queued nothing: do this run's work now
  }
  s.kind = replay_kind::cuda_graph;
  s.reason.clear();
  s.launch();
  return s.outputs;
}

void step_graph::recapture() {
  if (!impl_) detail::throw_empty_handle("step_graph::recapture", "step_graph");
  impl_->release();
  impl_->runs = static_cast<std::uint64_t>(impl_->options.warmup);  // no new warm-up
  impl_->capture_failed = false;
  impl_->kind = replay_kind::none;
  impl_->reason.clear();
}

replay_kind step_graph::kind() const { return impl_ ? impl_->kind : replay_kind::none; }
const std::string& step_graph::reason() const {
  static const std::string none;
  return impl_ ? impl_->reason : none;
}
std::uint64_t step_graph::replays() const { return impl_ ? impl_->replays : 0; }
const device& step_graph::get_device() const {
  if (!impl_) detail::throw_empty_handle("step_graph::get_device", "step_graph");
  return impl_->dev;
}

}  // namespace kiln
