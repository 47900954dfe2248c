// `kiln calibrate`: measures, for each GPU, the input size from which a host-resident query
// finishes sooner on the GPU than on the CPU backend, and stores it in the cache directory
// (placement.txt) for kiln::on(kiln::automatic).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "kiln/kiln.hpp"
#include "query/host_input.hpp"
#include "tools/kiln/commands.hpp"

namespace kiln::tool {
namespace {
using namespace kiln::placeholders;

// Median wall time of a representative host-resident query: map, filter, sum.
double query_ms(const kiln::device& dev, const std::vector<float>& host) {
  std::vector<double> t;
  for (int r = 0; r < 7; ++r) {
    const auto a = std::chrono::steady_clock::now();
    volatile float s =
        host | kiln::on(dev) | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1.f) | kiln::sum();
    (void)s;
    const auto b = std::chrono::steady_clock::now();
    if (r >= 2) t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int calibrate(const std::vector<std::string>&) {
  const kiln::device cpu = kiln::device::host();
  int gpus = 0;
  for (const kiln::device& gpu : kiln::device::all()) {
    if (gpu.info().type != kiln::device_type::gpu) continue;
    ++gpus;
    std::printf("%s (%s) against %s, host-resident map | filter | sum on float32:\n",
                gpu.id().c_str(), gpu.info().name.c_str(), cpu.id().c_str());
    std::printf("  %12s %12s %12s\n", "bytes", "cpu ms", "gpu ms");
    std::uint64_t crossover = 0;
    int gpu_wins = 0;
    for (std::uint64_t n = 1u << 10; n <= (1u << 26); n <<= 1) {
      std::vector<float> host(n);
      for (std::uint64_t i = 0; i < n; ++i) host[i] = float(i % 1000) * 0.01f;
      const double c = query_ms(cpu, host), g = query_ms(gpu, host);
      std::printf("  %12s %12.3f %12.3f\n", human_bytes(n * 4).c_str(), c, g);
      // The crossover: the first size from which the GPU wins twice in a row.
      if (g < c) {
        if (++gpu_wins == 1) crossover = n * 4;
        if (gpu_wins == 2) break;
      } else {
        gpu_wins = 0;
        crossover = 0;
      }
    }
    if (!crossover || gpu_wins < 2) crossover = 1ull << 40;  // the CPU won throughout
    const std::string file = kiln::detail::q::store_crossover(gpu, crossover);
    std::printf("  crossover %s, stored in %s\n", human_bytes(crossover).c_str(), file.c_str());
  }
  if (!gpus) std::printf("no GPU: kiln::automatic always uses the CPU; nothing to calibrate\n");
  return 0;
}

}  // namespace kiln::tool
