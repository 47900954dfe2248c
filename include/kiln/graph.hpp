// kiln::graph: a DAG of named stages (kernel launches, copies, fills, work on a queue, host
// callbacks), built once and replayed. Independent stages run at once on separate queues;
// dependencies become events. On CUDA the whole DAG is captured into a CUDA graph,
// instantiated once and replayed with one launch; elsewhere it replays through queues.
//
//   kiln::graph g(dev, {.name = "pipeline"});
//   g.copy("upload", {}, host_in, in);                                  // host -> device
//   g.launch("scale", {"upload"}, scale, kiln::range(n), a, in, 2.0f);   // a kernel stage
//   g.launch("shift", {"upload"}, shift, kiln::range(n), b, in, 1.0f);   // beside "scale"
//   g.task("merge", {"scale", "shift"}, [&](kiln::queue& q) {            // anything on a queue
//     merge.launch(q, kiln::range(n), out, a, b);
//   });
//   g.copy("download", {"merge"}, out, host_out);
//   g.run();                     // first run instantiates (and captures, on CUDA); waits
//   g.set("scale", 3, 3.0f);     // argument 4 of "scale" is 3 from the next replay on
//   g.run();
//   std::cout << g.summary().table();   // per-stage time, bytes, launches; .json() too
//
// Errors: a failing stage raises kiln::graph_error naming it (with the original category and
// exception, and the run's report); graph_options::errors chooses what the other stages do.
// Bad graphs (cycles, unknown or duplicate names, foreign devices) are kiln::invalid_argument.
// Build a graph on one thread; run() and set() may then come from any thread, one at a time.
// docs/graph.md has the whole story.
#pragma once

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <ranges>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/fallback.hpp"
#include "kiln/kernel.hpp"
#include "kiln/queue.hpp"

namespace kiln {

// What the other stages do when one fails.
enum class on_error {
  stop,                  // nothing new starts; stages already running finish
  continue_independent,  // stages that do not depend on the failed one still run
  retry_on_fallback,     // a failed task runs again on the next device of graph_options::fallback
};

// How replays run. automatic: a CUDA graph where the device's plugin has graphs and every stage
// can be captured, queues and events otherwise.
enum class graph_mode { automatic, queues };
// How the last run did run.
enum class replay_kind { none, queues, cuda_graph };

struct graph_options {
  std::string name = "graph";
  on_error errors = on_error::stop;
  graph_mode mode = graph_mode::automatic;
  std::optional<kiln::fallback> fallback = std::nullopt;  // retry_on_fallback: the chain
  bool timing = true;                                     // per-stage events (queue replays)
  std::uint32_t max_queues = 4;  // independent stages run on up to this many queues
};

// Options of a task stage.
struct task_options {
  // The work only enqueues on the queue it is given (no host waits, no reads back): it may be
  // captured into a CUDA graph. Tensor operations qualify; queries that return values do not.
  bool capturable = false;
};

enum class stage_state { not_run, ran, failed, skipped };
const char* to_string(stage_state s) noexcept;

// One stage in a report. Times are per run; negative when not measured (CUDA graph replays
// time the whole graph only).
struct stage_report {
  std::string name, kind;  // kind: "kernel", "copy", "fill", "task", "host"
  std::vector<std::string> after;
  stage_state state = stage_state::not_run;  // in the last run
  std::string device;                        // where it last ran ("cpu:0" after a fallback)
  std::string error;                         // the failure, when state == failed
  std::uint64_t runs = 0, failures = 0;
  std::uint64_t bytes = 0;     // bytes moved per run (copies and fills)
  std::uint64_t launches = 0;  // kernel launches per run
  double last_ms = -1, total_ms = 0;
};

struct graph_summary {
  std::string graph;
  replay_kind kind = replay_kind::none;
  std::string kind_reason;  // why a CUDA graph was not used, when it was not
  std::uint64_t replays = 0, instantiations = 0, updates = 0;
  double last_run_ms = -1;           // the whole last run, wall clock (host), waits included
  double last_device_ms = -1;        // a CUDA-graph replay with timing on: its device time (events)
  std::vector<stage_report> stages;  // in the order stages were added

  const stage_report* find(std::string_view stage) const;
  std::size_t count(stage_state s) const;
  std::string table() const;  // a fixed-width text table
  std::string json() const;
};

// A stage failed. category() is the failure's own; cause() rethrows the original exception.
class graph_error : public error {
 public:
  graph_error(error_category c, const std::string& message, std::string stage,
              std::exception_ptr cause, graph_summary report)
      : error(c, message), stage_(std::move(stage)), cause_(cause), report_(std::move(report)) {}
  const std::string& stage() const noexcept { return stage_; }  // the first stage that failed
  std::exception_ptr cause() const noexcept { return cause_; }
  const graph_summary& report() const noexcept { return report_; }

