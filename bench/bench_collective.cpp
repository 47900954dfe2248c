// Collectives beside their peers, in one run: all-reduce bus bandwidth over sizes on every GPU
// of this process (kiln::collective over NCCL, one thread per GPU), beside PyTorch's
// torch.distributed all_reduce (bench/torch_collective.py, one process per GPU, NCCL) and, when
// given, NCCL's own nccl-tests all_reduce_perf; then data-parallel training throughput
// (kiln::nn::data_parallel, synthetic MNIST-shaped data) of LeNet (launch-bound) and the wide MLP
// (10M parameters: communication matters) on 1 GPU against N GPUs, with the ranks as threads of
// this process and as processes of their own (this program again with --rank, joined by an NCCL
// id, as under mpirun), beside PyTorch DDP on 1 and N GPUs (bench/torch_collective.py --train).
//
//   build/bin/bench_collective [--min-bytes B] [--max-bytes B] [--iters N] [--warmup N]
//                              [--batch N] [--steps N] [--only allreduce,train] [--quick]
//                              [--model lenet,mlp_wide,mlp] [--no-processes] [--graph]
//                              [--no-torch] [--python EXE] [--nccl-tests PATH/all_reduce_perf]
//                              [--no-overlap] [--bucket-mb MB]
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
#include <cstdlib>
#include <filesystem>
#include <kiln/collective.hpp>
#include <kiln/nn.hpp>
#include <kiln/nn/data_parallel.hpp>
#include <kiln/nn/models.hpp>
#include <kiln/optim.hpp>
#include <kiln/step_graph.hpp>
#include <kiln/tensor/inplace.hpp>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "torch_peer.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using kiln::tensor;
using kiln::collective::communicator;

struct options {
  std::uint64_t min_bytes = 8, max_bytes = 1ull << 30;
  int iters = 20, warmup = 5, batch = 256, steps = 100;
  bool quick = false, torch = true, processes = true, graph = false;
  bool overlap = true;   // --no-overlap: every bucket's all-reduce in step(), after backward
  double bucket_mb = 0;  // --bucket-mb: data_parallel's bucket_bytes (0: automatic)
  std::vector<std::string> groups, models{"lenet", "mlp_wide"};
  int rank = -1, ranks = 0;  // --rank: this process is one rank of train_processes
  std::string nccl_id;
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

tensor inputs(const kiln::device& dev, const std::string& model, std::int64_t b, unsigned seed) {
  kiln::shape_t shape{b};
  for (std::int64_t d : kiln::nn::models::sample_shape(model)) shape.push_back(d);
  return tensor::randn(dev, shape, seed).eval();
}
tensor labels(const kiln::device& dev, std::int64_t b, unsigned seed) {
  return (tensor::rand(dev, {b}, seed) * 10.f).to(kiln::scalar_type::i64).eval();
}

// Waits until every rank's queued work is done: a one-element all-reduce, then the device.
// Through the communicator, so it serves ranks in threads and in processes alike.
void rank_barrier(communicator& c) {
  tensor one = tensor::ones(c.get_device(), {1});
  c.all_reduce(one, kiln::collective::reduce_op::sum);
  c.get_device().synchronize();
}

// Milliseconds of o.steps training steps of `model` (SGD with momentum) at o.batch per rank,
// after o.warmup warm-up steps, on the slowest rank (every rank returns it). Through data_parallel,
// or (plain: one rank only) without it, the baseline of data_parallel's own cost. Nothing in
// the timed loop reads the device: the host threads run ahead as far as the queues let them.
double rank_train_ms(communicator& c, const std::string& model, const options& o, bool plain) {
  const kiln::device& dev = c.get_device();
  kiln::nn::manual_seed(0);
  kiln::nn::sequential net = kiln::nn::models::by_name(model, dev);
  auto opt = kiln::optim::sgd(net.parameters(), {.lr = 0.01, .momentum = 0.9});
  std::optional<kiln::nn::data_parallel> ddp;
  if (!plain)
    ddp.emplace(net, opt, c,
                kiln::nn::data_parallel_options{
                    .bucket_bytes = static_cast<std::uint64_t>(o.bucket_mb * (1 << 20)),
                    .overlap = o.overlap});
  std::vector<std::pair<tensor, tensor>> batches;
  for (int k = 0; k < 8; ++k)
    batches.emplace_back(inputs(dev, model, o.batch, unsigned(10 + k + 100 * c.rank())),
                         labels(dev, o.batch, unsigned(200 + k + 100 * c.rank())));
  auto eager = [&](const tensor& x, const tensor& y) {
    opt.zero_grad();
    tensor loss = kiln::nn::cross_entropy(ddp ? (*ddp)(x) : net(x), y);
    loss.backward();
    if (ddp)
      ddp->step();
    else
      opt.step();
    return loss;
  };
  // --graph: the step captured once and replayed (kiln::step_graph); each step first copies its
  // batch into the captured inputs, as a training loop does.
  tensor sx = (batches[0].first + 0.f).eval(), sy = (batches[0].second + std::int64_t(0)).eval();
  std::optional<kiln::step_graph> graph;
  if (o.graph) graph.emplace(dev, [&] { return std::vector<tensor>{eager(sx, sy)}; });
  auto step = [&](int k) {
    auto& [x, y] = batches[k % batches.size()];
    if (!graph) {
      eager(x, y);
      return;
    }
    kiln::copy_(sx, x);
    kiln::copy_(sy, y);
    graph->run();
  };
  for (int k = 0; k < o.warmup; ++k) step(k);
  if (graph && c.rank() == 0 && graph->kind() != kiln::replay_kind::cuda_graph)
    std::fprintf(stderr, "  --graph: %s runs eagerly: %s\n", model.c_str(),
                 graph->reason().c_str());
  rank_barrier(c);
  const auto t0 = clock_type::now();
  for (int k = 0; k < o.steps; ++k) step(k);
  const double enqueued = ms_since(t0);
  dev.synchronize();
  const double mine = ms_since(t0);
  // The host's share: near `mine`, the step is bound by the host thread (launches or waits).
  if (std::getenv("KILN_BENCH_HOST_TIMES"))
    std::fprintf(stderr, "  %s rank %d/%d %s: host %.2f ms, device done %.2f ms (%d steps)\n",
                 model.c_str(), c.rank(), c.size(), plain ? "plain" : "ddp", enqueued, mine,
                 o.steps);
  tensor worst = tensor::from(dev, std::vector<float>{float(mine)});
  c.all_reduce(worst, kiln::collective::reduce_op::max);
  return worst.item<float>();
}

double images_per_s(const options& o, int ranks, double ms) {
  return static_cast<double>(ranks) * o.batch * o.steps / (ms * 1e-3);
}

// Every rank a thread of this process (kiln::collective::run_per_rank).
double train_threads(const std::vector<kiln::device>& devs, const std::string& model,
                     const options& o, bool plain = false) {
  auto comms = communicator::create(devs);
  double ms = 0;
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const double t = rank_train_ms(c, model, o, plain);
    if (c.rank() == 0) ms = t;
  });
  return images_per_s(o, static_cast<int>(devs.size()), ms);
}

