// Causal scaled_dot_product_attention, forward and forward + backward, each of Kiln's paths
// (KILN_ATTENTION=vendor: cuDNN's flash attention, 16-bit only; composed: two batched GEMMs
// around a fused softmax; fused: Kiln's own kernels), at issue 25's shapes: the GPT's 64 x 6 x 256
// x 64 and 8 x 16 x 2048 x 128. Median wall time of `runs` calls with the device synchronised,
// after 3 warm-ups; TFLOP/s counts the causal half of the products (forward 2 L S E, backward 2.5x
// that). bench/torch_attention.py times torch's scaled_dot_product_attention at the same shapes.
//
//   bench_attention [--device cuda:0] [--runs 20] [--dtype f32|bf16|f16|all] [--shapes gpt|all]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <kiln/tensor/attention.hpp>
#include <string>
#include <vector>

#include "bench_report.hpp"

namespace {
using kiln_bench::clock_type;

// Median wall time of `runs` calls of f, the device synchronised inside each.
template <class F>
double median_ms(const kiln::device& dev, int runs, F f) {
  for (int i = 0; i < 3; ++i) f();
  dev.synchronize();
  std::vector<double> t;
  for (int i = 0; i < runs; ++i) {
    const auto a = clock_type::now();
    f();
    dev.synchronize();
    t.push_back(kiln_bench::seconds_since(a) * 1e3);
  }
  return kiln_bench::median(t);
}
}  // namespace

int main(int argc, char** argv) {
  std::string spec = "cuda:0", dtype = "all", which = "all";
  int runs = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) spec = argv[i + 1];
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
    if (!std::strcmp(argv[i], "--shapes")) which = argv[i + 1];
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    const kiln::device dev = kiln::device::get(spec);
    std::printf("bench_attention on %s (%s), causal, median of %d\n", dev.id().c_str(),
                dev.info().name.c_str(), runs);
    std::printf("%-6s %-22s %-9s %10s %8s %10s %8s\n", "dtype", "B x H x L x E", "path", "fwd ms",
                "TFLOP/s", "fwd+bwd", "TFLOP/s");
    struct shape {
      std::int64_t b, h, l, e;
    };
    const shape shapes[] = {{64, 6, 256, 64}, {8, 16, 2048, 128}};
    for (const char* name : {"f32", "bf16", "f16"}) {
      if (dtype != "all" && dtype != name) continue;
      const kiln::scalar_type t = !std::strcmp(name, "f32")    ? kiln::scalar_type::f32
                                  : !std::strcmp(name, "bf16") ? kiln::scalar_type::bf16
                                                               : kiln::scalar_type::f16;
      for (const shape& s : shapes) {
        if (which == "gpt" && s.l != 256) continue;
        const auto make = [&](std::uint64_t seed) {
          kiln::tensor x = kiln::tensor::randn(dev, {s.b, s.h, s.l, s.e}, seed).to(t).eval();
          x.requires_grad_();
          return x;
        };
        const kiln::tensor q = make(1), k = make(2), v = make(3);
        const kiln::tensor g = kiln::tensor::randn(dev, {s.b, s.h, s.l, s.e}, 4).to(t).eval();
        const double flop = 2.0 * 2.0 * double(s.b * s.h) * double(s.l) * double(s.l) *
                            double(s.e) / 2;  // causal: half the scores
        char label[64];
        std::snprintf(label, sizeof label, "%lld x %lld x %lld x %lld", (long long)s.b,
                      (long long)s.h, (long long)s.l, (long long)s.e);
        for (const char* path : {"vendor", "composed", "fused"}) {
          if (t == kiln::scalar_type::f32 && !std::strcmp(path, "vendor")) continue;
          ::setenv("KILN_ATTENTION", path, 1);
          const double fwd = median_ms(dev, runs, [&] {
            kiln::no_grad off;
            kiln::scaled_dot_product_attention(q, k, v, {}, true).eval();
          });
          // The path that ran (vendor falls back where the library refuses the shape).
          const kiln::attention_path ran = kiln::last_attention_path();
          const char* ran_name = ran == kiln::attention_path::vendor     ? "vendor"
                                 : ran == kiln::attention_path::composed ? "composed"
                                                                         : "fused";
          const double both = median_ms(dev, runs, [&] {
            kiln::tensor y = kiln::scaled_dot_product_attention(q, k, v, {}, true);
            (y * g).to(kiln::scalar_type::f32).sum().backward();
            for (const kiln::tensor* x : {&q, &k, &v}) x->set_grad(kiln::tensor());
          });
          std::printf("%-6s %-22s %-9s %10.3f %8.1f %10.3f %8.1f\n", name, label, ran_name, fwd,
                      flop / fwd / 1e9, both, 3.5 * flop / both / 1e9);
        }
        ::unsetenv("KILN_ATTENTION");
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention: %s\n", e.what());
    return 1;
  }
}
