// `kiln calibrate [query|tensor]`: measures, for each GPU, from which size work on host-resident
// data finishes sooner on the GPU (the copy over included) than on the CPU backend, and stores
// it in the cache directory (placement.txt):
// - query: host ranges through map | filter | sum and map | filter | map | to_vector, in input
//   bytes (kiln::on(kiln::automatic)): the GPU must win both, copies in and out included;
// - tensor: one threshold per placement class (kiln::automatic tensors, docs/placement.md),
//   elementwise relu(a * b + c), reduction x.sum(1) over rows of 256, gemm a square matmul,
//   conv a 3x3 conv2d; each sweep runs to its end (or its time budget), or stops once the GPU
//   wins by a growing margin; the threshold is where the GPU's final run of wins begins.
// The tables go to stdout as they are measured, or, with --json, as one JSON document at the end;
// a progress line goes to stderr when it is a terminal (or with --progress).
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <vector>

#include "kiln/kiln.hpp"
#include "kiln/tensor/conv.hpp"
#include "query/host_input.hpp"
#include "tensor/placement.hpp"
#include "tools/kiln/commands.hpp"

namespace kiln::tool {
namespace {
using namespace kiln::placeholders;
using clock_type = std::chrono::steady_clock;

using json = nlohmann::ordered_json;

double ms_since(clock_type::time_point a) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - a).count();
}

// Where calibration reports: the text tables on stdout as they are measured (none with --json),
// and a progress line on stderr, redrawn in place on a terminal, one line per step elsewhere.
class reporter {
 public:
  explicit reporter(const calibrate_options& o)
      : text_(!o.json),
        tty_(isatty(fileno(stderr)) != 0),
        progress_(o.progress || tty_),
        start_(clock_type::now()) {}
  ~reporter() { clear(); }
  reporter(const reporter&) = delete;
  reporter& operator=(const reporter&) = delete;

  // A line of the text report (printf-style): the progress line is cleared first.
  [[gnu::format(printf, 2, 3)]] void line(const char* format, ...) {
    if (!text_) return;
    clear();
    va_list args;
    va_start(args, format);
    std::vprintf(format, args);
    va_end(args);
    std::putchar('\n');
    std::fflush(stdout);
  }

  // What is measured now: step (from 0) of a sweep of `steps`.
  void status(const std::string& what, std::size_t step, std::size_t steps) {
    if (!progress_) return;
    constexpr std::size_t width = 20;
    const std::size_t fill = steps ? width * step / steps : 0;
    std::fprintf(stderr, "%skiln calibrate: [%s%s] %-44s %6.1f s%s", tty_ ? "\r\033[K" : "",
                 std::string(fill, '#').c_str(), std::string(width - fill, '.').c_str(),
                 what.c_str(), ms_since(start_) / 1e3, tty_ ? "" : "\n");
    std::fflush(stderr);
    shown_ = tty_;
  }

  void clear() {
    if (!shown_) return;
    std::fputs("\r\033[K", stderr);
    std::fflush(stderr);
    shown_ = false;
  }

 private:
  bool text_, tty_, progress_, shown_ = false;
  clock_type::time_point start_;
};

// Median wall time of run() (the first two runs warm up: compiles, staging buffers).
template <class Run>
double median_wall_ms(Run&& run) {
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    const auto a = clock_type::now();
    run();
    if (r >= 2) t.push_back(ms_since(a));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Two host-resident queries, timed whole (the copies in and out included): map | filter | sum
// (host data in, a value out) and map | filter | map | to_vector (about half comes back).
std::pair<double, double> query_ms(const kiln::device& dev, const std::vector<float>& host) {
  const double in = median_wall_ms([&] {
    volatile float s =
        host | kiln::on(dev) | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1.f) | kiln::sum();
    (void)s;
  });
  const double out = median_wall_ms([&] {
    const std::vector<float> v = host | kiln::on(dev) | kiln::transform(_1 * 2.f) |
                                 kiln::filter(_1 > 10.f) | kiln::transform(_1 + 1.f) |
                                 kiln::to_vector();
    (void)v;
  });
  return {in, out};
}

constexpr std::uint64_t query_never = 1ull << 40;  // the crossover stored when the CPU won

struct query_row {
  std::uint64_t bytes;
  double cpu_sum, gpu_sum, cpu_vector, gpu_vector;  // wall ms
};
struct query_result {
  std::vector<query_row> rows;
  std::uint64_t crossover;  // bytes; query_never when the CPU won
};

