// Internal state of a kiln::graph: the stages as added, the checked DAG (topological order,
// queue lanes), the CUDA graph when one is used, and the metrics.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "kiln/graph.hpp"
#include "runtime/launch_count.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {

enum class stage_kind { kernel, copy, fill, task, host };
const char* kind_name(stage_kind k) noexcept;

struct stage {
  std::string name;
  stage_kind kind = stage_kind::task;
  std::vector<std::string> after;
  std::vector<std::size_t> deps;  // resolved `after`, by index (instantiate)
  // kernel stages
  std::shared_ptr<kernel_impl> kernel;
  range global{1};
  std::optional<range> local;
  std::vector<arg_binding> args;
  // copies, fills, tasks: enqueue on the queue given; host stages: fn
  stage_work work;
  std::function<void()> fn;
  stage_memory memory;  // kept alive while the graph lives
  std::uint64_t bytes = 0;
  bool capturable = false;
  // placement (instantiate)
  std::size_t lane = 0;
  bool signals = false;  // a stage on another lane, or a host stage, waits on its end event
  // the report's row: accumulated metrics
  stage_report report;
  std::uint64_t launches_seen = 0;  // launches counted in the last run
};

// The device half of an instantiated CUDA graph; freed through the plugin unless a device reset
// destroyed it already.
struct graph_exec {
  std::shared_ptr<device_impl> dev;
  kiln_graph_h handle = nullptr;
  std::uint32_t gen = 0;
  ~graph_exec();
};

struct graph_impl {
  device dev;
  graph_options options;
  std::vector<stage> stages;
  std::unordered_map<std::string, std::size_t> by_name;

  // ---- instantiate() ----
  bool ready = false;  // the DAG was checked and placed since the last structural change
  std::vector<std::size_t> order;                     // topological, ties in insertion order
  std::vector<std::vector<std::size_t>> lane_stages;  // per lane, in `order`
  std::vector<queue> lanes;                           // one queue per lane
  std::uint32_t lanes_gen = 0;                        // device generation of `lanes`

  // ---- CUDA graph ----
  replay_kind planned = replay_kind::none;  // what the next run uses
  std::string kind_reason;
  std::unique_ptr<graph_exec> exec;
  bool exec_stale = true;  // arguments changed since the capture: capture again and update

  // ---- metrics ----
  graph_summary summary;
  std::mutex run_mu;  // one run at a time

  graph_impl(const device& d, graph_options o) : dev(d), options(std::move(o)) {}
  stage& find(std::string_view name, const char* what);
};

// builder.cpp: checks the DAG and places the stages on lanes; decides the replay kind.
void check_and_place(graph_impl& g);
// capture.cpp: captures the DAG into a CUDA graph (or updates the one there is); false with
// g.kind_reason set when it cannot, so that the run goes through queues.
bool capture(graph_impl& g);
void replay_captured(graph_impl& g);
// Why the device cannot replay a CUDA graph ("" when it can).
// Why `dev` cannot capture and replay CUDA graphs; empty when it can.
std::string graph_support(const device& dev);
// scheduler.cpp: one run through queues and events, error strategy applied.
void replay_queues(graph_impl& g);
// Runs one stage's work on q (kernel, copy, fill, task).
void enqueue_stage(const stage& s, queue& q);
// report.cpp
[[noreturn]] void throw_stage_failure(graph_impl& g, std::size_t stage, std::exception_ptr e);
std::string describe(std::exception_ptr e, error_category* category);

}  // namespace kiln::detail
