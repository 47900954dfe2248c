// bench_graph: the cost of one stage of a kiln::graph. A chain of `stages` small dependent
// kernel launches (default 100), run eagerly (kernel::launch on one queue, then finish) and as a
// kiln::graph replay (a CUDA graph on CUDA devices, queues elsewhere); per-stage microseconds
// are medians after warm-up. Target on the H100: <= 1.5 us per stage on replay.
//
//   bench_graph [--csv FILE] [--runs N] [--stages N]
//
// Rows per device: eager and replay per stage, host wall clock per iteration including the
// final wait (what a caller sees), and device time by events (eager: events around the
// launches; replay: the graph's own events, summary().last_device_ms). On CUDA a hand-written
// CUDA graph of the same number of empty-kernel launches (bench/raw_cuda.cpp) is the floor.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "raw_cuda.hpp"

namespace kiln_bench {
namespace {

constexpr const char* step_source = R"(
KILN_KERNEL void step(KILN_GLOBAL float* x, float c) {
  const uint64_t i = kiln_global_id(0);
  x[i] = x[i] * 0.5f + c;
})";
constexpr std::size_t elements = 256;  // one work-group: the launch cost, not the work

struct args {
  std::string csv;
  int runs = 50;
  int stages = 100;
};

args parse(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s == "--csv" && i + 1 < argc)
      a.csv = argv[++i];
    else if (s == "--runs" && i + 1 < argc)
      a.runs = std::max(1, std::atoi(argv[++i]));
    else if (s == "--stages" && i + 1 < argc)
      a.stages = std::max(1, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: bench_graph [--csv FILE] [--runs N] [--stages N]\n");
      std::exit(2);
    }
  }
  return a;
}

std::vector<float> reference(int stages, int reps) {
  std::vector<float> x(elements, 1.0f);
  for (int r = 0; r < reps; ++r)
    for (int s = 0; s < stages; ++s)
      for (float& v : x) v = v * 0.5f + float(s % 7);
  return x;
}