json to_json(const query_result& r) {
  json rows = json::array();
  for (const query_row& q : r.rows)
    rows.push_back({{"bytes", q.bytes},
                    {"cpu_sum_ms", q.cpu_sum},
                    {"gpu_sum_ms", q.gpu_sum},
                    {"cpu_vector_ms", q.cpu_vector},
                    {"gpu_vector_ms", q.gpu_vector}});
  return {{"rows", rows}, {"crossover_bytes", r.crossover}, {"never", r.crossover == query_never}};
}

// kiln::on(kiln::automatic) knows the input's size only (not the terminal), so the GPU "wins" a
// size when it beats the CPU backend at both queries, copies included. The sweep runs to 256 MiB
// (a many-core CPU reading host memory can outrun PCIe, so the GPU may lose again at large
// sizes); the crossover is where the GPU's final run of wins begins, at least two sizes long;
// never (2^40) when the CPU wins the largest size.
query_result calibrate_query(const kiln::device& gpu, const kiln::device& cpu, reporter& out) {
  out.line("%s (%s) against %s, host-resident float32, wall ms (copies included):",
           gpu.id().c_str(), gpu.info().name.c_str(), cpu.id().c_str());
  out.line("  %12s %12s %12s %12s %12s", "bytes in", "cpu sum", "gpu sum", "cpu vector",
           "gpu vector");
  constexpr std::uint64_t first = 1u << 10, last = 1u << 26;
  constexpr std::size_t steps = 17;  // first .. last, doubling
  query_result r{{}, 0};
  std::uint64_t run_start = 0;
  int run = 0;
  for (std::uint64_t n = first; n <= last; n <<= 1) {
    out.status(gpu.id() + " query, " + human_bytes(n * 4) + " in", r.rows.size(), steps);
    std::vector<float> host(n);
    for (std::uint64_t i = 0; i < n; ++i) host[i] = float(i % 1000) * 0.01f;
    const auto [cs, cv] = query_ms(cpu, host);
    const auto [gs, gv] = query_ms(gpu, host);
    r.rows.push_back({n * 4, cs, gs, cv, gv});
    out.line("  %12s %12.3f %12.3f %12.3f %12.3f", human_bytes(n * 4).c_str(), cs, gs, cv, gv);
    if (gs < cs && gv < cv) {
      if (++run == 1) run_start = n * 4;
    } else {
      run = 0;
    }
  }
  r.crossover = run >= 2 ? run_start : query_never;
  const std::string file = kiln::detail::q::store_crossover(gpu, r.crossover);
  out.line("  crossover %s, stored in %s", human_bytes(r.crossover).c_str(), file.c_str());
  return r;
}

// ---- tensor placement classes ----

struct tensor_case {
  kiln::op_class cls;
  const char* what;
  const char* units;
  std::vector<std::int64_t> sizes;                                // the sweep's parameter
  std::function<double(std::int64_t)> work;                       // in the class's units
  std::function<std::vector<kiln::tensor>(std::int64_t)> inputs;  // on the host CPU
  std::function<kiln::tensor(const std::vector<kiln::tensor>&)> op;
};

std::vector<float> host_values(std::int64_t n, int seed) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float((i * 7 + seed * 13) % 1000) * 1e-3f;
  return v;
}

kiln::tensor host_tensor(const kiln::shape_t& shape, int seed) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return kiln::tensor::from(kiln::device::host(), host_values(n, seed), shape);
}

// One run on dev from host-resident inputs: fresh handles on the host storage, moved to dev
// as kiln::automatic moves them (tensor/placement.cpp), the operation, and its completion.
double run_ms(const tensor_case& tc, const std::vector<kiln::tensor>& host,
              const kiln::device& dev) {
  std::vector<kiln::tensor> xs;
  std::vector<kiln::detail::tensor_impl*> impls;
  for (const kiln::tensor& h : host) {
    xs.push_back(h.view(h.shape()));
    impls.push_back(xs.back().impl().get());
  }
  const auto a = clock_type::now();
  kiln::detail::move_storage(impls, dev);
  const kiln::tensor r = tc.op(xs);
  r.eval();
  dev.synchronize();
  return ms_since(a);
}

