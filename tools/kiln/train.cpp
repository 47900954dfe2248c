// `kiln train`: trains the reference MLP and LeNet (kiln::nn::models; or the wide MLP, named
// alone: mlp_wide, 10M parameters) on the MNIST digits that
// scripts/fetch_mnist.sh provides (8,000 train / 2,000 test, seeded split), with a progress
// line per epoch (loss, accuracy, images/s) and a summary; optionally saves checkpoints.
// With --devices A,B,... it trains data-parallel (kiln::nn::data_parallel), one rank per device:
// every rank walks the one device's shuffled batches and trains on its slice (batch/N rows) of
// each, so N devices take the one device's steps; rank 0 reports the test accuracy. --graph
// replays each full-batch step from a capture (kiln::step_graph).
// --precision: fp32; tf32 (TensorFloat-32 in the f32 products and convolutions); bf16 or f16
// (kiln::autocast around the forward pass, f32 parameters; f16 with optim::grad_scaler).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

#include "commands.hpp"
#include "kiln/collective.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/data/mnist.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/checkpoint.hpp"
#include "kiln/nn/data_parallel.hpp"
#include "kiln/nn/models.hpp"
#include "kiln/optim.hpp"
#include "kiln/optim/grad_scaler.hpp"
#include "kiln/step_graph.hpp"
#include "kiln/tensor/inplace.hpp"
#include "kiln/tensor/linear.hpp"

