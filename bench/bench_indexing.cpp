// Embedding (GPT-2's [50304, 768] table and a character vocabulary's [65, 384], 64 x 256 ids)
// and cat beside PyTorch (bench/torch_indexing.py prints the same rows): median wall time of one
// call, the queue finished inside the timing (embedding itself waits for nothing: its range check
// is deferred and its backward sorts the ids on the device).
//
//   build/bin/bench_indexing [--device cuda:0] [--runs 20] [--quick]
//   python3 bench/torch_indexing.py [--device cuda] [--runs 20] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor.hpp>
#include <kiln/tensor/indexing.hpp>
#include <string>
#include <vector>

namespace {

struct options {
  std::string device;
  int runs = 20, warmup = 3;
  bool quick = false;
};

double median_ms(kiln::queue& q, const options& o, const std::function<void()>& work) {
  for (int i = 0; i < o.warmup; ++i) work();
  q.finish();
  std::vector<double> t;
  for (int i = 0; i < o.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    q.finish();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void row(const std::string& name, double ms, double bytes) {
  std::printf("| %s | %.4f | %.1f |\n", name.c_str(), ms, bytes / ms * 1e-6);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      o.device = argv[++i];
    else if (a == "--runs" && i + 1 < argc)
      o.runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick")
      o.quick = true;
    else {
      std::fprintf(stderr, "usage: bench_indexing [--device ID] [--runs N] [--quick]\n");
      return 2;
    }
  }
  const kiln::device dev = o.device.empty() ? kiln::device::best() : kiln::device::get(o.device);
  kiln::queue& q = dev.default_queue();
  std::printf("bench_indexing on %s\n\n| case | ms | GB/s |\n| --- | --- | --- |\n",
              dev.id().c_str());
  // GPT-2's token table and a character vocabulary (the GPT), 64 x 256 ids each.
  for (const auto& [V0, D0] : {std::pair<std::int64_t, std::int64_t>{50304, 768}, {65, 384}}) {
    const std::int64_t V = o.quick ? std::min<std::int64_t>(V0, 1000) : V0, D = o.quick ? 64 : D0,
                       B = o.quick ? 4 : 64, T = o.quick ? 32 : 256, N = B * T;
    const std::string shape = " [" + std::to_string(V) + ", " + std::to_string(D) + "] ";
    std::vector<std::int64_t> ids(static_cast<std::size_t>(N));
    for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int64_t((i * 2654435761u) % V);
    const kiln::tensor idx = kiln::tensor::from(dev, ids, {B, T});
    for (kiln::scalar_type t : {kiln::scalar_type::f32, kiln::scalar_type::bf16}) {
      const std::string ty = kiln::type_name(t);
      const double es = double(kiln::size_of(t));
      kiln::tensor w = kiln::tensor::randn(dev, {V, D}, 1).to(t).eval();
      const kiln::tensor g = kiln::tensor::randn(dev, {B, T, D}, 2).to(t).eval();
      kiln::tensor keep;
      row("embedding" + shape + "forward " + ty,
          median_ms(q, o, [&] { keep = kiln::embedding(w, idx); }),
          2 * double(N * D) * es + 8.0 * double(N));
      w.requires_grad_();
      // Forward and backward: the backward writes every row of dweight (V x D), reads g once.
      row("embedding" + shape + "forward+backward " + ty,
          median_ms(q, o,
                    [&] {
                      w.set_grad(kiln::tensor());
                      kiln::embedding(w, idx).backward(g);
                    }),
          (3 * double(N * D) + double(V * D)) * es + 16.0 * double(N));
      if (V0 != 50304) continue;  // cat once, at the larger width
      const kiln::tensor x = kiln::tensor::randn(dev, {N, D}, 3).to(t).eval();
      row("cat 3 x [" + std::to_string(N) + ", " + std::to_string(D) + "] dim -1 " + ty,
          median_ms(q, o,
                    [&] {
                      keep = kiln::cat({x, x, x}, -1);
                    }),
          6 * double(N * D) * es);
    }
  }
  return 0;
}
