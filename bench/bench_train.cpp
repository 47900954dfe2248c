// Training benchmarks beside PyTorch (bench/torch_train.py runs the same cases in the same
// run and is merged): a training step (zero_grad, forward, cross-entropy, backward, Adam step)
// of the reference MLP and LeNet at batch 64 and 256, images/s over an 8,000-image epoch, the
// Adam step over 100M parameters against a device copy, peak device memory of a step, and the
// steps on the CPU.
//
//   build/bin/bench_train [--device ID] [--runs N] [--warmup N] [--only mlp,lenet,adam,memory,cpu]
//                         [--quick] [--no-torch] [--no-compile] [--python EXE]
//
// Steps are timed by wall clock around the step, synchronised at its end (a step is host-driven:
// the per-kernel overhead is what is measured), median of --runs after --warmup.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <kiln/nn.hpp>
#include <kiln/nn/models.hpp>
#include <kiln/optim.hpp>
#include <kiln/tensor/inplace.hpp>
#include <map>
#include <string>
#include <vector>

#include "torch_peer.hpp"

namespace {

using kiln::tensor;
using clock_type = std::chrono::steady_clock;

struct options {
  std::string device;
  int runs = 50, warmup = 10;
  bool quick = false, torch = true, compile = true;
  std::vector<std::string> groups;
  std::string python = "python3", script = "bench/torch_train.py";
  bool wants(const std::string& g) const {
    return groups.empty() || std::find(groups.begin(), groups.end(), g) != groups.end();
  }
};

struct row {
  std::string group, name, unit, note;
  double value = 0;
};
std::vector<row> rows;

void add(const row& r) {
  rows.push_back(r);
  std::printf("  %-7s %-22s %12.3f %-9s %s\n", r.group.c_str(), r.name.c_str(), r.value,
              r.unit.c_str(), r.note.c_str());
  std::fflush(stdout);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Median wall-clock ms of work() synchronised on dev, after warm-up.
double median_ms(const kiln::device& dev, int warmup, int runs, const std::function<void()>& work) {
  for (int i = 0; i < warmup; ++i) work();
  dev.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = clock_type::now();
    work();
    dev.synchronize();
    ms.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  }
  return median(ms);
}

struct trainer {
  kiln::nn::sequential model;
  kiln::optim::optimizer opt;
  trainer(const kiln::device& dev, const std::string& which)
      : model(which == "mlp" ? kiln::nn::models::mlp(dev) : kiln::nn::models::lenet(dev)),
        opt(kiln::optim::adam(model.parameters(), {.lr = 1e-3})) {}
  void step(const tensor& x, const tensor& y) {
    opt.zero_grad();
    kiln::nn::cross_entropy(model(x), y).backward();
    opt.step();
  }
};

tensor inputs(const kiln::device& dev, const std::string& which, std::int64_t b, unsigned seed) {
  return which == "mlp" ? tensor::randn(dev, {b, 784}, seed)
                        : tensor::randn(dev, {b, 1, 28, 28}, seed);
}
tensor labels(const kiln::device& dev, std::int64_t b, unsigned seed) {
  return (tensor::rand(dev, {b}, seed) * 10.f).to(kiln::scalar_type::i64);
}

void run_model(const kiln::device& dev, const options& o, const std::string& which,
               const std::string& group, const std::string& prefix) {
  kiln::nn::manual_seed(0);
  trainer t(dev, which);
  for (std::int64_t b : {64, 256}) {
    const tensor x = inputs(dev, which, b, 1).eval(), y = labels(dev, b, 2).eval();
    const double ms = median_ms(dev, o.warmup, o.runs, [&] { t.step(x, y); });
    add({group, prefix + "step_b" + std::to_string(b), "ms", dev.id(), ms});
  }
  if (group == "cpu") return;
  // An epoch of 8,000 device-resident images at batch 256 (31 full batches and one of 64).
  std::vector<std::pair<tensor, tensor>> batches;
  for (std::int64_t at = 0, k = 0; at < 8000; at += 256, ++k) {
    const std::int64_t b = std::min<std::int64_t>(256, 8000 - at);
    batches.emplace_back(inputs(dev, which, b, unsigned(10 + k)).eval(),
                         labels(dev, b, unsigned(100 + k)).eval());
  }
  const int epochs = o.quick ? 1 : 5;
  const double ms = median_ms(dev, 1, epochs, [&] {
    for (auto& [x, y] : batches) t.step(x, y);
  });
  add({group, "epoch_images_per_s", "images/s", "8000 images, batch 256", 8000 / (ms * 1e-3)});
}

void run_memory(const kiln::device& dev, const std::string& which) {
  kiln::nn::manual_seed(0);
  trainer t(dev, which);
  const tensor x = inputs(dev, which, 256, 1).eval(), y = labels(dev, 256, 2).eval();
  t.step(x, y);
  dev.synchronize();
  dev.reset_peak_memory();
  const double base = double(dev.memory_usage().in_use) * 1e-6;
  t.step(x, y);
  dev.synchronize();
  const double peak = double(dev.memory_usage().peak) * 1e-6;
  add({"memory", which + "_peak_step_b256", "MB", "", peak});
  add({"memory", which + "_baseline_b256", "MB", "", base});
}

void run_adam(const kiln::device& dev, const options& o) {
  const std::int64_t per = o.quick ? 1 << 20 : 10 << 20, count = 10;
  const std::string label = o.quick ? "10M" : "100M";
  std::vector<tensor> params;
  for (std::int64_t i = 0; i < count; ++i) {
    tensor p = (tensor::rand(dev, {per}, unsigned(i + 1)) - 0.5f).eval();
    params.push_back(p.requires_grad_());
  }
  kiln::optim::optimizer opt = kiln::optim::adam(params, {.lr = 1e-3});
  {
    kiln::no_grad off;
    for (std::int64_t i = 0; i < count; ++i)
      kiln::copy_(params[std::size_t(i)].grad(), tensor::rand(dev, {per}, unsigned(50 + i)));
  }
  const double n = double(per * count);
  const double ms = median_ms(dev, o.warmup, o.runs, [&] { opt.step(); });
  const auto launches = kiln::last_tensor_stats().kernel_launches;
  tensor src = tensor::rand(dev, {per * count}, 7).eval(), dst = tensor::empty(dev, {per * count});
  const double copy_ms = median_ms(dev, o.warmup, o.runs, [&] { kiln::copy_(dst, src); });
  const double copy_gbs = 8 * n / (copy_ms * 1e-3) * 1e-9, adam_gbs = 28 * n / (ms * 1e-3) * 1e-9;
  add({"adam", "copy_" + label, "GB/s", "read + write", copy_gbs});
  char note[96];
  std::snprintf(note, sizeof note, "%.3f ms, %.0f%% of copy, %llu launch(es)", ms,
                100 * adam_gbs / copy_gbs, (unsigned long long)launches);
  add({"adam", "adam_" + label, "GB/s", note, adam_gbs});
}

void print_merged(const std::vector<kiln_bench::torch_row>& torch) {
  std::map<std::string, double> eager, compiled;
  for (const auto& t : torch)
    (t.variant == "compile" ? compiled : eager)[t.group + "|" + t.name] = t.value;
  // Speed-up: above 1 is Kiln better (time and memory: PyTorch / Kiln; rates: Kiln / PyTorch).
  const auto ratio = [](const row& r, double p) {
    if (p <= 0 || r.value <= 0) return std::string("—");
    const bool lower_better = r.unit == "ms" || r.unit == "MB";
    char b[32];
    std::snprintf(b, sizeof b, "%.2f", lower_better ? p / r.value : r.value / p);
    return std::string(b);
  };
  const auto val = [](const std::map<std::string, double>& m, const std::string& k) {
    const auto it = m.find(k);
    return it == m.end() ? 0.0 : it->second;
  };
  std::printf("\n== Kiln beside PyTorch (x: above 1 is Kiln better)\n\n");
  std::printf(
      "| group | case | unit | Kiln | PyTorch eager | x eager | torch.compile | x compile |\n");
  std::printf("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const row& r : rows) {
    const std::string k = r.group + "|" + r.name;
    const double e = val(eager, k), c = val(compiled, k);
    std::printf("| %s | %s | %s | %.3f | %s | %s | %s | %s |\n", r.group.c_str(), r.name.c_str(),
                r.unit.c_str(), r.value, e > 0 ? std::to_string(e).c_str() : "—",
                ratio(r, e).c_str(), c > 0 ? std::to_string(c).c_str() : "—", ratio(r, c).c_str());
  }
}

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s [--device ID] [--runs N] [--warmup N] [--only mlp,lenet,adam,memory,cpu]\n"
      "          [--quick] [--no-torch] [--no-compile] [--python EXE]\n",
      argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--device" && has)
      o.device = argv[++i];
    else if (a == "--runs" && has)
      o.runs = std::atoi(argv[++i]);
    else if (a == "--warmup" && has)
      o.warmup = std::atoi(argv[++i]);
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--no-compile")
      o.compile = false;
    else if (a == "--python" && has)
      o.python = argv[++i];
    else if (a == "--only" && has)
      o.groups = kiln_bench::split(argv[++i]);
    else
      return usage(argv[0]);
  }
  if (o.quick) o.runs = std::min(o.runs, 5), o.warmup = std::min(o.warmup, 3);
  try {
    const kiln::device dev = o.device.empty() ? kiln::device::best() : kiln::device::get(o.device);
    const bool gpu = dev.info().type == kiln::device_type::gpu;
    std::printf("bench_train on %s (%s)\n", dev.id().c_str(), dev.info().name.c_str());
    std::vector<std::string> ran;
    for (const std::string m : {"mlp", "lenet"})
      if (o.wants(m)) run_model(dev, o, m, m, ""), ran.push_back(m);
    if (o.wants("adam")) run_adam(dev, o), ran.push_back("adam");
    if (o.wants("memory") && gpu) {
      run_memory(dev, "mlp");
      run_memory(dev, "lenet");
      ran.push_back("memory");
    }
    if (o.wants("cpu")) {
      const kiln::device cpu = kiln::device::get("cpu");
      for (const std::string m : {"mlp", "lenet"}) run_model(cpu, o, m, "cpu", m + "_");
      ran.push_back("cpu");
    }
    if (o.torch && std::filesystem::exists(o.script)) {
      std::string cmd = o.python + " " + kiln_bench::shell_quote(o.script) + " --tsv --device " +
                        (gpu ? "cuda" : "cpu") + " --runs " + std::to_string(o.runs) +
                        " --warmup " + std::to_string(o.warmup) + " --only " +
                        kiln_bench::join(ran);
      if (o.quick) cmd += " --quick";
      if (!o.compile) cmd += " --no-compile";
      print_merged(kiln_bench::run_torch_rows(cmd));
    } else {
      print_merged({});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