std::string hex(const kiln::collective::unique_id& id) {
  std::string s;
  char b[3];
  for (std::uint8_t v : id) {
    std::snprintf(b, sizeof b, "%02x", v);
    s += b;
  }
  return s;
}

kiln::collective::unique_id unhex(const std::string& s) {
  kiln::collective::unique_id id{};
  if (s.size() != 2 * id.size()) throw std::invalid_argument("--nccl-id: not 256 hex digits");
  for (std::size_t i = 0; i < id.size(); ++i)
    id[i] = static_cast<std::uint8_t>(std::stoul(s.substr(2 * i, 2), nullptr, 16));
  return id;
}

// Every rank a process of its own (this program again, with --rank), joined by an NCCL id made
// here: what `mpirun -np N` gives, without MPI. Each child prints "RANK_MS <ms>".
double train_processes(int ranks, const std::string& model, const options& o) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string id = hex(communicator::make_unique_id(kiln::device::get("cuda:0")));
  std::vector<std::FILE*> children;
  for (int r = 0; r < ranks; ++r) {
    const std::string cmd = kiln_bench::shell_quote(self) + " --rank " + std::to_string(r) +
                            " --ranks " + std::to_string(ranks) + " --nccl-id " + id + " --model " +
                            model + " --batch " + std::to_string(o.batch) + " --steps " +
                            std::to_string(o.steps) + " --warmup " + std::to_string(o.warmup) +
                            (o.graph ? " --graph" : "") + (o.overlap ? "" : " --no-overlap") +
                            " --bucket-mb " + std::to_string(o.bucket_mb) + " 2>&1";
    children.push_back(popen(cmd.c_str(), "r"));
    if (!children.back()) throw std::runtime_error("could not start " + self);
  }
  double ms = 0;
  bool failed = false;
  for (std::FILE* p : children) {
    char line[1024];
    bool got = false;
    while (std::fgets(line, sizeof line, p)) {
      double v = 0;
      if (std::sscanf(line, "RANK_MS %lf", &v) == 1) {
        ms = std::max(ms, v);
        got = true;
      } else {
        std::printf("  rank process| %s", line);
      }
    }
    failed |= pclose(p) != 0 || !got;
  }
  if (failed) throw std::runtime_error("a rank process failed (its output is above)");
  return images_per_s(o, ranks, ms);
}

// The child side of train_processes: one rank on cuda:<rank>.
int run_rank_process(const options& o) {
  const kiln::device dev = kiln::device::get("cuda:" + std::to_string(o.rank));
  communicator c = communicator::create(dev, unhex(o.nccl_id), o.ranks, o.rank);
  const double ms = rank_train_ms(c, o.models.front(), o, false);
  std::printf("RANK_MS %.6f\n", ms);
  return 0;
}