double median_ms(const tensor_case& tc, const std::vector<kiln::tensor>& host,
                 const kiln::device& dev) {
  std::vector<double> t;
  for (int r = 0; r < 6; ++r) {
    const double v = run_ms(tc, host, dev);
    if (r >= 1) t.push_back(v);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

std::vector<std::int64_t> geometric(double from, double to, double step) {
  std::vector<std::int64_t> out;
  for (double v = from; v <= to * 1.0001; v *= step) {
    const auto i = static_cast<std::int64_t>(std::llround(v));
    if (out.empty() || i != out.back()) out.push_back(i);
  }
  return out;
}

std::vector<tensor_case> tensor_cases() {
  using kiln::tensor;
  std::vector<tensor_case> out;
  out.push_back(
      {kiln::op_class::elementwise, "relu(a * b + c), float32 [n]", "elements",
       geometric(1 << 12, 1 << 26, 2), [](std::int64_t n) { return double(n); },
       [](std::int64_t n) {
         return std::vector<tensor>{host_tensor({n}, 1), host_tensor({n}, 2), host_tensor({n}, 3)};
       },
       [](const std::vector<tensor>& x) { return kiln::relu(x[0] * x[1] + x[2]); }});
  out.push_back({kiln::op_class::reduction, "x.sum(1), float32 [n / 256, 256]", "elements",
                 geometric(1 << 12, 1 << 26, 2), [](std::int64_t n) { return double(n); },
                 [](std::int64_t n) {
                   return std::vector<tensor>{host_tensor({n / 256, 256}, 1)};
                 },
                 [](const std::vector<tensor>& x) { return x[0].sum(1); }});
  out.push_back({kiln::op_class::gemm, "matmul, float32 [n, n] x [n, n]", "flops",
                 geometric(16, 4096, std::sqrt(2.0)),
                 [](std::int64_t n) { return 2.0 * double(n) * double(n) * double(n); },
                 [](std::int64_t n) {
                   return std::vector<tensor>{host_tensor({n, n}, 1), host_tensor({n, n}, 2)};
                 },
                 [](const std::vector<tensor>& x) { return kiln::matmul(x[0], x[1]); }});
  // N 8, C = K = 32, 3 x 3, padding 1: output n x n.
  out.push_back(
      {kiln::op_class::conv, "conv2d 3x3 pad 1, float32 [8, 32, n, n] * [32, 32, 3, 3]", "flops",
       geometric(1, 256, std::sqrt(2.0)),
       [](std::int64_t n) { return 2.0 * 8 * 32 * 32 * 9 * double(n) * double(n); },
       [](std::int64_t n) {
         return std::vector<tensor>{host_tensor({8, 32, n, n}, 1), host_tensor({32, 32, 3, 3}, 2)};
       },
       [](const std::vector<tensor>& x) {
         return kiln::conv2d(x[0], x[1], {}, {.padding = {1, 1}});
       }});
  return out;
}

constexpr double budget_ms = 5000;  // per class and GPU, after the first size (compiles)

struct class_row {
  std::int64_t n;
  double work, cpu_ms, gpu_ms;
};
struct class_result {
  const tensor_case* tc;
  std::vector<class_row> rows;
  bool budget_reached = false;
  std::uint64_t threshold = 0;  // placement_never: the CPU won the largest size
  std::string note = "measured";
};

json to_json(const std::vector<class_result>& classes) {
  json out = json::array();
  for (const class_result& c : classes) {
    json rows = json::array();
    for (const class_row& r : c.rows)
      rows.push_back({{"n", r.n}, {"work", r.work}, {"cpu_ms", r.cpu_ms}, {"gpu_ms", r.gpu_ms}});
    const bool never = c.threshold == kiln::placement_never;
    out.push_back({{"class", kiln::to_string(c.tc->cls)},
                   {"operation", c.tc->what},
                   {"units", c.tc->units},
                   {"rows", rows},
                   {"budget_reached", c.budget_reached},
                   {"threshold", never ? json(nullptr) : json(c.threshold)},
                   {"never", never},
                   {"note", c.note}});
  }
  return out;
}

// The class's threshold on gpu: the work from which the GPU won at every size measured after
// it (the placement rule is "the GPU from the threshold up"), at least two sizes of them;
// placement_never when the CPU won the largest. The sweep goes to its end (copies can make the
// GPU lose again at large sizes), within the time budget; gemm and conv stop once the GPU has
// won three sizes running by a growing margin.
class_result crossover_of(const tensor_case& tc, const kiln::device& gpu, const kiln::device& cpu,
                          reporter& out) {
  out.line("  %s: %s", kiln::to_string(tc.cls), tc.what);
  out.line("    %8s %12s %10s %10s", "n", tc.units, "cpu ms", "gpu ms");
  const bool compute_bound = tc.cls == kiln::op_class::gemm || tc.cls == kiln::op_class::conv;
  class_result r{&tc, {}};
  std::uint64_t run_start = 0;  // work of the first size of the current run of GPU wins
  int run = 0;
  double last_ratio = 0;
  clock_type::time_point start{};
  for (std::size_t i = 0; i < tc.sizes.size(); ++i) {
    if (i == 1) start = clock_type::now();
    if (i > 1 && ms_since(start) > budget_ms) {
      out.line("    (time budget reached)");
      r.budget_reached = true;
      break;
    }
    const std::int64_t n = tc.sizes[i];
    out.status(gpu.id() + " tensor " + kiln::to_string(tc.cls) + ", n = " + std::to_string(n), i,
               tc.sizes.size());
    const std::vector<kiln::tensor> host = tc.inputs(n);
    const double c = median_ms(tc, host, cpu), g = median_ms(tc, host, gpu);
    r.rows.push_back({n, tc.work(n), c, g});
    out.line("    %8lld %12.3g %10.3f %10.3f", static_cast<long long>(n), tc.work(n), c, g);
    const double ratio = c / std::max(g, 1e-9);
    if (g < c) {
      if (++run == 1) run_start = static_cast<std::uint64_t>(tc.work(n));
      // gemm and conv do more work per byte as they grow: once the GPU's lead grows, it
      // stays ahead. Elementwise work and reductions are bound by the copy: sweep them whole.
      if (compute_bound && run >= 3 && ratio > last_ratio) break;
    } else {
      run = 0;
    }
    last_ratio = ratio;
  }
  r.threshold = run >= 2 ? run_start : kiln::placement_never;
  return r;
}

std::string work_text(std::uint64_t w) {
  if (w == kiln::placement_never) return "never";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", double(w));
  return buf;
}

std::vector<class_result> calibrate_tensor(const kiln::device& gpu, const kiln::device& cpu,
                                           const std::vector<tensor_case>& cases, reporter& out) {
  out.line(
      "%s (%s) against %s, kiln::tensor placement classes, host-resident inputs "
      "(the copy to the GPU counted, the result left where it ran):",
      gpu.id().c_str(), gpu.info().name.c_str(), cpu.id().c_str());
  std::vector<class_result> classes;
  std::uint64_t gemm = kiln::detail::default_threshold(kiln::op_class::gemm);
  for (const tensor_case& tc : cases) {
    class_result r{&tc, {}};
    try {
      r = crossover_of(tc, gpu, cpu, out);
    } catch (const kiln::error& e) {
      if (tc.cls != kiln::op_class::conv) throw;
      // conv2d is im2col + GEMM on the CPU: take the GEMM crossover (flops for flops).
      r.threshold = gemm;
      r.note = std::string("from the gemm crossover (conv2d failed: ") + e.what() + ")";
      out.line("    conv2d failed (%s): the gemm crossover is used", e.what());
    }
    if (tc.cls == kiln::op_class::gemm) gemm = r.threshold;
    kiln::detail::store_threshold(tc.cls, gpu, r.threshold);
    classes.push_back(std::move(r));
  }
  out.line("  %-12s %12s %-9s  %s", "class", "threshold", "units", "stored in placement.txt");
  for (const class_result& r : classes)
    out.line("  %-12s %12s %-9s  %s", kiln::to_string(r.tc->cls), work_text(r.threshold).c_str(),
             r.tc->units, r.note.c_str());
  out.line("  stored in %s", kiln::detail::q::placement_file().string().c_str());
  return classes;
}

}  // namespace

int calibrate(const calibrate_options& o) {
  reporter out(o);
  const kiln::device cpu = kiln::device::host();
  const std::vector<tensor_case> cases = o.tensor ? tensor_cases() : std::vector<tensor_case>{};
  json gpus = json::array();
  for (const kiln::device& gpu : kiln::device::all()) {
    if (gpu.info().type != kiln::device_type::gpu) continue;
    json g = {
        {"device", gpu.id()}, {"name", gpu.info().name}, {"query", nullptr}, {"tensor", nullptr}};
    if (o.query) g["query"] = to_json(calibrate_query(gpu, cpu, out));
    if (o.tensor) g["tensor"] = to_json(calibrate_tensor(gpu, cpu, cases, out));
    gpus.push_back(std::move(g));
  }
  out.clear();
  if (gpus.empty() && !o.json)
    std::printf("no GPU: kiln::automatic always uses the CPU; nothing to calibrate\n");
  if (!o.json) return 0;
  json parts = json::array();
  if (o.query) parts.push_back("query");
  if (o.tensor) parts.push_back("tensor");
  const std::filesystem::path file = kiln::detail::q::placement_file();
  const json doc = {{"version", kiln::version_string},
                    {"cpu", cpu.id()},
                    {"parts", parts},
                    {"placement_file", file.empty() ? json(nullptr) : json(file.string())},
                    {"gpus", gpus}};
  print_json(doc);
  return 0;
}

}  // namespace kiln::tool
