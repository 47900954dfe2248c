// Replays a kiln::graph through queues and events: one host thread per lane enqueues the lane's
// stages in topological order; a stage waits, on the device, for events of dependencies on
// other lanes, and host stages wait for them on the host. The error strategy decides what runs
// after a failure. Also graph::run(), which picks this or the CUDA graph (capture.cpp).
#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <thread>

#include "graph/graph_impl.hpp"

namespace kiln {
namespace detail {
namespace {

using host_clock = std::chrono::steady_clock;

struct run_state {
  explicit run_state(std::size_t n)
      : state(n, stage_state::not_run), start(n), end(n), error(n), host_ms(n, -1.0), device(n) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<stage_state> state;  // not_run: not decided yet
  std::vector<std::optional<event>> start, end;
  std::vector<std::exception_ptr> error;
  std::vector<double> host_ms;      // host stages, and stages moved to a fallback device
  std::vector<std::string> device;  // where a stage ran, when not the graph's device
  std::vector<std::size_t> failed;  // in the order failures happened
  bool stop = false;
};

bool is_moving_error(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const invalid_argument&) {
    return false;  // the caller's mistake fails everywhere
  } catch (const error& k) {
    return fallback::moves(k);
  } catch (...) {
    return false;
  }
}

// on_error::retry_on_fallback: the task again, on each later device of the chain in turn, with
// a fresh queue there; it finishes before the stage counts as done (later stages are ordered
// after it on the host). Returns the device it ran on, or rethrows the last failure.
std::string retry_task(const graph_impl& g, const stage& s, std::exception_ptr why) {
  const fallback& chain = *g.options.fallback;
  const device* at = &g.dev;
  for (const device* next = chain.next(*at); next; next = chain.next(*at)) {
    try {
      std::rethrow_exception(why);
    } catch (const error& e) {
      fallback::note_move("graph '" + g.options.name + "', stage '" + s.name + "'", *at, *next, e);
    }
    try {
      queue q(*next);
      s.work(q);
      q.finish();
      return next->id();
    } catch (...) {
      why = std::current_exception();
      if (!is_moving_error(why)) break;
    }
    at = next;
  }
  std::rethrow_exception(why);
}

void run_lane(graph_impl& g, run_state& r, std::size_t lane) {
  queue& q = g.lanes[lane];
  for (std::size_t i : g.lane_stages[lane]) {
    const stage& s = g.stages[i];
    std::vector<std::optional<event>> waits;  // events of dependencies to wait for
    {
      std::unique_lock lock(r.mu);
      r.cv.wait(lock, [&] {
        if (r.stop) return true;
        for (std::size_t d : s.deps)
          if (r.state[d] == stage_state::not_run) return false;
        return true;
      });
      bool skip = r.stop;
      for (std::size_t d : s.deps) {
        skip = skip || r.state[d] != stage_state::ran;
        if (r.end[d] && (s.kind == stage_kind::host || g.stages[d].lane != lane))
          waits.push_back(r.end[d]);
      }
      if (skip) {
        r.state[i] = stage_state::skipped;
        r.cv.notify_all();
        continue;
      }
    }
    std::optional<event> start, end;
    std::exception_ptr failure;
    std::string moved_to;
    double host_ms = -1;
    const std::uint64_t launches_before = launches_on_this_thread();
    try {
      if (s.kind == stage_kind::host) {
        for (auto& e : waits) e->wait();
        const auto t0 = host_clock::now();
        s.fn();
        host_ms = std::chrono::duration<double, std::milli>(host_clock::now() - t0).count();
      } else {
        for (auto& e : waits) q.wait(*e);
        if (g.options.timing) start = q.record();
        enqueue_stage(s, q);
        if (g.options.timing || s.signals) end = q.record();
      }
    } catch (...) {
      failure = std::current_exception();
    }
    if (failure && g.options.errors == on_error::retry_on_fallback && s.kind == stage_kind::task &&
        is_moving_error(failure)) {
      try {
        // Its inputs, on the host, for another device's queue: the stages before it on this
        // lane and the events it waits for. A lost device runs nothing more: move on.
        try {
          q.finish();
          for (auto& e : waits) e->wait();
        } catch (const device_lost&) {
        }
        const auto t0 = host_clock::now();
        moved_to = retry_task(g, s, failure);
        host_ms = std::chrono::duration<double, std::milli>(host_clock::now() - t0).count();
        failure = nullptr;
      } catch (...) {
        failure = std::current_exception();
      }
    }
    const std::uint64_t launches = launches_on_this_thread() - launches_before;
    std::lock_guard lock(r.mu);
    g.stages[i].launches_seen = launches;
    r.host_ms[i] = host_ms;
    r.device[i] = moved_to;
    if (failure) {
      r.state[i] = stage_state::failed;
      r.error[i] = failure;
      r.failed.push_back(i);
      if (g.options.errors != on_error::continue_independent) r.stop = true;
    } else {
      r.state[i] = stage_state::ran;
      r.start[i] = std::move(start);
      r.end[i] = std::move(end);
    }
    r.cv.notify_all();
  }
}

// After the lanes: waits for the device. An asynchronous failure (a kernel that trapped) is
// blamed on the first stage, in topological order, whose end event reports it.
void finish_lanes(graph_impl& g, run_state& r) {
  std::exception_ptr late;
  for (queue& q : g.lanes) try {
      q.finish();
    } catch (...) {
      if (!late) late = std::current_exception();
    }
  if (!late) return;
  for (std::size_t i : g.order) {
    if (r.state[i] != stage_state::ran || !r.end[i]) continue;
    try {
      r.end[i]->wait();
    } catch (...) {
      r.state[i] = stage_state::failed;
      r.error[i] = std::current_exception();
      r.failed.push_back(i);
      return;
    }
  }
  r.failed.push_back(g.order.back());  // nothing more precise: the last stage
  r.state[g.order.back()] = stage_state::failed;
  r.error[g.order.back()] = late;
}

}  // namespace

void enqueue_stage(const stage& s, queue& q) {
  if (s.kind == stage_kind::kernel) {
    // launch() takes them mutable; a copy on the stack keeps replays free of allocations.
    std::array<arg_binding, 64> args;
    if (s.args.size() > args.size())
      throw invalid_argument("kernel '" + s.kernel->name + "': more than 64 arguments");
    std::copy(s.args.begin(), s.args.end(), args.begin());
    launch(*s.kernel, *q.impl(), s.global, s.local ? &*s.local : nullptr, args.data(),
           s.args.size());
  } else {
    s.work(q);
  }
}

void replay_queues(graph_impl& g) {
  g.summary.last_device_ms = -1;  // stages are timed one by one instead
  run_state r(g.stages.size());
  {
    // Lane 0 runs on this thread, the others on threads of their own for this run.
    std::vector<std::jthread> others;
    try {
      for (std::size_t l = 1; l < g.lanes.size(); ++l)
        others.emplace_back([&g, &r, l] { run_lane(g, r, l); });
    } catch (...) {  // no thread: the lanes started must not wait for lane 0 forever
      {
        std::lock_guard lock(r.mu);
        r.stop = true;
      }
      r.cv.notify_all();
      throw;
    }
    run_lane(g, r, 0);
  }
  finish_lanes(g, r);
  for (std::size_t i = 0; i < g.stages.size(); ++i) {
    stage& s = g.stages[i];
    stage_report& rep = s.report;
    rep.state = r.state[i];
    rep.error.clear();
    if (r.state[i] == stage_state::failed) {
      ++rep.failures;
      error_category c;
      rep.error = describe(r.error[i], &c);
    }
    if (r.state[i] != stage_state::ran) continue;
    ++rep.runs;
    rep.device = r.device[i].empty() ? g.dev.id() : r.device[i];
    rep.launches = s.launches_seen;
    rep.last_ms = r.host_ms[i];
    if (r.start[i] && r.end[i]) {
      try {
        rep.last_ms = elapsed_ms(*r.start[i], *r.end[i]);
      } catch (const error&) {
        rep.last_ms = -1;  // a backend without timing events: the time stays unknown
      }
    }
    if (rep.last_ms >= 0) rep.total_ms += rep.last_ms;
  }
  if (!r.failed.empty()) throw_stage_failure(g, r.failed.front(), r.error[r.failed.front()]);
}

}  // namespace detail

