// Host cost of a kiln::query: the median wall time of one query at a tiny size, where the
// kernels cost next to nothing and what is left is planning, lookups, argument lists, locks,
// launches and the read-back. Run on the CPU backend (or any device: --device SPEC).
//
//   bench_query_host [--device cpu] [--n 64] [--runs 10000]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

namespace {
using namespace kiln::placeholders;
using clock_type = std::chrono::steady_clock;

template <class F>
double median_us(int runs, F&& f) {
  for (int i = 0; i < 100; ++i) f();  // warm: compile, caches, pools
  std::vector<double> t(static_cast<std::size_t>(runs));
  for (auto& x : t) {
    const auto a = clock_type::now();
    f();
    x = std::chrono::duration<double, std::micro>(clock_type::now() - a).count();
  }
  std::nth_element(t.begin(), t.begin() + runs / 2, t.end());
  return t[static_cast<std::size_t>(runs / 2)];
}
}  // namespace

int main(int argc, char** argv) {
  std::string spec = "cpu";
  std::uint64_t n = 64;
  int runs = 10000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) spec = argv[i + 1];
    if (!std::strcmp(argv[i], "--n")) n = std::strtoull(argv[i + 1], nullptr, 10);
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
  }
  const kiln::device dev = kiln::device::get(spec);
  std::vector<float> host(n);
  for (std::uint64_t i = 0; i < n; ++i) host[i] = static_cast<float>((i * 37) % 101) / 100.f;
  kiln::buffer<float> x(dev, host);
  volatile double sink = 0;
  std::printf("device %s, n %llu, %d runs: median microseconds per query\n", dev.id().c_str(),
              static_cast<unsigned long long>(n), runs);
  const auto row = [&](const char* name, double us) { std::printf("  %-34s %8.2f\n", name, us); };
  row("sum", median_us(runs, [&] { sink = sink + (x | kiln::sum()); }));
  row("map | sum",
      median_us(runs, [&] { sink = sink + (x | kiln::transform(_1 * 2.f) | kiln::sum()); }));
  row("map | to_buffer", median_us(runs, [&] {
        auto b = x | kiln::transform(_1 * 2.f) | kiln::to_buffer();
        sink = sink + static_cast<double>(b.size());
      }));
  row("filter | to_buffer", median_us(runs, [&] {
        auto b = x | kiln::filter(_1 > 0.5f) | kiln::to_buffer();
        sink = sink + static_cast<double>(b.size());
      }));
  row("map | filter | count", median_us(runs, [&] {
        sink = sink + static_cast<double>(x | kiln::transform(_1 + 1.f) | kiln::filter(_1 > 1.5f) |
                                          kiln::count());
      }));
#ifdef KILN_QUERY_HAS_ASYNC
  kiln::queue q(dev);
  row("async sum, get",
      median_us(runs, [&] { sink = sink + (x | kiln::async(kiln::sum(), q)).get(); }));
  row("async sum x8 in flight, per query", median_us(runs / 8, [&] {
                                             std::vector<kiln::pending<float>> hs;
                                             hs.reserve(8);
                                             for (int k = 0; k < 8; ++k)
                                               hs.push_back(x | kiln::async(kiln::sum(), q));
                                             for (auto& h : hs) sink = sink + h.get();
                                           }) / 8);
  row("async sum, enqueue only", median_us(runs, [&] {
        auto h = x | kiln::async(kiln::sum(), q);
        (void)h;
      }));
  q.finish();
#endif
  return 0;
}
