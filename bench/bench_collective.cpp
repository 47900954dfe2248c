// Collectives beside their peers, in one run: all-reduce bus bandwidth over sizes on every GPU
// of this process (kiln::collective over NCCL, one thread per GPU), beside PyTorch's
// torch.distributed all_reduce (bench/torch_collective.py, one process per GPU, NCCL) and, when
// given, NCCL's own nccl-tests all_reduce_perf; then data-parallel training throughput of the
// LeNet on 1 GPU against N GPUs (kiln::nn::data_parallel), synthetic MNIST-shaped data.
//
//   build/bin/bench_collective [--min-bytes B] [--max-bytes B] [--iters N] [--warmup N]
//                              [--batch N] [--steps N] [--only allreduce,train] [--quick]
//                              [--no-torch] [--python EXE] [--nccl-tests PATH/all_reduce_perf]
//
// Bandwidths as nccl-tests defines them: algbw = bytes / time, busbw = algbw * 2 (n - 1) / n
// (what each link carries in a ring all-reduce). Targets (issue 15): busbw >= 0.9x the peer's,
// training on 2 GPUs >= 1.8x one GPU's images/s. On the CPU (no GPU) the same code runs a host
// group of 2 ranks, for a smoke test only.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <kiln/collective.hpp>
#include <kiln/nn.hpp>
#include <kiln/nn/data_parallel.hpp>
#include <kiln/nn/models.hpp>
#include <kiln/optim.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "torch_peer.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using kiln::tensor;
using kiln::collective::communicator;

struct options {
  std::uint64_t min_bytes = 8, max_bytes = 1ull << 30;
  int iters = 20, warmup = 5, batch = 256, steps = 30;
  bool quick = false, torch = true;
  std::vector<std::string> groups;
  std::string python = "python3", script = "bench/torch_collective.py", nccl_tests;
  bool wants(const std::string& g) const {
    return groups.empty() || std::find(groups.begin(), groups.end(), g) != groups.end();
  }
};

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

std::vector<kiln::device> group_devices() {
  std::vector<kiln::device> gpus;
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() == "cuda") gpus.push_back(d);
  if (!gpus.empty()) return gpus;
  return {kiln::device::get("cpu"), kiln::device::get("cpu")};  // smoke test
}

// bytes -> {algbw, busbw} in GB/s, for the n ranks of comms (float32 sum, in place).
std::map<std::uint64_t, std::pair<double, double>> kiln_allreduce(std::vector<communicator>& comms,
                                                                  const options& o) {
  const int n = static_cast<int>(comms.size());
  std::map<std::uint64_t, std::pair<double, double>> out;
  std::barrier sync(n);
  std::vector<double> ms(n);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    kiln::queue q(dev);
    kiln::buffer<float> buf(dev, std::max<std::uint64_t>(o.max_bytes / 4, 1));
    buf.fill(1.f);
    for (std::uint64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
      const auto view = buf.subview(0, std::max<std::uint64_t>(bytes / 4, 1));
      for (int i = 0; i < o.warmup; ++i) c.all_reduce(view, kiln::collective::reduce_op::sum, &q);
      q.finish();
      sync.arrive_and_wait();
      const auto t0 = clock_type::now();
      for (int i = 0; i < o.iters; ++i) c.all_reduce(view, kiln::collective::reduce_op::sum, &q);
      q.finish();
      ms[c.rank()] = ms_since(t0) / o.iters;
      sync.arrive_and_wait();
      if (c.rank() == 0) {
        const double t = *std::max_element(ms.begin(), ms.end()) * 1e-3;
        const double alg = static_cast<double>(view.bytes()) / t * 1e-9;
        out[view.bytes()] = {alg, alg * 2.0 * (n - 1) / n};
      }
      sync.arrive_and_wait();
    }
  });
  return out;
}

