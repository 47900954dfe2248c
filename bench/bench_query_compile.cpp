// Cost of a new query shape: the first run in a process with an empty kernel cache (code
// generation, compile, load), and the first run in a fresh process that finds it in the disk
// cache. Run twice with the same KILN_CACHE_DIR: first on an empty directory, then again.
//   bench_query_compile <device>     prints "first_run_ms <ms> compiled <0|1> second_run_ms <ms>"
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kiln/kiln.hpp"

int main(int argc, char** argv) {
  using namespace kiln::placeholders;
  const kiln::device dev = kiln::device::get(argc > 1 ? argv[1] : "cpu");
  std::vector<float> h(1 << 20);
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = float(i % 1000) * 0.001f;
  const kiln::buffer<float> xs = kiln::to_device(dev, h);
  dev.synchronize();
  auto run = [&] {
    const auto a = std::chrono::steady_clock::now();
    // A shape no other program of the bench uses.
    volatile float s = xs | kiln::transform(kiln::tanh(_1) * 3.f + _1) | kiln::filter(_1 > 0.25f) |
                       kiln::transform(kiln::sqrt(_1)) | kiln::sum();
    (void)s;
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count();
  };
  const double first = run();
  const auto compiled = kiln::last_query_stats().programs_compiled;
  const double second = run();
  const auto st = kiln::cache_stats();
  std::printf("%s first_run_ms %.3f compiled %llu disk_hits %llu second_run_ms %.3f\n",
              dev.id().c_str(), first, static_cast<unsigned long long>(compiled),
              static_cast<unsigned long long>(st.disk_hits), second);
  return 0;
}
