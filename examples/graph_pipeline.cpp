// A five-stage pipeline with a fork and a join as one kiln::graph, built once and replayed:
//
//   upload -> decode -> normalise -> +-> rectify -+-> merge -> download -> reduce (host)
//                                    +-> square  -+
//
// rectify and square run at the same time on two queues. On a CUDA device a graph of device
// stages only is captured into one CUDA graph; the host stage `reduce` makes this one replay
// through queues and events (docs/graph.md). The run prints each stage's time, bytes and
// launches, as a table and as JSON.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <kiln/kiln.hpp>
#include <random>
#include <vector>

namespace {

constexpr const char* source = R"(
KILN_KERNEL void decode(KILN_GLOBAL float* out, KILN_GLOBAL const uint8_t* raw) {
  const uint64_t i = kiln_global_id(0);
  out[i] = (float)raw[i];
}
KILN_KERNEL void normalise(KILN_GLOBAL float* x, float centre, float scale) {
  const uint64_t i = kiln_global_id(0);
  x[i] = (x[i] - centre) * scale;
}
KILN_KERNEL void rectify(KILN_GLOBAL float* out, KILN_GLOBAL const float* x) {
  const uint64_t i = kiln_global_id(0);
  out[i] = x[i] > 0.0f ? x[i] : 0.0f;
}
KILN_KERNEL void square(KILN_GLOBAL float* out, KILN_GLOBAL const float* x) {
  const uint64_t i = kiln_global_id(0);
  out[i] = x[i] * x[i];
}
KILN_KERNEL void merge(KILN_GLOBAL float* out, KILN_GLOBAL const float* a, KILN_GLOBAL const float* b) {
  const uint64_t i = kiln_global_id(0);
  out[i] = a[i] + b[i];
})";

}  // namespace

int main() {
  kiln::device dev = kiln::device::best();
  const std::size_t n = 1 << 16;
  kiln::program prog = kiln::program::compile(dev, source);

  std::vector<std::uint8_t> raw(n);  // refilled before each replay: the graph reads it in place
  std::vector<float> merged(n);
  kiln::buffer<std::uint8_t> d_raw(dev, n);
  kiln::buffer<float> x(dev, n), pos(dev, n), sq(dev, n), out(dev, n);
  double total = 0;

  kiln::graph g(dev, {.name = "pipeline"});
  g.copy("upload", {}, raw, d_raw)
      .launch("decode", {"upload"}, prog.get_kernel("decode"), kiln::range(n), x, d_raw)
      .launch("normalise", {"decode"}, prog.get_kernel("normalise"), kiln::range(n), x, 128.0f,
              1.0f / 128)
      .launch("rectify", {"normalise"}, prog.get_kernel("rectify"), kiln::range(n), pos, x)
      .launch("square", {"normalise"}, prog.get_kernel("square"), kiln::range(n), sq, x)
      .launch("merge", {"rectify", "square"}, prog.get_kernel("merge"), kiln::range(n), out, pos,
              sq)
      .copy("download", {"merge"}, out, merged)
      .host("reduce", {"download"}, [&] {
        total = 0;
        for (float v : merged) total += v;
      });

  std::mt19937 rng(42);
  bool ok = true;
  for (int replay = 0; replay < 3; ++replay) {
    for (auto& b : raw) b = static_cast<std::uint8_t>(rng());
    g.run();
    double want = 0;
    for (std::uint8_t b : raw) {
      const float v = (float(b) - 128.0f) * (1.0f / 128);
      want += (v > 0 ? v : 0.0f) + v * v;
    }
    std::printf("replay %d: sum %.4f (host reference %.4f)\n", replay, total, want);
    ok = ok && std::fabs(total - want) <= 1e-3 * std::fabs(want);
  }
  std::printf("\n%s\n%s\n", g.summary().table().c_str(), g.summary().json().c_str());
  return ok ? 0 : 1;
}