// nccl-tests' all_reduce_perf: "size count type redop root time algbw busbw #wrong ..." rows
// (out-of-place columns first); returns bytes -> busbw.
std::map<std::uint64_t, double> nccl_tests_allreduce(const options& o, int n) {
  std::map<std::uint64_t, double> out;
  if (o.nccl_tests.empty()) return out;
  const std::string cmd = kiln_bench::shell_quote(o.nccl_tests) + " -b " +
                          std::to_string(o.min_bytes) + " -e " + std::to_string(o.max_bytes) +
                          " -f 4 -g " + std::to_string(n) + " -n " + std::to_string(o.iters) +
                          " -w " + std::to_string(o.warmup) + " 2>&1";
  std::printf("\n== nccl-tests: %s\n", cmd.c_str());
  std::FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    unsigned long long size = 0, count = 0;
    char type[32], op[32];
    int root = 0;
    double time_us = 0, alg = 0, bus = 0;
    if (std::sscanf(line, "%llu %llu %31s %31s %d %lf %lf %lf", &size, &count, type, op, &root,
                    &time_us, &alg, &bus) == 8)
      out[size] = bus;
    else
      std::printf("  nccl-tests| %s", line);
  }
  pclose(p);
  return out;
}

void run_allreduce(const options& o) {
  const std::vector<kiln::device> devs = group_devices();
  auto comms = communicator::create(devs);
  std::printf("all_reduce (f32 sum, in place) on %zu ranks (%s) through %s\n", devs.size(),
              devs.front().id().c_str(), comms.front().transport().c_str());
  const auto kiln_rows = kiln_allreduce(comms, o);
  std::map<std::uint64_t, double> torch_bus;
  if (o.torch && std::filesystem::exists(o.script) && devs.front().backend() == "cuda") {
    const std::string cmd = o.python + " " + kiln_bench::shell_quote(o.script) + " --tsv" +
                            " --gpus " + std::to_string(devs.size()) + " --min-bytes " +
                            std::to_string(o.min_bytes) + " --max-bytes " +
                            std::to_string(o.max_bytes) + " --iters " + std::to_string(o.iters) +
                            " --warmup " + std::to_string(o.warmup);
    for (const auto& r : kiln_bench::run_torch_rows(cmd))
      if (r.group == "allreduce") torch_bus[std::stoull(r.name)] = r.value;
  }
  const auto nccl_bus = nccl_tests_allreduce(o, static_cast<int>(devs.size()));
  std::printf(
      "\n| bytes | Kiln algbw GB/s | Kiln busbw GB/s | PyTorch busbw | x PyTorch | "
      "nccl-tests busbw | x nccl-tests |\n| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  auto cell = [](const std::map<std::uint64_t, double>& m, std::uint64_t b, double mine) {
    auto it = m.find(b);
    if (it == m.end() || it->second <= 0) return std::string("— | —");
    char s[64];
    std::snprintf(s, sizeof s, "%.2f | %.2f", it->second, mine / it->second);
    return std::string(s);
  };
  for (const auto& [bytes, bw] : kiln_rows)
    std::printf("| %llu | %.2f | %.2f | %s | %s |\n", static_cast<unsigned long long>(bytes),
                bw.first, bw.second, cell(torch_bus, bytes, bw.second).c_str(),
                cell(nccl_bus, bytes, bw.second).c_str());
  std::printf("\ntarget: busbw >= 0.9x the peer's at the large sizes\n");
}

tensor images(const kiln::device& dev, std::int64_t b, unsigned seed) {
  return tensor::randn(dev, {b, 1, 28, 28}, seed).eval();
}
tensor labels(const kiln::device& dev, std::int64_t b, unsigned seed) {
  return (tensor::rand(dev, {b}, seed) * 10.f).to(kiln::scalar_type::i64).eval();
}