void bench_device(const kiln::device& dev, const args& a, report& rep) {
  const std::string id = dev.id();
  kiln::kernel step = kiln::program::compile(dev, step_source).get_kernel("step");
  const std::vector<float> ones(elements, 1.0f);
  const int warm = 3;

  // Eager: every stage a kernel::launch on one queue, then one finish.
  kiln::buffer<float> eager_buf(dev, ones);
  kiln::queue q(dev);
  auto eager = [&] {
    for (int s = 0; s < a.stages; ++s)
      step.launch(q, kiln::range(elements), eager_buf, float(s % 7));
  };
  std::vector<double> eager_wall, eager_dev;
  for (int i = 0; i < warm + a.runs; ++i) {
    const auto t0 = clock_type::now();
    kiln::event start = q.record();
    eager();
    kiln::event stop = q.record();
    q.finish();
    if (i < warm) continue;
    eager_wall.push_back(seconds_since(t0) * 1e6);
    eager_dev.push_back(double(kiln::elapsed_ms(start, stop)) * 1e3);
  }
  const bool eager_ok = eager_buf.to_vector() == reference(a.stages, warm + a.runs);

  // Replay: the same chain as a graph; timing off for the wall-clock figure (no events).
  kiln::buffer<float> graph_buf(dev, ones);
  auto build = [&](bool timing) {
    kiln::graph g(dev, {.name = "chain", .timing = timing});
    std::string prev;
    for (int s = 0; s < a.stages; ++s) {
      std::string name = "s";  // not "s" + to_string(s): GCC 12 -O3 warns falsely
      name += std::to_string(s);
      g.launch(name, prev.empty() ? std::vector<std::string>{} : std::vector{prev}, step,
               kiln::range(elements), graph_buf, float(s % 7));
      prev = name;
    }
    return g;
  };
  kiln::graph g = build(false);
  std::vector<double> replay_wall;
  for (int i = 0; i < warm + a.runs; ++i) {
    const auto t0 = clock_type::now();
    g.run();
    if (i >= warm) replay_wall.push_back(seconds_since(t0) * 1e6);
  }
  const bool replay_ok = graph_buf.to_vector() == reference(a.stages, warm + a.runs);
  kiln::graph timed = build(true);
  std::vector<double> replay_dev;
  for (int i = 0; i < warm + a.runs; ++i) {
    timed.run();
    if (i >= warm && timed.summary().last_device_ms >= 0)
      replay_dev.push_back(timed.summary().last_device_ms * 1e3);
  }

  const double n = a.stages;
  const std::string kind = g.kind() == kiln::replay_kind::cuda_graph ? "CUDA graph" : "queues";
  auto add = [&](const std::string& metric, const std::string& what, double kiln_us,
                 std::optional<double> base, const std::string& base_label,
                 const std::string& verdict) {
    row r;
    r.device = id;
    r.metric = metric;
    r.what = what;
    r.unit = "us";
    r.kiln = kiln_us;
    r.baseline = base;
    r.baseline_impl = "cuda_driver";
    r.baseline_label = base_label;
    r.verdict = verdict;
    rep.add(r);
  };
  const double eager_stage = median(eager_wall) / n, replay_stage = median(replay_wall) / n;
  add("graph_eager_us_per_stage", "eager launch per stage (wall, incl. final wait)", eager_stage,
      std::nullopt, "", eager_ok ? "" : "WRONG RESULT");
  add("graph_eager_device_us_per_stage", "eager launch per stage (events)", median(eager_dev) / n,
      std::nullopt, "", "");
  std::optional<double> raw_stage;
  std::string raw_why;
  if (dev.backend() == "cuda") {
    std::string why;
    const int ordinal = std::atoi(id.substr(id.find(':') + 1).c_str());
    if (auto raw = raw_cuda::open(ordinal, &why)) {
      try {
        raw_stage = raw->graph_replay_median(a.stages, a.runs, 256) * 1e6 / n;
      } catch (const std::exception& e) {
        raw_why = e.what();
      }
    } else {
      raw_why = why;
    }
  }
  char verdict[96];
  std::snprintf(verdict, sizeof verdict, "%s%s; target <= 1.5 us (%s)",
                replay_ok ? "" : "WRONG RESULT; ", replay_stage <= 1.5 ? "met" : "missed",
                kind.c_str());
  add("graph_replay_us_per_stage", "graph replay per stage (wall, incl. wait; " + kind + ")",
      replay_stage, raw_stage, "raw CUDA graph of empty kernels", verdict);
  if (!replay_dev.empty())
    add("graph_replay_device_us_per_stage", "graph replay per stage (events)",
        median(replay_dev) / n, std::nullopt, "", "");
  char note[256];
  std::snprintf(note, sizeof note,
                "%s: %d stages, %d runs after %d warm-ups; eager/replay = %.2fx%s%s", id.c_str(),
                a.stages, a.runs, warm, eager_stage / replay_stage,
                raw_why.empty() ? "" : "; raw baseline: ", raw_why.c_str());
  rep.note(note);
}

}  // namespace
}  // namespace kiln_bench

int main(int argc, char** argv) {
  using namespace kiln_bench;
  const args a = parse(argc, argv);
  report rep;
  std::vector<kiln::device> devices;
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() == "cuda") devices.push_back(d);
  devices.push_back(kiln::device::host());
  for (const kiln::device& d : devices) {
    try {
      bench_device(d, a, rep);
    } catch (const std::exception& e) {
      rep.note(d.id() + ": failed: " + e.what());
    }
  }
  rep.print_markdown(stdout);
  if (!a.csv.empty() && !rep.write_csv(a.csv)) {
    std::fprintf(stderr, "bench_graph: cannot write %s\n", a.csv.c_str());
    return 1;
  }
  return 0;
}
