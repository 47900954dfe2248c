// kiln::tensor throughput beside PyTorch, one process run: Kiln's rows first, then
// bench/torch_tensor.py runs the same cases in the same order (same sizes, CUDA events,
// medians) and one merged table prints Kiln, PyTorch and Kiln / PyTorch per row.
//
// Groups (--only), in run order:
//   elementwise  fused elementwise chains, softmax, row normalisation and axis reductions on
//                64M floats, beside a device-to-device copy of the same bytes (GB/s);
//                layer_norm / rms_norm forward and backward at [8192, 768], [16384, 4096] and
//                [65536, 1024]
//                in f32 and bf16 (issue 25's target: >= 90% of copy)
//   gemm         SGEMM 4096^3 and 8192^3 (f32 and TF32), batched 64 x 256^3, SGEMV 8192^2
//   conv         ResNet-50 convolutions at batch 32 (7x7/2 3->64 at 224^2, 3x3 64->64 and
//                1x1 256->64 at 56^2): forward, backward-data, backward-filter; f32 and TF32
//   pool         max_pool2d 3x3/2 pad 1 on [32, 64, 112, 112], without and with indices
//   cpu          on the CPU device: SGEMM 1024^3 and 2048^3, conv 3x3 64->64 56^2 batch 4
// TFLOP/s counts 2 m n k per product and 2 N K (C / groups) R S P Q per convolution pass;
// GB/s the bytes an operation must move at least. Event-timed median of --runs after --warmup;
// every run builds its result (the result's allocation is inside the timing, as in PyTorch
// eager). gemm, conv and pool need a GPU as the main device (else they are skipped) unless
// --quick, which shrinks every size to a smoke test that runs anywhere in seconds. On a main
// device that is not a GPU the elementwise sizes are divided by 16.
//
//   bench_tensor [--device cuda:0] [--runs 20] [--warmup 3] [--only gemm,conv,pool,cpu]
//                [--filter tf32,sgemv] [--quick] [--no-torch] [--no-compile]
//                [--python python3] [--torch-script bench/torch_tensor.py]
#include "bench_tensor.hpp"

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor.hpp>
#include <kiln/tensor/layer_norm.hpp>
#include <map>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "torch_peer.hpp"