namespace kiln::tool {
namespace {

struct result {
  std::string model;
  double test_accuracy = 0, final_loss = 0, images_per_s = 0, seconds = 0;
  std::int64_t parameters = 0;
  double max_rank_difference = 0;  // data parallel: largest |parameter difference| across ranks
};

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// --precision tf32: convolutions through their options; linear layers through kiln::linear
// with tf32 (nn::linear has no such option), sequentials layer by layer.
void convolutions_in_tf32(nn::module& m) {
  if (auto* c = dynamic_cast<nn::conv2d*>(&m)) c->options.tf32 = true;
  for (const auto& [name, child] : m.children()) convolutions_in_tf32(*child);
}
tensor forward_tf32(const nn::module& m, const tensor& x) {
  if (const auto* l = dynamic_cast<const nn::linear*>(&m))
    return kiln::linear(x, l->weight, l->bias, "none", {.tf32 = true});
  if (dynamic_cast<const nn::sequential*>(&m) == nullptr) return m.forward(x);
  tensor y = x;
  for (const auto& [name, child] : m.children()) y = forward_tf32(*child, y);
  return y;
}
tensor forward(const nn::module& m, const tensor& x, const train_options& o) {
  return o.precision == "tf32" ? forward_tf32(m, x) : m.forward(x);
}

// Fraction of the set the model labels correctly (eval mode, no recording, batches of 500).
double accuracy(const nn::module& model, const data::dataset& set, const device& dev,
                const shape_t& sample, const train_options& o) {
  no_grad off;
  std::int64_t correct = 0;
  const std::int64_t n = set.size(), f = set.features, step = 500;
  for (std::int64_t i = 0; i < n; i += step) {
    const std::int64_t b = std::min(step, n - i);
    shape_t shape{b};
    shape.insert(shape.end(), sample.begin(), sample.end());
    const tensor x = tensor::from(
        dev, std::span<const float>(set.images.data() + i * f, std::size_t(b * f)), shape);
    const tensor y =
        tensor::from(dev, std::span<const std::int64_t>(set.labels.data() + i, std::size_t(b)));
    correct += (forward(model, x, o).argmax(1) == y).sum().item<std::int64_t>();
  }
  return n ? double(correct) / double(n) : 0;
}

void progress(const std::string& name, int epoch, int epochs, std::int64_t done, std::int64_t total,
              double loss, double ips, bool tty) {
  if (!tty) return;
  const int width = 24, fill = total ? int(width * done / total) : width;
  std::printf("\r%-5s epoch %2d/%d [%s%s] %4lld/%lld  loss %.4f  %8.0f img/s", name.c_str(), epoch,
              epochs, std::string(std::size_t(fill), '#').c_str(),
              std::string(std::size_t(width - fill), '.').c_str(), (long long)done,
              (long long)total, loss, ips);
  std::fflush(stdout);
}

// Largest |difference| between this rank's parameters and rank 0's (data_parallel keeps them
// identical; this checks it). Every rank calls it.
double rank_difference(const nn::module& model, collective::communicator& comm) {
  double worst = 0;
  for (const tensor& p : model.parameters()) {
    const std::vector<float> a = p.detach().contiguous().to_vector<float>();
    tensor lead = tensor::from(comm.get_device(), std::span<const float>(a), p.shape());
    comm.broadcast(lead, 0);
    const std::vector<float> b = lead.to_vector<float>();
    for (std::size_t i = 0; i < a.size(); ++i)
      worst = std::max(worst, double(std::fabs(a[i] - b[i])));
  }
  return worst;
}

// Rows [lo, hi) of global batch [glo, ghi) that `rank` of `ranks` trains on: an even split, so
// the ranks' averaged gradient is the one device's gradient of the same batch.
std::pair<std::int64_t, std::int64_t> rank_rows(std::int64_t glo, std::int64_t ghi, int rank,
                                                int ranks) {
  const std::int64_t len = ghi - glo;
  return {glo + len * rank / ranks, glo + len * (rank + 1) / ranks};
}

// One epoch of a dataset on the device, in permutation(size, seed) order (data_loader's
// shuffled order for that seed): images [n, sample...] and labels [n].
struct epoch_data {
  tensor x, y;
};
epoch_data upload_epoch(const data::dataset& d, std::uint64_t seed, const device& dev,
                        const shape_t& sample) {
  const data::dataset e = data::select(d, data::permutation(d.size(), seed));
  shape_t shape{e.size()};
  shape.insert(shape.end(), sample.begin(), sample.end());
  return {tensor::from(dev, std::span<const float>(e.images), shape),
          tensor::from(dev, std::span<const std::int64_t>(e.labels), shape_t{e.size()})};
}

// Trains one model on dev; with comm, as one rank of a data-parallel group (only rank 0
// prints and evaluates).
result train_one(const std::string& name, const train_options& o, const device& dev,
                 const data::dataset& train, const data::dataset& test,
                 collective::communicator* comm = nullptr) {
  const int ranks = comm ? comm->size() : 1;
  const bool lead = !comm || comm->rank() == 0;
  nn::manual_seed(o.seed);
  nn::sequential model =
      name == "lenet" ? nn::models::lenet(dev, o.batch_norm) : nn::models::by_name(name, dev);
  const shape_t sample = nn::models::sample_shape(name);
  if (o.precision == "tf32") convolutions_in_tf32(model);
  optim::optimizer opt = optim::adam(model.parameters(), {.lr = o.lr});
  std::unique_ptr<nn::data_parallel> ddp;
  if (comm) ddp = std::make_unique<nn::data_parallel>(model, opt, *comm);
  std::unique_ptr<optim::grad_scaler> scaler;
  if (o.precision == "f16") {
    if (comm)
      throw invalid_argument(
          "kiln train: --precision f16 with --devices is not supported yet "
          "(loss scaling across ranks); use bf16");
    scaler = std::make_unique<optim::grad_scaler>();
  }
  // Every rank walks the one device's batches (the same shuffled order) and trains on its
  // slice of each, so N devices compute the one device's steps. A last batch too small to give
  // every rank a row is left out.
  const std::int64_t n = train.size(), rank = comm ? comm->rank() : 0;
  std::int64_t batches = (n + o.batch - 1) / o.batch;
  if (n % o.batch != 0 && n % o.batch < ranks) --batches;
  if (o.max_steps > 0) batches = std::min(batches, o.max_steps);
  // One training step on a batch; with --graph, captured on the first full batch's shape.
  auto step = [&](const tensor& x, const tensor& y) {
    opt.zero_grad();
    tensor loss;
    {
      std::optional<kiln::autocast> mixed;
      if (o.precision == "bf16" || o.precision == "f16")
        mixed.emplace(o.precision == "f16" ? scalar_type::f16 : scalar_type::bf16);
      // data_parallel's forward is the model's (its work is in backward and step).
      loss = nn::cross_entropy(forward(model, x, o), y);
    }
    if (scaler) {  // f16: loss scaling (not with data parallel: refused above)
      scaler->scale(loss).backward();
      scaler->step(opt);
      scaler->update();
    } else {
      loss.backward();
      if (ddp)
        ddp->step();
      else
        opt.step();
    }
    return loss;
  };
  tensor gx, gy;
  std::optional<kiln::step_graph> graph;
  if (o.graph) {
    const std::int64_t b = o.batch / ranks;
    shape_t xs{b};
    xs.insert(xs.end(), sample.begin(), sample.end());
    gx = tensor::zeros(dev, xs);
    gy = tensor::zeros(dev, {b}, scalar_type::i64);
    graph.emplace(dev, [&] { return std::vector<tensor>{step(gx, gy)}; });
  }
  const bool tty = lead && isatty(fileno(stdout));
  result r{name, 0, 0, 0, 0, model.parameter_count()};
  if (lead && comm)
    std::printf(
        "%s: %lld parameters, Adam lr %g, batch %lld, on %d ranks (batch %lld each), "
        "precision %s\n",
        name.c_str(), (long long)r.parameters, o.lr, (long long)o.batch, ranks,
        (long long)(o.batch / ranks), o.precision.c_str());
  else if (lead)
    std::printf("%s: %lld parameters, Adam lr %g, batch %lld, on %s, precision %s\n", name.c_str(),
                (long long)r.parameters, o.lr, (long long)o.batch, dev.id().c_str(),
                o.precision.c_str());
  const auto start = clock_type::now();
  double images = 0, train_seconds = 0;
  for (int e = 0; e < o.epochs; ++e) {
    model.train();
    const auto t0 = clock_type::now();
    // The epoch's digits go to the device at once, in data_loader's shuffled order: a step then
    // neither uploads (tensor::from waits for the device's queue) nor reads the loss (it sums
    // on the device), so the host runs ahead and a rank never waits for the other's step.
    const epoch_data ed = upload_epoch(train, o.seed + 1 + std::uint64_t(e), dev, sample);
    tensor loss_sum = tensor::zeros(dev, {});
    std::int64_t steps = 0, seen = 0;
    for (std::int64_t k = 0; k < batches; ++k) {
      const auto [lo, hi] =
          rank_rows(k * o.batch, std::min(n, (k + 1) * o.batch), int(rank), ranks);
      const tensor x = ed.x.slice(0, lo, hi), y = ed.y.slice(0, lo, hi);
      tensor loss;
      if (graph && hi - lo == gx.shape()[0]) {  // a full batch: replay the captured step
        kiln::copy_(gx, x);
        kiln::copy_(gy, y);
        loss = graph->run()[0];
        if (k == 1 && e == 0 && lead && graph->kind() != replay_kind::cuda_graph)
          std::printf("%s: the step runs eagerly (%s)\n", name.c_str(), graph->reason().c_str());
      } else {
        loss = step(x, y);
      }
      {
        no_grad off;
        loss_sum = (loss_sum + loss.detach()).eval();
      }
      ++steps;
      seen += hi - lo;
      // A terminal's progress bar reads the loss, a few times an epoch only.
      if (tty && (steps % 32 == 0 || steps == batches))
        progress(name, e + 1, o.epochs, steps, batches,
                 double(loss_sum.item<float>()) / double(steps), double(seen) / since(t0), tty);
    }
    // The epoch's loss over every rank's rows, as one device reports it.
    if (comm) comm->all_reduce(loss_sum, collective::reduce_op::avg);
    dev.synchronize();
    const double secs = since(t0);
    train_seconds += secs;
    images += double(seen) * ranks;
    if (!lead) continue;
    model.eval();
    const double acc = accuracy(model, test, dev, sample, o);
    r.final_loss = steps ? double(loss_sum.item<float>()) / double(steps) : 0;
    r.test_accuracy = acc;
    if (tty) std::printf("\r%*s\r", 100, "");
    std::printf("%-5s epoch %2d/%d  loss %.4f  test accuracy %6.2f%%  %8.0f img/s  %.2f s\n",
                name.c_str(), e + 1, o.epochs, r.final_loss, 100 * acc, double(seen) * ranks / secs,
                secs);
    std::fflush(stdout);
  }
  r.seconds = since(start);
  r.images_per_s = train_seconds > 0 ? images / train_seconds : 0;
  if (comm) r.max_rank_difference = rank_difference(model, *comm);
  if (lead && !o.save_dir.empty()) {
    const std::string path = o.save_dir + "/" + name + ".safetensors";
    nn::save_checkpoint(path, model, &opt);
    std::printf("%s: saved %s\n", name.c_str(), path.c_str());
  }
  return r;
}

void print_summary(const std::string& where, const train_options& o,
                   const std::vector<result>& results, bool ranks) {
  std::printf("\nsummary (%s, %d epochs, batch %lld, %s)\n", where.c_str(), o.epochs,
              (long long)o.batch, o.precision.c_str());
  std::printf("  model  parameters  test accuracy  final loss  train img/s  total s%s\n",
              ranks ? "  max rank diff" : "");
  for (const result& r : results) {
    std::printf("  %-5s  %10lld  %12.2f%%  %10.4f  %11.0f  %7.1f", r.model.c_str(),
                (long long)r.parameters, 100 * r.test_accuracy, r.final_loss, r.images_per_s,
                r.seconds);
    if (ranks) std::printf("  %13.3g", r.max_rank_difference);
    std::printf("\n");
  }
}

// "both": the MLP and LeNet; else the one model named.
std::vector<std::string> models_of(const train_options& o) {
  if (o.model == "both") return {"mlp", "lenet"};
  return {o.model};
}

// --devices: one rank per device, in this process (one thread per rank).
int train_data_parallel(const train_options& o, const std::string& dir) {
  std::vector<device> devs;
  std::string where;
  for (const std::string& spec : o.devices) {
    devs.push_back(device::get(spec));
    if (!where.empty()) where += ',';
    where += devs.back().id();
  }
  const int n = static_cast<int>(devs.size());
  if (n < 2) {
    std::fprintf(stderr, "kiln train: --devices needs two or more devices (else --device)\n");
    return 2;
  }
  if (o.batch % n != 0) {
    std::fprintf(stderr, "kiln train: --batch %lld does not split evenly over %d devices\n",
                 (long long)o.batch, n);
    return 2;
  }
  auto [train_set, test_set] = data::split(data::load_mnist(dir), 8000, o.seed);
  std::printf("MNIST: %lld train / %lld test digits from %s; data parallel on %s\n",
              (long long)train_set.size(), (long long)test_set.size(), dir.c_str(), where.c_str());
  std::vector<result> results;
  for (const std::string& m : models_of(o)) {
    auto comms = collective::communicator::create(devs);
    std::vector<result> per_rank(std::size_t(n), result{});
    collective::run_per_rank(comms, [&](collective::communicator& c) {
      per_rank[std::size_t(c.rank())] = train_one(m, o, c.get_device(), train_set, test_set, &c);
    });
    result r = per_rank[0];
    for (const result& q : per_rank)
      r.max_rank_difference = std::max(r.max_rank_difference, q.max_rank_difference);
    results.push_back(r);
  }
  print_summary(where, o, results, true);
  for (const result& r : results)
    if (r.max_rank_difference != 0) {
      std::fprintf(stderr, "kiln train: %s's parameters differ across ranks (by %g)\n",
                   r.model.c_str(), r.max_rank_difference);
      return 1;
    }
  return 0;
}

}  // namespace

int train(const train_options& o) {
  if (o.model == "gpt") {
    if (!o.devices.empty()) {
      std::fprintf(stderr, "kiln train gpt: --devices is not supported yet (use --device)\n");
      return 2;
    }
    return train_gpt(o);
  }
  const std::string dir = o.data_dir.empty() ? data::default_mnist_dir() : o.data_dir;
  if (!data::mnist_available(dir)) {
    std::fprintf(stderr,
                 "kiln train: no MNIST digits in %s; run scripts/fetch_mnist.sh (or pass --data)\n",
                 dir.c_str());
    return 1;
  }
  if (!o.devices.empty()) return train_data_parallel(o, dir);
  const device dev = o.device_spec.empty() ? device::best() : device::get(o.device_spec);
  auto [train_set, test_set] = data::split(data::load_mnist(dir), 8000, o.seed);
  std::printf("MNIST: %lld train / %lld test digits from %s; device %s (%s)\n",
              (long long)train_set.size(), (long long)test_set.size(), dir.c_str(),
              dev.id().c_str(), dev.info().name.c_str());
  std::vector<result> results;
  for (const std::string& m : models_of(o))
    results.push_back(train_one(m, o, dev, train_set, test_set));
  print_summary(dev.id(), o, results, false);
  return 0;
}

}  // namespace kiln::tool
