// kiln::graph's builder: stages are checked as they are added (names, devices, argument
// types), the DAG when it is instantiated (unknown names, cycles), then placed on queue lanes.
#include <algorithm>
#include <queue>

#include "graph/graph_impl.hpp"

namespace kiln {
namespace detail {
namespace {

std::string graph_name(const graph_impl& g) { return "graph '" + g.options.name + "'"; }

[[noreturn]] void bad_stage(const graph_impl& g, const std::string& stage, const std::string& why) {
  throw invalid_argument(graph_name(g) + ", stage '" + stage + "': " + why);
}

std::string param_text(const kernel_param& p) {
  std::string t = type_name(p.type);
  return p.is_pointer ? std::string(p.is_const ? "const " : "") + t + "*" : t;
}

// The checks launch() would make at run time, made now so that the error names the stage.
void check_arg(const graph_impl& g, const stage& s, std::size_t i, const arg_binding& a) {
  const kernel_param& p = s.kernel->params[i];
  const std::string which = "argument " + std::to_string(i) + " ('" + p.name + "') of kernel '" +
                            s.kernel->name + "' is " + param_text(p) + ", ";
  if (p.is_pointer != a.is_mem || p.type != a.type)
    bad_stage(g, s.name,
              which + "got " + (a.is_mem ? "a buffer of " : "a scalar of ") + type_name(a.type));
  if (a.is_mem && !a.mem) bad_stage(g, s.name, which + "got an empty buffer");
  if (a.is_mem && a.is_const && !p.is_const)
    bad_stage(g, s.name, which + "got a view of const elements");
}

void check_memory(const graph_impl& g, const std::string& stage, const stage_memory& mem) {
  for (const auto& m : mem)
    if (m && m->dev != g.dev.impl())
      bad_stage(g, stage,
                "a buffer lives on " + m->dev->id + ", the graph runs on " + g.dev.id() +
                    " (one graph, one device: copy the data over in a stage)");
}

stage& add_stage(graph_impl& g, std::string name, std::vector<std::string> after, stage_kind kind) {
  if (name.empty()) throw invalid_argument(graph_name(g) + ": a stage needs a name");
  if (g.by_name.count(name))
    bad_stage(g, name, "a stage of that name exists already (names are unique in a graph)");
  std::vector<std::string> deps;
  for (std::string& a : after) {
    if (a == name) bad_stage(g, name, "it waits for itself (a cycle)");
    if (std::find(deps.begin(), deps.end(), a) == deps.end()) deps.push_back(std::move(a));
  }
  stage s;
  s.name = std::move(name);
  s.kind = kind;
  s.after = std::move(deps);
  s.report.name = s.name;
  s.report.kind = kind_name(kind);
  s.report.after = s.after;
  return g.stages.emplace_back(std::move(s));
}

void commit(graph_impl& g) {
  g.by_name[g.stages.back().name] = g.stages.size() - 1;
  g.ready = false;  // new structure: check, place and capture again
}

// "a -> b -> a": a cycle among the stages Kahn's algorithm left (each has an unvisited dep).
std::string find_cycle(const graph_impl& g, const std::vector<std::size_t>& left) {
  std::vector<int> mark(g.stages.size(), 0);
  for (std::size_t i : left) mark[i] = 1;
  std::vector<std::size_t> path;
  std::size_t at = left.front();
  std::vector<std::size_t> seen_at(g.stages.size(), SIZE_MAX);
  while (seen_at[at] == SIZE_MAX) {
    seen_at[at] = path.size();
    path.push_back(at);
    for (std::size_t d : g.stages[at].deps)
      if (mark[d]) {
        at = d;
        break;
      }
  }
  std::string text;
  for (std::size_t k = seen_at[at]; k < path.size(); ++k) text += g.stages[path[k]].name + " <- ";
  return text + g.stages[at].name;
}

}  // namespace

const char* kind_name(stage_kind k) noexcept {
  switch (k) {
    case stage_kind::kernel: return "kernel";
    case stage_kind::copy: return "copy";
    case stage_kind::fill: return "fill";
    case stage_kind::task: return "task";
    case stage_kind::host: return "host";
  }
  return "stage";
}

stage& graph_impl::find(std::string_view name, const char* what) {
  auto it = by_name.find(std::string(name));
  if (it == by_name.end())
    throw invalid_argument(std::string(what) + ": " + graph_name(*this) + " has no stage '" +
                           std::string(name) + "'");
  return stages[it->second];
}

graph_exec::~graph_exec() {
  if (handle && !dev->stale(gen)) dev->api->graph_destroy(handle);
}

void graph_add_kernel(graph_impl& g, std::string name, std::vector<std::string> after,
                      const kernel& k, const range& global, const range* local,
                      std::vector<arg_binding> args, stage_memory mem) {
  if (!k.impl()) bad_stage(g, name, "an empty (moved-from or null) kernel handle");
  if (k.impl()->dev != g.dev.impl().get())
    bad_stage(g, name,
              "kernel '" + k.name() + "' was compiled for " + k.impl()->dev->id +
                  ", the graph runs on " + g.dev.id());
  if (args.size() != k.params().size())
    bad_stage(g, name,
              "kernel '" + k.name() + "' takes " + std::to_string(k.params().size()) +
                  " arguments, " + std::to_string(args.size()) + " were given");
  check_memory(g, name, mem);
  stage& s = add_stage(g, std::move(name), std::move(after), stage_kind::kernel);
  s.kernel = k.impl();
  s.global = global;
  if (local) s.local = *local;
  s.args = std::move(args);
  s.memory = std::move(mem);
  s.capturable = !s.kernel->checked;  // checked mode waits for each launch
  try {
    for (std::size_t i = 0; i < s.args.size(); ++i) check_arg(g, s, i, s.args[i]);
  } catch (...) {
    g.stages.pop_back();
    throw;
  }
  commit(g);
}

void graph_add_work(graph_impl& g, std::string name, std::vector<std::string> after,
                    const char* kind, stage_work work, std::uint64_t bytes, bool capturable,
                    stage_memory mem) {
  if (!work) throw invalid_argument(graph_name(g) + ", stage '" + name + "': no work given");
  check_memory(g, name, mem);
  const std::string_view k = kind;
  stage& s = add_stage(g, std::move(name), std::move(after),
                       k == "copy"   ? stage_kind::copy
                       : k == "fill" ? stage_kind::fill
                                     : stage_kind::task);
  s.work = std::move(work);
  s.bytes = bytes;
  s.report.bytes = bytes;
  s.capturable = capturable;
  s.memory = std::move(mem);
  commit(g);
}

void graph_add_host(graph_impl& g, std::string name, std::vector<std::string> after,
                    std::function<void()> fn) {
  if (!fn) throw invalid_argument(graph_name(g) + ", stage '" + name + "': no function given");
  stage& s = add_stage(g, std::move(name), std::move(after), stage_kind::host);
  s.fn = std::move(fn);
  commit(g);
}

void graph_set_arg(graph_impl& g, std::string_view name, std::size_t index, arg_binding value,
                   std::shared_ptr<memory_impl> mem) {
  std::lock_guard lock(g.run_mu);
  stage& s = g.find(name, "graph::set");
  if (s.kind != stage_kind::kernel)
    bad_stage(g, s.name,
              std::string("graph::set: a ") + kind_name(s.kind) +
                  " stage has no arguments (only kernel stages do)");
  if (index >= s.args.size())
    bad_stage(g, s.name,
              "graph::set: argument " + std::to_string(index) + " is out of range: kernel '" +
                  s.kernel->name + "' takes " + std::to_string(s.args.size()) +
                  " (counted from 0)");
  check_arg(g, s, index, value);
  if (mem) check_memory(g, s.name, {mem});
  // Keep the new buffer alive; the old one may still be read by a replay in flight, which
  // run() waits for, so it can go once replaced.
  if (s.args[index].is_mem)
    std::erase_if(s.memory, [&](const auto& m) { return m.get() == s.args[index].mem; });
  s.args[index] = value;
  if (mem) s.memory.push_back(std::move(mem));
  g.exec_stale = true;  // captured arguments are stale: capture again and update in place
}

void check_and_place(graph_impl& g) {
  const std::size_t n = g.stages.size();
  std::vector<std::size_t> missing_deps(n, 0);
  std::vector<std::vector<std::size_t>> users(n);
  for (std::size_t i = 0; i < n; ++i) {
    stage& s = g.stages[i];
    s.deps.clear();
    for (const std::string& a : s.after) {
      auto it = g.by_name.find(a);
      if (it == g.by_name.end())
        bad_stage(g, s.name, "it waits for '" + a + "', which is not a stage of the graph");
      s.deps.push_back(it->second);
      users[it->second].push_back(i);
    }
    missing_deps[i] = s.deps.size();
  }
  // Kahn's algorithm; ties in the order stages were added, so runs are reproducible.
  std::priority_queue<std::size_t, std::vector<std::size_t>, std::greater<>> ready;
  for (std::size_t i = 0; i < n; ++i)
    if (missing_deps[i] == 0) ready.push(i);
  std::vector<std::size_t> order;
  while (!ready.empty()) {
    const std::size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (std::size_t u : users[i])
      if (--missing_deps[u] == 0) ready.push(u);
  }
  if (order.size() != n) {
    std::vector<std::size_t> left;
    for (std::size_t i = 0; i < n; ++i)
      if (missing_deps[i]) left.push_back(i);
    bad_stage(g, g.stages[left.front()].name,
              "the stages form a cycle (" + find_cycle(g, left) + "); a graph must be acyclic");
  }
  // Lanes: a stage continues the lane of a dependency that ends its lane (a chain stays on
  // one queue, no event needed); otherwise it opens a lane, up to max_queues; otherwise it
  // joins the shortest lane (ordering by events across lanes keeps it correct).
  const std::size_t max_lanes = std::max<std::uint32_t>(1, g.options.max_queues);
  std::vector<std::vector<std::size_t>> lanes;
  for (std::size_t i : order) {
    stage& s = g.stages[i];
    std::size_t lane = SIZE_MAX;
    for (std::size_t d : s.deps)
      if (lanes[g.stages[d].lane].back() == d) {
        lane = g.stages[d].lane;
        break;
      }
    if (lane == SIZE_MAX && lanes.size() < max_lanes) {
      lane = lanes.size();
      lanes.emplace_back();
    }
    if (lane == SIZE_MAX)
      lane = static_cast<std::size_t>(
          std::min_element(lanes.begin(), lanes.end(),
                           [](const auto& a, const auto& b) { return a.size() < b.size(); }) -
          lanes.begin());
    s.lane = lane;
    lanes[lane].push_back(i);
  }
  for (stage& s : g.stages) s.signals = false;
  for (stage& s : g.stages)
    for (std::size_t d : s.deps)
      if (s.kind == stage_kind::host || g.stages[d].lane != s.lane) g.stages[d].signals = true;
  const std::uint32_t gen = g.dev.impl()->generation.load();
  if (g.lanes.size() != lanes.size() || g.lanes_gen != gen) {
    g.lanes.clear();
    for (std::size_t l = 0; l < lanes.size(); ++l) g.lanes.emplace_back(g.dev);
    g.lanes_gen = gen;
  }
  g.order = std::move(order);
  g.lane_stages = std::move(lanes);
  // How replays run: a CUDA graph when the plugin can and every stage can be captured.
  g.exec.reset();
  g.exec_stale = true;
  g.planned = replay_kind::queues;
  g.kind_reason.clear();
  if (g.options.mode == graph_mode::queues) {
    g.kind_reason = "graph_mode::queues was asked for";
  } else if (std::string why = graph_support(g.dev); !why.empty()) {
    g.kind_reason = why;
  } else {
    for (std::size_t i : g.order)
      if (!g.stages[i].capturable) {
        const stage& s = g.stages[i];
        g.kind_reason = "stage '" + s.name + "' (" + kind_name(s.kind) + ") cannot be captured" +
                        (s.kind == stage_kind::host   ? ": host functions run on the host"
                         : s.kind == stage_kind::task ? ": a task not marked capturable"
                                                      : ": a checked-mode kernel");
        break;
      }
    if (g.kind_reason.empty()) g.planned = replay_kind::cuda_graph;
  }
  g.summary.kind_reason = g.kind_reason;
  g.ready = true;
}

}  // namespace detail

graph::graph(const device& dev, graph_options options) {
  if (!dev.impl()) detail::throw_empty_handle("kiln::graph", "device");
  if (options.errors == on_error::retry_on_fallback && !options.fallback)
    throw invalid_argument("graph '" + options.name +
                           "': on_error::retry_on_fallback needs graph_options::fallback");
  impl_ = std::make_unique<detail::graph_impl>(dev, std::move(options));
  impl_->summary.graph = impl_->options.name;
}

graph::~graph() = default;
graph::graph(graph&&) noexcept = default;
graph& graph::operator=(graph&&) noexcept = default;

graph& graph::task(std::string name, std::vector<std::string> after,
                   std::function<void(queue&)> work, task_options options) {
  detail::graph_add_work(self("graph::task"), std::move(name), std::move(after), "task",
                         std::move(work), 0, options.capturable, {});
  return *this;
}

graph& graph::host(std::string name, std::vector<std::string> after, std::function<void()> fn) {
  detail::graph_add_host(self("graph::host"), std::move(name), std::move(after), std::move(fn));
  return *this;
}

void graph::instantiate() {
  detail::graph_impl& g = self("graph::instantiate");
  std::lock_guard lock(g.run_mu);
  if (g.stages.empty())
    throw invalid_argument("graph '" + g.options.name + "' has no stages to instantiate");
  if (!g.ready) detail::check_and_place(g);
}

const graph_summary& graph::summary() const { return self("graph::summary").summary; }
replay_kind graph::kind() const { return self("graph::kind").summary.kind; }
const device& graph::get_device() const { return self("graph::get_device").dev; }
std::size_t graph::size() const { return self("graph::size").stages.size(); }

}  // namespace kiln