// images/s of LeNet training (SGD with momentum) with `comms` ranks, each at o.batch per step;
// through data_parallel, or (plain: one rank only) without it, the baseline of its cost.
double train_throughput(std::vector<communicator>& comms, const options& o, bool plain = false) {
  const int n = static_cast<int>(comms.size());
  std::barrier sync(n);
  std::vector<double> ms(n);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    kiln::nn::manual_seed(0);
    kiln::nn::sequential model = kiln::nn::models::lenet(dev);
    auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.01, .momentum = 0.9});
    std::optional<kiln::nn::data_parallel> ddp;
    if (!plain) ddp.emplace(model, opt, c);
    std::vector<std::pair<tensor, tensor>> batches;
    for (int k = 0; k < 8; ++k)
      batches.emplace_back(images(dev, o.batch, unsigned(10 + k + 100 * c.rank())),
                           labels(dev, o.batch, unsigned(200 + k + 100 * c.rank())));
    auto step = [&](int k) {
      auto& [x, y] = batches[k % batches.size()];
      opt.zero_grad();
      kiln::nn::cross_entropy(ddp ? (*ddp)(x) : model(x), y).backward();
      if (ddp)
        ddp->step();
      else
        opt.step();
    };
    for (int k = 0; k < 3; ++k) step(k);
    dev.synchronize();
    sync.arrive_and_wait();
    const auto t0 = clock_type::now();
    for (int k = 0; k < o.steps; ++k) step(k);
    dev.synchronize();
    ms[c.rank()] = ms_since(t0);
  });
  const double total_ms = *std::max_element(ms.begin(), ms.end());
  return static_cast<double>(n) * o.batch * o.steps / (total_ms * 1e-3);
}

void run_train(const options& o) {
  const std::vector<kiln::device> devs = group_devices();
  auto one = communicator::create({devs.front()});
  const double plain = train_throughput(one, o, true);
  const double single = train_throughput(one, o);
  auto all = communicator::create(devs);
  const double many = train_throughput(all, o);
  std::printf("\n| LeNet, batch %d per rank | images/s |\n| --- | ---: |\n", o.batch);
  std::printf("| plain training, no data_parallel (%s) | %.0f |\n", devs.front().id().c_str(),
              plain);
  std::printf("| 1 rank (%s) | %.0f |\n| %zu ranks | %.0f |\n", devs.front().id().c_str(), single,
              devs.size(), many);
  std::printf("\ndata_parallel on one rank: %.3fx plain training\n", single / plain);
  std::printf("\nspeed-up %.2fx on %zu ranks (target >= 1.8x on 2 GPUs)\n", many / single,
              devs.size());
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--min-bytes B] [--max-bytes B] [--iters N] [--warmup N] [--batch N]\n"
               "          [--steps N] [--only allreduce,train] [--quick] [--no-torch]\n"
               "          [--python EXE] [--nccl-tests PATH]\n",
               argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--min-bytes" && has)
      o.min_bytes = std::stoull(argv[++i]);
    else if (a == "--max-bytes" && has)
      o.max_bytes = std::stoull(argv[++i]);
    else if (a == "--iters" && has)
      o.iters = std::atoi(argv[++i]);
    else if (a == "--warmup" && has)
      o.warmup = std::atoi(argv[++i]);
    else if (a == "--batch" && has)
      o.batch = std::atoi(argv[++i]);
    else if (a == "--steps" && has)
      o.steps = std::atoi(argv[++i]);
    else if (a == "--only" && has)
      o.groups = kiln_bench::split(argv[++i]);
    else if (a == "--quick")
      o.quick = true;
    else if (a == "--no-torch")
      o.torch = false;
    else if (a == "--python" && has)
      o.python = argv[++i];
    else if (a == "--nccl-tests" && has)
      o.nccl_tests = argv[++i];
    else
      return usage(argv[0]);
  }
  if (o.quick) {
    o.max_bytes = std::min<std::uint64_t>(o.max_bytes, 64ull << 20);
    o.iters = std::min(o.iters, 5);
    o.warmup = std::min(o.warmup, 2);
    o.steps = std::min(o.steps, 5);
  }
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes) return usage(argv[0]);
  try {
    if (o.wants("allreduce")) run_allreduce(o);
    if (o.wants("train")) run_train(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_collective: %s\n", e.what());
    return 1;
  }
  return 0;
}
