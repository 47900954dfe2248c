// The C++ side of "a fused query from Python at C++'s speed" (issue 27): the wall time of
// sum(map(_1 * 2 + 1) | filter(_1 > 1.5)) over n random floats on one device, read back to
// the host, as C++ writes it two ways: the kiln::query pipeline (one generated kernel) and the
// tensor expression that kiln.query builds in Python (where(v > 1.5, v, 0).sum(): also one
// kernel). bench/python_query.py times the Python calls on the same device; the ratio is
// Python's overhead per query. Median of --runs after 5 warm-up calls.
//
//   bench_query_python_peer [--device cuda:0] [--runs 50] [--sizes 16777216,268435456]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <kiln/query/tensor_query.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace {
using namespace kiln::placeholders;
using clock_type = std::chrono::steady_clock;

template <class F>
double median_ms(int runs, F&& f) {
  for (int i = 0; i < 5; ++i) f();
  std::vector<double> t(static_cast<std::size_t>(runs));
  for (auto& x : t) {
    const auto a = clock_type::now();
    f();
    x = std::chrono::duration<double, std::milli>(clock_type::now() - a).count();
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  std::string spec = "cuda:0", sizes = "16777216,268435456";
  int runs = 50;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) spec = argv[i + 1];
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--sizes")) sizes = argv[i + 1];
  }
  try {
    const kiln::device dev = kiln::device::get(spec);
    std::printf("device %s (%s)\n", dev.id().c_str(), dev.info().name.c_str());
    std::stringstream list(sizes);
    for (std::string item; std::getline(list, item, ',');) {
      const auto n = static_cast<std::int64_t>(std::strtoll(item.c_str(), nullptr, 10));
      std::vector<float> host(static_cast<std::size_t>(n));
      std::uint32_t r = 12345;  // uniform in [0, 1): half the mapped values pass the filter
      for (float& v : host) v = float((r = r * 1664525u + 1013904223u) >> 8) * 0x1p-24f;
      const kiln::buffer<float> xs(dev, host);
      const kiln::tensor x = kiln::tensor::from(dev, host, {n});
      float a = 0, b = 0;
      const double q = median_ms(runs, [&] {
        a = xs | kiln::transform(_1 * 2.f + 1.f) | kiln::filter(_1 > 1.5f) | kiln::sum();
      });
      const double t = median_ms(runs, [&] {
        const kiln::tensor v = x * 2.f + 1.f;
        b = kiln::where(v > 1.5f, v, 0.f).sum().item<float>();
      });
      // The run-time form Python's kiln.query uses (tensor_query), without Python.
      namespace dq = kiln::detail::q;
      float c = 0;
      const double rt = median_ms(runs, [&] {
        dq::tensor_query tq({x});
        const kiln::tensor v = x * 2.f + 1.f;
        tq.map(v);
        tq.filter(v > 1.5f);
        const auto bits = static_cast<std::uint32_t>(
            (getenv("SYNC") ? tq.reduce(dq::reduce_kind::sum)
                            : dq::async_reduce(*tq.reduce_async(dq::reduce_kind::sum)))
                .value_bits);
        std::memcpy(&c, &bits, sizeof c);
      });
      std::printf(
          "n %lld  C++ kiln::query %.4f ms  C++ tensor expression %.4f ms  C++ tensor_query %.4f "
          "ms  (sums %.6g %.6g %.6g)\n",
          static_cast<long long>(n), q, t, rt, double(a), double(b), double(c));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_query_python_peer: %s\n", e.what());
    return 1;
  }
}