namespace kiln_bench_tensor {

namespace {

std::vector<result> results;
double copy_gbs = 0;

using kiln_bench::split;

using kiln_bench::join;
using kiln_bench::shell_quote;

// Three significant-ish digits without scientific notation (the shared report's format).
std::string fmt(double v) { return kiln_bench::report::fmt(v); }

// "64M", "4M", "256K".
std::string count_label(std::int64_t n) {
  if (n >= (1 << 20) && n % (1 << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= (1 << 10) && n % (1 << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

// ---- the elementwise group (the original rows) ----

// Times evaluating make() (a fresh lazy expression each run).
// count_launches: false where make() ends in several evaluating calls (the stats see the last).
void tensor_case(kiln::queue& q, const options& o, const std::string& name, double bytes,
                 const std::function<kiln::tensor()>& make, bool count_launches = true) {
  if (!o.wants_case(name)) return;
  kiln::tensor keep;
  const double ms = median_ms(q, o, [&] { keep = make().eval(); });
  make().eval();
  const auto launches = unsigned(kiln::last_tensor_stats().kernel_launches);
  const double gbs = bytes / ms * 1e-6;
  char note[96];
  if (count_launches)
    std::snprintf(note, sizeof note, "%.1f%% of copy, %u launch%s",
                  copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0, launches, launches == 1 ? "" : "es");
  else
    std::snprintf(note, sizeof note, "%.1f%% of copy", copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0);
  add_result({"elementwise", name, "GB/s", note, ms, gbs});
}

// layer_norm and rms_norm rows. GB/s counts what must move: forward x in and y out, backward dy
// and x in and dx out (weight, bias, mean, rstd and their gradients are a row's worth).
void run_norm_rows(const kiln::device& dev, kiln::queue& q, const options& o, bool gpu) {
  const std::int64_t scale = o.quick ? 64 : gpu ? 1 : 16;
  const std::pair<std::int64_t, std::int64_t> shapes[] = {
      {8192, 768}, {16384, 4096}, {65536, 1024}};
  for (const auto& [rows0, cols] : shapes)
    for (const kiln::scalar_type t : {kiln::scalar_type::f32, kiln::scalar_type::bf16}) {
      const std::int64_t rows = rows0 / scale;
      const std::string shape = "[" + std::to_string(rows) + ", " + std::to_string(cols) + "] " +
                                (t == kiln::scalar_type::f32 ? "f32" : "bf16");
      const kiln::tensor x = (uniform(dev, {rows, cols}, 5) * 4.f - 2.f).to(t).eval();
      const kiln::tensor dy = (uniform(dev, {rows, cols}, 6) * 4.f - 2.f).to(t).eval();
      const kiln::tensor w = (uniform(dev, {cols}, 7) + 0.5f).to(t).eval();
      const kiln::tensor b = uniform(dev, {cols}, 8).to(t).eval();
      const double nb = double(rows * cols) * double(kiln::size_of(t));
      tensor_case(
          q, o, "layer_norm forward " + shape, 2 * nb,
          [&] { return kiln::layer_norm(x, {cols}, w, b); }, false);
      const kiln::layer_norm_result l = kiln::native_layer_norm(x, {cols}, w, b);
      tensor_case(
          q, o, "layer_norm backward " + shape, 3 * nb,
          [&] {
            return kiln::layer_norm_backward(dy, x, {cols}, l.mean, l.rstd, w, true, true).input;
          },
          false);
      tensor_case(
          q, o, "rms_norm forward " + shape, 2 * nb,
          [&] { return kiln::rms_norm(x, {cols}, w, 1e-6); }, false);
      const kiln::layer_norm_result r = kiln::native_rms_norm(x, {cols}, w, 1e-6);
      tensor_case(
          q, o, "rms_norm backward " + shape, 3 * nb,
          [&] { return kiln::rms_norm_backward(dy, x, {cols}, r.rstd, w, true).input; }, false);
    }
}

void run_elementwise(const kiln::device& dev, const options& o) {
  kiln::queue& q = dev.default_queue();
  const bool gpu = dev.info().type == kiln::device_type::gpu;
  const std::int64_t n = o.quick ? std::int64_t(1) << 18 : (std::int64_t(1) << 26) / (gpu ? 1 : 16);
  const std::int64_t cols = 1024, rows_n = n / cols;
  const std::string rows = "[" + std::to_string(rows_n) + ", " + std::to_string(cols) + "]";
  std::printf("-- elementwise on %s: %lld floats per case\n", dev.id().c_str(),
              static_cast<long long>(n));
  {
    kiln::buffer<float> src(dev, static_cast<std::uint64_t>(n)),
        dst(dev, static_cast<std::uint64_t>(n));
    q.fill(src, 1.f);
    const double ms = median_ms(q, o, [&] { q.copy(src, dst); });
    copy_gbs = 8.0 * double(n) / ms * 1e-6;
    if (o.wants_case("copy (device to device)"))
      add_result({"elementwise", "copy (device to device)", "GB/s", "", ms, copy_gbs});
  }
  const kiln::tensor a = uniform(dev, {n}, 1) * 4.f - 2.f, b = uniform(dev, {n}, 2) * 4.f - 2.f,
                     c = uniform(dev, {n}, 3) * 4.f - 2.f;
  a.eval(), b.eval(), c.eval();
  const kiln::tensor x = (uniform(dev, {rows_n, cols}, 4) * 4.f - 2.f).eval();
  const double nb = double(n);
  tensor_case(q, o, "relu(a * b + c)", 16 * nb, [&] { return kiln::relu(a * b + c); });
  {  // the chain over bf16 tensors: loads widened, f32 math, one rounding at the store
    const auto t = kiln::scalar_type::bf16;
    const kiln::tensor a16 = a.to(t).eval(), b16 = b.to(t).eval(), c16 = c.to(t).eval();
    tensor_case(q, o, "relu(a * b + c) bf16", 8 * nb, [&] { return kiln::relu(a16 * b16 + c16); });
  }
  tensor_case(q, o, "softmax rows " + rows, 8 * nb, [&] { return x.softmax(1); });
  {  // short rows (attention's probabilities over 256 keys) and bf16 rows (2 bytes each way)
    const kiln::tensor xs = (uniform(dev, {n / 256, 256}, 7) * 4.f - 2.f).eval();
    tensor_case(q, o, "softmax rows [" + std::to_string(n / 256) + ", 256]", 8 * nb,
                [&] { return xs.softmax(1); });
    const kiln::tensor xh = x.to(kiln::scalar_type::bf16).eval();
    tensor_case(q, o, "softmax rows " + rows + " bf16", 4 * nb, [&] { return xh.softmax(1); });
  }
  tensor_case(q, o, "(x - mean) / sqrt(var + eps) rows", 8 * nb,
              [&] { return (x - x.mean(1, true)) / kiln::sqrt(x.var(1, 0, true) + 1e-5f); });
  tensor_case(q, o, "sum rows " + rows + " -> [" + std::to_string(rows_n) + "]", 4 * nb,
              [&] { return x.sum(1); });
  tensor_case(q, o, "sum cols " + rows + " -> [" + std::to_string(cols) + "]", 4 * nb,
              [&] { return x.sum(0); });
  tensor_case(q, o, "sum all " + count_label(n), 4 * nb, [&] { return a.sum(); });
  tensor_case(q, o, "relu(a * b + c).sum()", 12 * nb, [&] { return kiln::relu(a * b + c).sum(); });
  tensor_case(q, o, "argmax rows", 4 * nb, [&] { return x.argmax(1); });
  run_norm_rows(dev, q, o, gpu);
}

// ---- PyTorch: bench/torch_tensor.py --tsv prints "ROW\tgroup\tname\tvariant\tvalue\tunit" ----

using kiln_bench::torch_row;

std::vector<torch_row> run_torch(const options& o, const std::vector<std::string>& groups,
                                 bool gpu) {
  std::vector<torch_row> rows;
  if (!std::filesystem::exists(o.script)) {
    std::printf("\nPyTorch: %s not found (run from the repository root, or --torch-script)\n",
                o.script.c_str());
    return rows;
  }
  std::string cmd = o.python + " " + shell_quote(o.script) + " --tsv --device " +
                    (gpu ? "cuda" : "cpu") + " --runs " + std::to_string(o.runs) + " --warmup " +
                    std::to_string(o.warmup) + " --only " + join(groups);
  if (o.quick) cmd += " --quick";
  if (!o.compile) cmd += " --no-compile";
  if (!o.filter.empty()) cmd += " --filter " + shell_quote(join(o.filter));
  return kiln_bench::run_torch_rows(cmd);
}

void print_merged(const std::vector<torch_row>& torch) {
  std::map<std::string, double> eager, compiled;
  for (const torch_row& t : torch)
    (t.variant == "compile" ? compiled : eager)[t.group + "|" + t.name] = t.value;
  const bool any_compile = !compiled.empty();
  // "PyTorch | Kiln / PyTorch" cells for key, "— | —" without a PyTorch figure.
  auto cells = [](const std::map<std::string, double>& m, const std::string& key,
                  double kiln) -> std::string {
    const auto it = m.find(key);
    if (it == m.end() || it->second <= 0) return "— | —";
    return fmt(it->second) + " | " + (kiln > 0 ? fmt(kiln / it->second) : "—");
  };
  std::printf("\n== Kiln beside PyTorch (ratio = Kiln / PyTorch: above 1 is Kiln faster)\n\n");
  std::printf("| group | case | unit | Kiln | PyTorch | Kiln / PyTorch |%s note |\n",
              any_compile ? " torch.compile | Kiln / compile |" : "");
  std::printf("| --- | --- | --- | ---: | ---: | ---: |%s --- |\n",
              any_compile ? " ---: | ---: |" : "");
  auto line = [&](const std::string& group, const std::string& name, const std::string& unit,
                  double kiln, const std::string& note) {
    const std::string key = group + "|" + name;
    const std::string extra = any_compile ? " " + cells(compiled, key, kiln) + " |" : "";
    std::printf("| %s | %s | %s | %s | %s |%s %s |\n", group.c_str(), name.c_str(), unit.c_str(),
                kiln > 0 ? fmt(kiln).c_str() : "—", cells(eager, key, kiln).c_str(), extra.c_str(),
                note.c_str());
  };
  for (const result& r : results) line(r.group, r.name, r.unit, r.value, r.note);
  // PyTorch rows without a Kiln row (a Kiln case that failed).
  for (const torch_row& t : torch) {
    const bool kiln = std::any_of(results.begin(), results.end(), [&](const result& r) {
      return r.group == t.group && r.name == t.name;
    });
    if (!kiln && t.variant != "compile") line(t.group, t.name, t.unit, 0, "no Kiln row");
  }
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--device ID] [--runs N] [--warmup N] [--only GROUPS] [--filter S,...]\n"
               "          [--quick] [--no-torch] [--no-compile] [--python EXE] "
               "[--torch-script PATH]\n"
               "GROUPS: comma-separated of elementwise (ew), gemm, conv, pool, cpu; new = "
               "gemm,conv,pool,cpu; all\n",
               argv0);
  return 2;
}

}  // namespace

bool options::wants_group(const std::string& g) const {
  return groups.empty() || std::find(groups.begin(), groups.end(), g) != groups.end();
}

bool options::wants_case(const std::string& name) const {
  if (filter.empty()) return true;
  for (const std::string& f : filter)
    if (name.find(f) != std::string::npos) return true;
  return false;
}

void add_result(const result& r) {
  std::printf("%-52s %10.3f ms %10.2f %-7s %s\n", r.name.c_str(), r.ms, r.value, r.unit.c_str(),
              r.note.c_str());
  std::fflush(stdout);
  results.push_back(r);
}

double median_ms(kiln::queue& q, const options& o, const std::function<void()>& work) {
  for (int i = 0; i < std::max(o.warmup, 1); ++i) work();
  q.finish();
  std::vector<double> ms;
  for (int i = 0; i < std::max(o.runs, 1); ++i) {
    kiln::event start = q.record();
    work();
    kiln::event stop = q.record();
    stop.wait();
    ms.push_back(kiln::elapsed_ms(start, stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

kiln::tensor uniform(const kiln::device& dev, const kiln::shape_t& shape, unsigned seed) {
  return kiln::tensor::rand(dev, shape, seed);
}

}  // namespace kiln_bench_tensor

int main(int argc, char** argv) {
  using namespace kiln_bench_tensor;
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has_value = i + 1 < argc;
    if (a == "--device" && has_value)
      o.device = argv[++i];
    else if (a == "--runs" && has_value)
      o.runs = std::atoi(argv[++i]);
    else if (a == "--warmup" && has_value)
      o.warmup = std::atoi(argv[++i]);
    else if (a == "--only" && has_value) {
      for (const std::string& g : split(argv[++i])) {
        if (g == "all") {
          o.groups = all_groups();
        } else if (g == "new") {
          for (const char* n : {"gemm", "conv", "pool", "cpu"}) o.groups.push_back(n);
        } else if (g == "ew") {
          o.groups.push_back("elementwise");
        } else if (std::find(all_groups().begin(), all_groups().end(), g) != all_groups().end()) {
          o.groups.push_back(g);
        } else {
          std::fprintf(stderr, "bench_tensor: unknown group '%s'\n", g.c_str());
          return usage(argv[0]);
        }
      }
    } else if (a == "--filter" && has_value)
      o.filter = split(argv[++i]);
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--no-compile")
      o.compile = false;
    else if (a == "--python" && has_value)
      o.python = argv[++i];
    else if (a == "--torch-script" && has_value)
      o.script = argv[++i];
    else
      return usage(argv[0]);
  }
  const kiln::device dev = o.device.empty() ? kiln::device::best() : kiln::device::get(o.device);
  const bool gpu = dev.info().type == kiln::device_type::gpu;
  const char* lib = kiln::linalg::vendor_library(dev);
  std::printf("device %s (%s), linalg library: %s%s\n", dev.id().c_str(), dev.info().name.c_str(),
              *lib ? lib : "none (portable kernels)", o.quick ? "; --quick: tiny sizes" : "");

  std::vector<std::string> ran;  // the groups PyTorch repeats, in run order
  int failures = 0;
  for (const std::string& g : all_groups()) {
    if (!o.wants_group(g)) continue;
    if ((g == "gemm" || g == "conv" || g == "pool") && !gpu && !o.quick) {
      std::printf(
          "-- %s: skipped, %s is not a GPU (the cpu group has the CPU sizes; --quick "
          "runs tiny sizes anywhere)\n",
          g.c_str(), dev.id().c_str());
      continue;
    }
    try {
      if (g == "elementwise")
        run_elementwise(dev, o);
      else if (g == "gemm")
        run_gemm(dev, o);
      else if (g == "conv")
        run_conv(dev, o);
      else if (g == "pool")
        run_pool(dev, o);
      else if (g == "cpu")
        run_cpu(kiln::device::get("cpu"), o);
    } catch (const std::exception& e) {
      std::printf("-- %s: FAILED: %s\n", g.c_str(), e.what());
      ++failures;
    }
    ran.push_back(g);  // PyTorch runs a group that failed here too: its rows print alone
  }
  if (o.torch && !ran.empty())
    print_merged(run_torch(o, ran, gpu));
  else
    print_merged({});
  return failures ? 1 : 0;
}
