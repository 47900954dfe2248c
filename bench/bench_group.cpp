// kiln::query's grouping and join stages on one device, wall clock (the query's whole run:
// its kernels, the sort, the host read of the group count; inputs on the device, results left
// on the device with to_buffer), median of runs after a warm-up. Peers: bench/torch_group.py.
//
//   group_by sum    : zip(keys, vals) | group_by(_1) | aggregate(agg::sum(_2))   (int32, f32)
//   ... sum+count   : the same with int32 values (exact: the hash path on GPUs)
//   KILN_QUERY_GROUP=sort|hash forces the path
//   distinct        : keys | distinct()                                           (int64)
//   join            : zip(probe, v) | join(build, _1, _1) | count()               (int32 keys)
//
//   bench_group [--device cuda:0] [--runs 5] [--rows 268435456] [--groups 1000,1000000,67108864]
//               [--probe 67108864] [--build 16777216]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace kiln::placeholders;

double median_ms(int runs, const std::function<void()>& work) {
  work();  // warm-up: compiles the kernels
  std::vector<double> ms;
  for (int i = 0; i < std::max(runs, 1); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// Keys in [0, range) from a hash of the position, made on the device (a 256M host vector would
// dominate the set-up); the source buffer is filled first so that nothing reads garbage.
template <class T>
kiln::buffer<T> random_keys(const kiln::device& dev, std::uint64_t n, std::uint64_t range,
                            std::uint64_t seed) {
  kiln::buffer<std::uint8_t> zero(dev, n);
  zero.fill(0);
  const std::uint64_t mul = 6364136223846793005ull, add = 1442695040888963407ull + seed;
  return zero |
         kiln::transform(
             kiln::cast<T>(((kiln::cast<std::uint64_t>(_i) * mul + add) >> 17) % range)) |
         kiln::to_buffer();
}

std::vector<std::uint64_t> list(const char* s) {
  std::vector<std::uint64_t> v;
  for (const char* p = s; *p;) {
    char* end = nullptr;
    v.push_back(std::strtoull(p, &end, 10));
    p = *end ? end + 1 : end;
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string id = "cuda:0";
  int runs = 5;
  std::uint64_t rows = 1ull << 28, probe = 1ull << 26, build = 1ull << 24;
  std::vector<std::uint64_t> groups = {1000, 1000000, 1ull << 26};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device")
      id = argv[i + 1];
    else if (k == "--runs")
      runs = std::atoi(argv[i + 1]);
    else if (k == "--rows")
      rows = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--groups")
      groups = list(argv[i + 1]);
    else if (k == "--probe")
      probe = std::strtoull(argv[i + 1], nullptr, 10);
    else if (k == "--build")
      build = std::strtoull(argv[i + 1], nullptr, 10);
  }
  const kiln::device dev = kiln::device::get(id);
  std::printf("bench_group on %s (%s), median of %d, wall clock\n", id.c_str(),
              dev.info().name.c_str(), runs);
  std::printf("%-34s %12s %12s %10s %12s\n", "case", "rows", "groups", "ms", "Mrows/s");

  kiln::buffer<std::uint8_t> zero(dev, rows);
  zero.fill(0);
  const auto vals = zero | kiln::transform(kiln::cast<float>(_i % 1000) * 0.5f) | kiln::to_buffer();
  const auto ivals = zero | kiln::transform(kiln::cast<std::int32_t>(_i % 1000)) | kiln::to_buffer();
  for (std::uint64_t g : groups) {
    const auto keys = random_keys<std::int32_t>(dev, rows, g, 1);
    std::uint64_t found = 0;
    const double ms = median_ms(runs, [&] {
      auto [k, s] = kiln::zip(keys, vals) | kiln::group_by(_1) |
                    kiln::aggregate(kiln::agg::sum(_2)) | kiln::to_buffer();
      found = k.size();
    });
    std::printf("%-34s %12llu %12llu %10.3f %12.1f\n", "group_by sum int32->f32",
                (unsigned long long)rows, (unsigned long long)found, ms, double(rows) / ms * 1e-3);
    // Exact aggregates (integer sum, count): the hash path on GPUs.
    const double ms2 = median_ms(runs, [&] {
      auto [k, s, c] = kiln::zip(keys, ivals) | kiln::group_by(_1) |
                       kiln::aggregate(kiln::agg::sum(_2), kiln::agg::count()) | kiln::to_buffer();
      found = k.size();
    });
    std::printf("%-34s %12llu %12llu %10.3f %12.1f\n", "group_by sum+count int32->int64",
                (unsigned long long)rows, (unsigned long long)found, ms2,
                double(rows) / ms2 * 1e-3);
  }
  {
    const auto keys = random_keys<std::int64_t>(dev, rows, 1000000, 2);
    std::uint64_t found = 0;
    const double ms = median_ms(runs, [&] {
      auto [k, c] =
          keys | kiln::group_by(_1) | kiln::aggregate(kiln::agg::count()) | kiln::to_buffer();
      found = k.size();
    });
    std::printf("%-34s %12llu %12llu %10.3f %12.1f\n", "unique+counts int64 (group count)",
                (unsigned long long)rows, (unsigned long long)found, ms, double(rows) / ms * 1e-3);
    const double ms2 =
        median_ms(runs, [&] { found = (keys | kiln::distinct() | kiln::to_buffer()).size(); });
    std::printf("%-34s %12llu %12llu %10.3f %12.1f\n", "distinct int64", (unsigned long long)rows,
                (unsigned long long)found, ms2, double(rows) / ms2 * 1e-3);
  }
  {
    const auto pk = random_keys<std::int32_t>(dev, probe, build * 2, 3);
    const auto bk = random_keys<std::int32_t>(dev, build, build * 2, 4);
    std::uint64_t pairs = 0;
    const double ms = median_ms(runs, [&] {
      auto [a, b] = pk | kiln::join(bk, _1, _1) | kiln::to_buffer();
      pairs = a.size();
    });
    std::printf("%-34s %12llu %12llu %10.3f %12.1f   (build %llu)\n", "join int32 (pairs)",
                (unsigned long long)probe, (unsigned long long)pairs, ms, double(probe) / ms * 1e-3,
                (unsigned long long)build);
  }
  return 0;
}