 private:
  std::string stage_;
  std::exception_ptr cause_;
  graph_summary report_;
};

namespace detail {
struct graph_impl;
using stage_work = std::function<void(queue&)>;
// Memory a stage uses: checked against the graph's device, kept alive by the graph.
using stage_memory = std::vector<std::shared_ptr<memory_impl>>;

void graph_add_kernel(graph_impl& g, std::string name, std::vector<std::string> after,
                      const kernel& k, const range& global, const range* local,
                      std::vector<arg_binding> args, stage_memory mem);
// kind: "copy", "fill" or "task".
void graph_add_work(graph_impl& g, std::string name, std::vector<std::string> after,
                    const char* kind, stage_work work, std::uint64_t bytes, bool capturable,
                    stage_memory mem);
void graph_add_host(graph_impl& g, std::string name, std::vector<std::string> after,
                    std::function<void()> fn);
void graph_set_arg(graph_impl& g, std::string_view stage, std::size_t index, arg_binding value,
                   std::shared_ptr<memory_impl> mem);

template <class A>
std::shared_ptr<memory_impl> memory_of(const A& a) {
  if constexpr (is_device_side<A>)
    return as_view(a).memory();
  else
    return nullptr;
}
// What a copy stage holds of one side: a view of a buffer, a span of host memory (the host
// container itself is not copied).
template <class A>
auto graph_side(A& a) {
  if constexpr (is_device_side<std::remove_cvref_t<A>>)
    return as_view(a);
  else
    return std::span(std::ranges::data(a), std::ranges::size(a));
}
template <class A>
std::uint64_t bytes_of(const A& a) {
  if constexpr (is_device_side<A>) {
    auto v = as_view(a);
    return v.size() * sizeof(typename decltype(v)::element_type);
  } else {
    return std::ranges::size(a) * sizeof(std::ranges::range_value_t<A>);
  }
}
}  // namespace detail

class graph {
 public:
  explicit graph(const device& dev, graph_options options = {});
  ~graph();
  graph(graph&&) noexcept;
  graph& operator=(graph&&) noexcept;

  // ---- Stages. `after` names the stages this one waits for; they may be added later. ----

  // A kernel launch; arguments are bound now (buffers are kept alive by the graph).
  template <class... Args>
  graph& launch(std::string name, std::vector<std::string> after, const kernel& k,
                const range& global, const Args&... args) {
    detail::graph_add_kernel(self("graph::launch"), std::move(name), std::move(after), k, global,
                             nullptr, {detail::bind_arg(args)...}, memory_of(args...));
    return *this;
  }
  template <class... Args>
  graph& launch(std::string name, std::vector<std::string> after, const kernel& k,
                const range& global, const local_size& local, const Args&... args) {
    detail::graph_add_kernel(self("graph::launch"), std::move(name), std::move(after), k, global,
                             &local, {detail::bind_arg(args)...}, memory_of(args...));
    return *this;
  }
  // A copy between buffers (views), or between a buffer and host memory, as queue::copy.
  // Host memory must stay valid and in place while the graph lives.
  template <class Src, class Dst>
  graph& copy(std::string name, std::vector<std::string> after, const Src& src, Dst&& dst) {
    const std::uint64_t bytes = detail::bytes_of(src);
    auto s = detail::graph_side(src);
    auto d = detail::graph_side(dst);
    detail::graph_add_work(
        self("graph::copy"), std::move(name), std::move(after), "copy",
        [s, d](queue& q) { q.copy(s, d); }, bytes, true, memory_of(src, dst));
    return *this;
  }
  template <class Dst, class T>
  graph& fill(std::string name, std::vector<std::string> after, const Dst& dst, const T& value) {
    const std::uint64_t bytes = detail::bytes_of(dst);
    auto d = detail::as_view(dst);
    detail::graph_add_work(
        self("graph::fill"), std::move(name), std::move(after), "fill",
        [d, value](queue& q) { q.fill(d, value); }, bytes, true, memory_of(dst));
    return *this;
  }
  // Any work on the queue it is given (queries, tensor operations, several launches). Under
  // on_error::retry_on_fallback a failed task runs again with a queue of the next device.
  graph& task(std::string name, std::vector<std::string> after, std::function<void(queue&)> work,
              task_options options = {});
  // A host function, run once the stages it names have finished on the device. Never
  // captured: a graph holding one replays through queues and events (docs/graph.md).
  graph& host(std::string name, std::vector<std::string> after, std::function<void()> fn);

  // ---- Updates between replays. ----

  // Replaces argument `index` (from 0) of kernel stage `stage`: a scalar of the parameter's
  // exact type or a buffer of its element type on the graph's device. On CUDA the next run
  // updates the instantiated graph in place (re-instantiating only when CUDA refuses).
  template <class T>
  void set(std::string_view stage, std::size_t index, const T& value) {
    detail::graph_set_arg(self("graph::set"), stage, index, detail::bind_arg(value),
                          detail::memory_of(value));
  }

  // ---- Running. ----

  // Checks the DAG (unknown names, cycles) and prepares queues, and the CUDA graph where one
  // is used. run() does it when needed; call it to find errors early.
  void instantiate();
  // Runs every stage once and waits for them. Throws graph_error when a stage fails,
  // kiln::device_lost when the device was lost before the run.
  const graph_summary& run();

  const graph_summary& summary() const;  // the last run's states and accumulated metrics
  replay_kind kind() const;              // how the last run ran
  const device& get_device() const;
  std::size_t size() const;  // stages

 private:
  detail::graph_impl& self(const char* what) const {
    if (!impl_) detail::throw_empty_handle(what, "graph");
    return *impl_;
  }
  template <class... A>
  static detail::stage_memory memory_of(const A&... a) {
    detail::stage_memory m;
    (
        [&] {
          if (auto p = detail::memory_of(a)) m.push_back(std::move(p));
        }(),
        ...);
    return m;
  }
  std::unique_ptr<detail::graph_impl> impl_;
};

}  // namespace kiln
