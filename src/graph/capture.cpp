// kiln::graph on CUDA: the whole DAG captured into one CUDA graph through the plugin's optional
// graph entries. Lanes are forked into the capture with events (a queue that waits on an event
// recorded on a capturing queue joins the capture) and joined back before it ends. Argument
// updates capture again and update the executable graph in place (cuGraphExecUpdate).
#include "graph/graph_impl.hpp"

namespace kiln::detail {
namespace {

const kiln_backend& api_of(const graph_impl& g) { return *g.dev.impl()->api; }

std::string plugin_error(const kiln_backend& api) {
  const char* m = api.last_error();
  return m && *m ? m : "no message";
}

}  // namespace

std::string graph_support(const device& dev) {
  const kiln_backend& api = *dev.impl()->api;
  if (!KILN_BACKEND_HAS(&api, graph_capture_begin) || !KILN_BACKEND_HAS(&api, graph_capture_end) ||
      !KILN_BACKEND_HAS(&api, graph_launch) || !KILN_BACKEND_HAS(&api, graph_destroy))
    return std::string("the ") + api.name + " backend has no graph API";
  if (!dev.impl()->supports_op(KILN_OP_GRAPH))
    return dev.id() + " cannot replay graphs (the driver lacks the graph API)";
  return {};
}

bool capture(graph_impl& g) {
  const kiln_backend& api = api_of(g);
  device_impl& d = *g.dev.impl();
  queue& origin = g.lanes[0];
  if (api.graph_capture_begin(origin.impl()->handle) != KILN_OK) {
    g.kind_reason = "starting the capture failed: " + plugin_error(api);
    return false;
  }
  std::vector<std::optional<event>> end(g.stages.size());
  const stage* current = nullptr;
  try {
    for (std::size_t l = 1; l < g.lanes.size(); ++l) g.lanes[l].wait(origin.record());
    for (std::size_t i : g.order) {
      stage& s = g.stages[i];
      current = &s;
      queue& q = g.lanes[s.lane];
      for (std::size_t dep : s.deps)
        if (g.stages[dep].lane != s.lane) q.wait(*end[dep]);
      const std::uint64_t before = launches_on_this_thread();
      enqueue_stage(s, q);
      s.launches_seen = launches_on_this_thread() - before;
      end[i] = q.record();
    }
    current = nullptr;
    for (std::size_t l = 1; l < g.lanes.size(); ++l) origin.wait(g.lanes[l].record());
  } catch (...) {
    api.graph_capture_end(origin.impl()->handle, nullptr, nullptr);  // discard; ends capture
    error_category c;
    g.kind_reason = std::string("capturing ") +
                    (current ? "stage '" + current->name + "'" : std::string("the graph")) +
                    " failed (" + describe(std::current_exception(), &c) + ")";
    return false;
  }
  kiln_graph_h h = g.exec ? g.exec->handle : nullptr;
  std::uint32_t rebuilt = 0;
  if (api.graph_capture_end(origin.impl()->handle, &h, &rebuilt) != KILN_OK) {
    g.kind_reason = "instantiating the CUDA graph failed: " + plugin_error(api);
    d.refresh_lost();
    return false;
  }
  if (!g.exec) {
    g.exec = std::make_unique<graph_exec>();
    g.exec->dev = g.dev.impl();
    g.exec->handle = h;
    g.exec->gen = d.generation.load();
    ++g.summary.instantiations;
  } else if (rebuilt) {
    ++g.summary.instantiations;
  } else {
    ++g.summary.updates;
  }
  g.exec_stale = false;
  return true;
}

void replay_captured(graph_impl& g) {
  const kiln_backend& api = api_of(g);
  queue& origin = g.lanes[0];
  device_impl& d = *g.dev.impl();
  d.check_alive(g.exec->gen, "replaying a CUDA graph");
  std::optional<event> start;
  if (g.options.timing) start = origin.record();
  if (kiln_status s = api.graph_launch(g.exec->handle, origin.impl()->handle); s != KILN_OK) {
    const std::string why = plugin_error(api);
    if (s == KILN_ERR_DEVICE_LOST)
      throw_status(api, s, "graph '" + g.options.name + "': launching its CUDA graph");
    // Nothing ran: this run, and the later ones, go through queues, which name a failing stage.
    g.kind_reason = "launching the CUDA graph failed: " + why;
    g.planned = replay_kind::queues;
    g.summary.kind = replay_kind::queues;
    g.summary.kind_reason = g.kind_reason;
    replay_queues(g);
    return;
  }
  std::optional<event> stop;
  try {
    if (start) stop = origin.record();
    origin.finish();
  } catch (...) {
    // The device failed while the graph ran: which stage cannot be told from one launch.
    std::string names;
    for (std::size_t i : g.order) {
      stage_report& rep = g.stages[i].report;
      rep.state = stage_state::failed;
      ++rep.failures;
      names += (names.empty() ? "" : ", ") + rep.name;
    }
    error_category c;
    const std::string why = describe(std::current_exception(), &c);
    for (auto& s : g.stages) s.report.error = why;
    throw graph_error(c,
                      "graph '" + g.options.name + "': its CUDA graph failed while running (" +
                          why + "); the stages in it: " + names +
                          ". graph_mode::queues names the failing stage",
                      "", std::current_exception(), g.summary);
  }
  g.summary.last_device_ms = stop ? elapsed_ms(*start, *stop) : -1.0;
  for (std::size_t i : g.order) {
    stage& s = g.stages[i];
    s.report.state = stage_state::ran;
    s.report.error.clear();
    s.report.device = g.dev.id();
    s.report.launches = s.launches_seen;
    s.report.last_ms = -1;  // one launch for the whole graph: no per-stage events
    ++s.report.runs;
  }
}

}  // namespace kiln::detail