const graph_summary& graph::run() {
  if (!impl_) detail::throw_empty_handle("graph::run", "graph");
  detail::graph_impl& g = *impl_;
  std::lock_guard lock(g.run_mu);
  if (g.stages.empty())
    throw invalid_argument("graph '" + g.options.name + "' has no stages: add some before run()");
  detail::device_impl& d = *g.dev.impl();
  d.check_alive(d.generation.load(), ("running graph '" + g.options.name + "'").c_str());
  if (!g.ready || g.lanes_gen != d.generation.load()) detail::check_and_place(g);
  const auto t0 = std::chrono::steady_clock::now();
  auto publish = [&g](std::chrono::steady_clock::time_point start) {
    ++g.summary.replays;
    g.summary.last_run_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    g.summary.stages.clear();
    for (const auto& s : g.stages) g.summary.stages.push_back(s.report);
  };
  g.summary.kind = replay_kind::queues;
  try {
    bool captured = false;
    if (g.planned == replay_kind::cuda_graph) {
      if (g.exec && !g.exec_stale)
        captured = true;
      else if (detail::capture(g))
        captured = true;
      else
        g.planned = replay_kind::queues;  // capture failed: queues from now on, reason kept
      g.summary.kind_reason = g.kind_reason;
    }
    if (captured) {
      g.summary.kind = replay_kind::cuda_graph;
      detail::replay_captured(g);
    } else {
      detail::replay_queues(g);
    }
  } catch (const graph_error& e) {
    publish(t0);
    throw graph_error(e.category(), e.what(), e.stage(), e.cause(), g.summary);  // with the report
  } catch (...) {
    publish(t0);
    throw;
  }
  publish(t0);
  return g.summary;
}

}  // namespace kiln
