// `kiln demo`: compile a kernel on the best device, run it over 16M floats, check every element
// against the host, and report the compile time, kernel time and bandwidth.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "commands.hpp"
#include "kiln/kiln.hpp"

namespace kiln::tool {
namespace {

constexpr const char* demo_source = R"(
// y = a * x + y, one work-item per element.
KILN_KERNEL void saxpy(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, float a) {
  const uint64_t i = kiln_global_id(0);
  y[i] = fma(a, x[i], y[i]);
}
)";

}  // namespace

int demo(const demo_options& o) {
  const device dev = o.device.empty() ? device::best() : device::get(o.device);
  const std::uint64_t n = 16u << 20;
  std::printf("device: %s (%s)\n", dev.id().c_str(), dev.info().name.c_str());

  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  std::vector<float> hx(n), hy(n);
  for (auto& v : hx) v = dist(rng);
  for (auto& v : hy) v = dist(rng);
  const float a = 2.5f;
  buffer<float> x(dev, hx), y(dev, hy);  // also opens the device (context creation)

  auto t0 = std::chrono::steady_clock::now();
  kernel saxpy = program::compile(dev, demo_source).get_kernel("saxpy");
  auto t1 = std::chrono::steady_clock::now();
  const auto st = cache_stats();
  std::printf("compile: %.1f ms (%s)\n", std::chrono::duration<double, std::milli>(t1 - t0).count(),
              st.disk_hits ? "from the disk cache" : "compiled");

  queue q(dev);
  saxpy.launch(q, range(n), y, x, a);  // warm-up (module load, first-touch)
  q.copy(hy, y);
  const int reps = 10;
  event start = q.record();
  for (int r = 0; r < reps; ++r) saxpy.launch(q, range(n), y, x, a);
  event stop = q.record();
  stop.wait();
  const double ms = elapsed_ms(start, stop) / reps;

  std::vector<float> out = y.to_vector();
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    float ref = hy[i];
    for (int r = 0; r < reps; ++r) ref = std::fma(a, hx[i], ref);
    if (std::fabs(out[i] - ref) > 1e-4f * (1.f + std::fabs(ref))) ++bad;
  }
  const double gbs = 3.0 * n * sizeof(float) / (ms * 1e-3) / 1e9;
  std::printf("saxpy over %llu floats: %.3f ms per launch, %.1f GB/s (12 bytes per element)\n",
              (unsigned long long)n, ms, gbs);
  std::printf("check: %s (%llu of %llu elements wrong)\n", bad ? "FAILED" : "ok",
              (unsigned long long)bad, (unsigned long long)n);
  return bad ? 1 : 0;
}

}  // namespace kiln::tool