// PyTorch DDP on 1 and N GPUs (bench/torch_collective.py --train): model -> {1 GPU, N GPUs}.
std::map<std::string, std::pair<double, double>> torch_ddp(const options& o, int n) {
  std::map<std::string, std::pair<double, double>> out;
  const std::string cmd = o.python + " " + kiln_bench::shell_quote(o.script) + " --tsv" +
                          " --gpus " + std::to_string(n) + " --train " +
                          kiln_bench::join(o.models) + " --batch " + std::to_string(o.batch) +
                          " --steps " + std::to_string(o.steps) + " --warmup " +
                          std::to_string(o.warmup);
  for (const auto& r : kiln_bench::run_torch_rows(cmd)) {
    if (r.group != "train") continue;
    // name: "<model>_<gpus>gpu"
    const std::size_t cut = r.name.rfind('_');
    if (cut == std::string::npos) continue;
    const std::string m = r.name.substr(0, cut);
    (r.name.substr(cut + 1) == "1gpu" ? out[m].first : out[m].second) = r.value;
  }
  return out;
}

std::string ratio(double a, double b) {
  if (a <= 0 || b <= 0) return "—";
  char s[32];
  std::snprintf(s, sizeof s, "%.2fx", a / b);
  return s;
}
std::string rate(double v) {
  if (v <= 0) return "—";
  char s[32];
  std::snprintf(s, sizeof s, "%.0f", v);
  return s;
}

void run_train(const options& o) {
  const std::vector<kiln::device> devs = group_devices();
  const int n = static_cast<int>(devs.size());
  const bool gpus = devs.front().backend() == "cuda";
  const bool procs = gpus && o.processes && n > 1;
  std::map<std::string, std::pair<double, double>> peer;
  if (o.torch && gpus && std::filesystem::exists(o.script)) peer = torch_ddp(o, n);
  std::printf(
      "\n| model (batch %d per rank) | parameters | plain, 1 GPU | data_parallel, 1 rank | %d "
      "ranks, threads | speed-up | %d ranks, processes | speed-up | PyTorch DDP 1 GPU | "
      "PyTorch DDP %d GPUs | speed-up |\n| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
      "| ---: | ---: | ---: |\n",
      o.batch, n, n, n);
  std::fflush(stdout);
  for (const std::string& m : o.models) {
    kiln::nn::manual_seed(0);
    const std::int64_t params = kiln::nn::models::by_name(m, devs.front()).parameter_count();
    const double plain = train_threads({devs.front()}, m, o, true);
    const double single = train_threads({devs.front()}, m, o);
    const double threads = train_threads(devs, m, o);
    const double processes = procs ? train_processes(n, m, o) : 0;
    const auto it = peer.find(m);
    const double t1 = it == peer.end() ? 0 : it->second.first;
    const double tn = it == peer.end() ? 0 : it->second.second;
    std::printf("| %s | %lld | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", m.c_str(),
                static_cast<long long>(params), rate(plain).c_str(), rate(single).c_str(),
                rate(threads).c_str(), ratio(threads, single).c_str(), rate(processes).c_str(),
                ratio(processes, single).c_str(), rate(t1).c_str(), rate(tn).c_str(),
                ratio(tn, t1).c_str());
    std::fflush(stdout);
  }
  std::printf(
      "\nimages/s over %d steps after %d warm-up steps, SGD (lr 0.01, momentum 0.9), synthetic "
      "MNIST-shaped data; speed-up: %d ranks against data_parallel on 1 rank (target >= 1.8x on 2 "
      "GPUs)\n",
      o.steps, o.warmup, n);
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--min-bytes B] [--max-bytes B] [--iters N] [--warmup N] [--batch N]\n"
               "          [--steps N] [--only allreduce,train] [--model lenet,mlp_wide,mlp]\n"
               "          [--no-processes] [--graph] [--quick] [--no-torch] [--python EXE]\n"
               "          [--nccl-tests PATH] [--no-overlap] [--bucket-mb MB]\n",
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
    else if (a == "--model" && has)
      o.models = kiln_bench::split(argv[++i]);
    else if (a == "--no-processes")
      o.processes = false;
    else if (a == "--graph")
      o.graph = true;
    else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--bucket-mb" && has)
      o.bucket_mb = std::atof(argv[++i]);
    else if (a == "--rank" && has)
      o.rank = std::atoi(argv[++i]);
    else if (a == "--ranks" && has)
      o.ranks = std::atoi(argv[++i]);
    else if (a == "--nccl-id" && has)
      o.nccl_id = argv[++i];
    else
      return usage(argv[0]);
  }
  if (o.models.empty() || o.batch < 1 || o.steps < 1) return usage(argv[0]);
  for (const std::string& m : o.models)
    if (m != "lenet" && m != "mlp" && m != "mlp_wide") {
      std::fprintf(stderr, "bench_collective: no model \"%s\" (lenet, mlp, mlp_wide)\n", m.c_str());
      return 2;
    }
  if (o.rank >= 0) {
    if (o.rank >= o.ranks || o.nccl_id.empty() || o.models.size() != 1) return usage(argv[0]);
    try {
      return run_rank_process(o);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "bench_collective rank %d: %s\n", o.rank, e.what());
      return 1;
    }
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
