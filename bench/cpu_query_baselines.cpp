// bench_cpu_query_baselines: the CPU peers of bench_query's cases on Kiln's CPU device, in the
// same table and CSV (bench_args.hpp); device column "cpu:0" as Kiln names the CPU.
//
//   bench_cpu_query_baselines [--csv FILE] [--runs N] [--warmup N] [--sizes 1M,16M,256M]
//                             [--impl all|omp|par_unseq]
//
// scripts/gpu_bench_query.sh runs omp and par_unseq in separate processes: OpenMP's and TBB's
// worker pools, each as large as the machine, would otherwise spin against each other.
//
// impl omp: OpenMP loops as a careful person writes them, output arrays preallocated and
// touched once before timing:
//   map             parallel for: y[i] = x[i] * 2
//   filter,         per-thread count pass, exclusive prefix of the counts, branch-free write
//   map_filter_map  pass (the chain fused into both passes: one read of x per pass)
//   sum             parallel for simd reduction(+) in float
//   inclusive_scan  per-thread chunk sums, prefix of them, per-thread scan of the chunk
// impl par_unseq (only when built with TBB, libstdc++'s parallel backend): std::transform,
// std::copy_if, transform + copy_if + transform for the chain, std::reduce, std::inclusive_scan.
// impl memcpy: copy and copy_roof (1 GiB) as one std::memcpy, which is what Kiln's CPU
// queue::copy does; impl omp copy: the same bytes in per-thread memcpy chunks.
//
// Timing: steady_clock around each run, median of --runs after --warmup (timer wall).
// OpenMP threads: OMP_NUM_THREADS, else all cores (Kiln's CPU backend: KILN_CPU_THREADS).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>
#if KILN_BENCH_PAR_UNSEQ
#include <execution>
#endif

#include "bench_args.hpp"

namespace {

using namespace kiln_bench;

// Uninitialised float storage: a std::vector would zero it (and fault its pages in) in one
// thread; here the first touch is a parallel loop, as a careful OpenMP program does it.
struct array {
  std::unique_ptr<float[]> p;
  std::uint64_t n = 0;
  explicit array(std::uint64_t count) : p(new float[count]), n(count) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < std::int64_t(n); ++i) p[i] = 0.f;
  }
  float* data() const { return p.get(); }
};

template <class Run>
double time_ms(const args& a, Run&& run) {
  for (int i = 0; i < a.warmup; ++i) run();
  std::vector<double> ms;
  for (int i = 0; i < a.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median_of(ms);
}

struct ctx {
  const args& a;
  std::vector<result>& rows;
  int& status;
  void add(const std::string& name, const std::string& impl, std::uint64_t n, double bytes,
           double ms, const std::string& chk) {
    result r;
    r.name = name;
    r.impl = impl;
    r.device = "cpu:0";
    r.n = n;
    r.median_ms = ms;
    r.wall_ms = ms;
    r.gbs = gbs_of(bytes, ms);
    r.timer = "wall";
    r.check = chk;
    if (chk == "WRONG") {
      std::fprintf(stderr, "%s/%s n=%s: WRONG result\n", name.c_str(), impl.c_str(),
                   size_label(n).c_str());
      status = 1;
    }
    std::printf("  %-16s %-10s n=%-5s %10.4f ms %9.1f GB/s  %s\n", name.c_str(), impl.c_str(),
                size_label(n).c_str(), ms, r.gbs, chk.c_str());
    std::fflush(stdout);
    rows.push_back(r);
  }
};

// ---- OpenMP ---------------------------------------------------------------------------------
// Filter + map in two passes: count per thread, prefix, write. Returns the survivor count.
template <class Keep, class Out>
std::uint64_t omp_select(const float* x, std::uint64_t n, float* y, Keep keep, Out out,
                         std::vector<std::uint64_t>& offsets) {
  const int threads = omp_get_max_threads();
  offsets.assign(std::size_t(threads) + 1, 0);
  int used = 1;
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
#pragma omp single nowait
    used = nt;
    const std::uint64_t b = n * std::uint64_t(t) / std::uint64_t(nt);
    const std::uint64_t e = n * std::uint64_t(t + 1) / std::uint64_t(nt);
    std::uint64_t c = 0;
    for (std::uint64_t i = b; i < e; ++i) c += keep(x[i]) ? 1 : 0;
    offsets[std::size_t(t) + 1] = c;
#pragma omp barrier
#pragma omp single
    for (int k = 0; k < nt; ++k) offsets[std::size_t(k) + 1] += offsets[std::size_t(k)];
    // (the single's implicit barrier publishes the offsets)
    // Branch-free write (half the elements survive, so a branch mispredicts half the time):
    // every element is stored at y[j] and j advances only for survivors. The store goes to a
    // dummy once this thread's range of y is full, so it never touches the next thread's.
    std::uint64_t j = offsets[std::size_t(t)];
    const std::uint64_t full = offsets[std::size_t(t) + 1];
    float dummy = 0.f;
    for (std::uint64_t i = b; i < e; ++i) {
      const float v = x[i];
      *(j < full ? y + j : &dummy) = out(v);
      j += keep(v) ? 1 : 0;
    }
  }
  return offsets[std::size_t(used)];
}

void omp_scan(const float* x, std::uint64_t n, float* y, std::vector<float>& partial) {
  const int threads = omp_get_max_threads();
  partial.assign(std::size_t(threads) + 1, 0.f);
#pragma omp parallel num_threads(threads)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const std::uint64_t b = n * std::uint64_t(t) / std::uint64_t(nt);
    const std::uint64_t e = n * std::uint64_t(t + 1) / std::uint64_t(nt);
    float s = 0.f;
#pragma omp simd reduction(+ : s)
    for (std::uint64_t i = b; i < e; ++i) s += x[i];
    partial[std::size_t(t) + 1] = s;
#pragma omp barrier
#pragma omp single
    for (int k = 0; k < nt; ++k) partial[std::size_t(k) + 1] += partial[std::size_t(k)];
    float run = partial[std::size_t(t)];
    for (std::uint64_t i = b; i < e; ++i) {
      run += x[i];
      y[i] = run;
    }
  }
}

void device_cases(ctx& c, std::uint64_t n) {
  array x(n), y(n), t1(n), t2(n);
  float* xp = x.data();
  float* yp = y.data();
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < std::int64_t(n); ++i) xp[i] = data_value(std::uint64_t(i));
  const expected e = expect(xp, n);
  const double in = 4.0 * double(n);
  std::vector<std::uint64_t> offsets;

  const bool omp = c.a.impl == "all" || c.a.impl == "omp";
  if (omp) {
    const double ms = time_ms(c.a, [&] { std::memcpy(yp, xp, n * 4); });
    c.add("copy", "memcpy", n, 2 * in, ms, std::memcmp(xp, yp, n * 4) == 0 ? "ok" : "WRONG");
  }
  if (omp) {
    const double ms = time_ms(c.a, [&] {
#pragma omp parallel
      {
        const std::uint64_t t = std::uint64_t(omp_get_thread_num()),
                            nt = std::uint64_t(omp_get_num_threads());
        const std::uint64_t b = n * t / nt, en = n * (t + 1) / nt;
        std::memcpy(t1.data() + b, xp + b, (en - b) * 4);
      }
    });
    c.add("copy", "omp", n, 2 * in, ms, std::memcmp(xp, t1.data(), n * 4) == 0 ? "ok" : "WRONG");
  }
  auto check_map = [&] {
    for (std::uint64_t i = 0; i < n; ++i)
      if (yp[i] != 2.f * xp[i]) return "WRONG";
    return "ok";
  };
  if (omp) {
    const double ms = time_ms(c.a, [&] {
#pragma omp parallel for simd schedule(static)
      for (std::int64_t i = 0; i < std::int64_t(n); ++i) yp[i] = xp[i] * 2.f;
    });
    c.add("map", "omp", n, 2 * in, ms, check_map());
  }
  if (omp) {
    std::uint64_t count = 0;
    const double ms = time_ms(c.a, [&] {
      count = omp_select(
          xp, n, yp, [](float v) { return v > filter_threshold; }, [](float v) { return v; },
          offsets);
    });
    c.add("filter", "omp", n, in + 4.0 * double(count), ms,
          survivors_match(yp, count, e.filter_count, e.filter_sum) ? "ok" : "WRONG");
  }
  if (omp) {
    std::uint64_t count = 0;
    const double ms = time_ms(c.a, [&] {
      count = omp_select(
          xp, n, yp, [](float v) { return v * 2.f > chain_threshold; },
          [](float v) { return v * 2.f + chain_offset; }, offsets);
    });
    c.add("map_filter_map", "omp", n, in + 4.0 * double(count), ms,
          survivors_match(yp, count, e.chain_count, e.chain_sum) ? "ok" : "WRONG");
  }
  if (omp) {
    float s = 0;
    const double ms = time_ms(c.a, [&] {
      float acc = 0.f;
#pragma omp parallel for simd reduction(+ : acc) schedule(static)
      for (std::int64_t i = 0; i < std::int64_t(n); ++i) acc += xp[i];
      s = acc;
    });
    c.add("sum", "omp", n, in + 4, ms, float_check(s, e.total));
  }
  if (omp) {
    std::vector<float> partial;
    const double ms = time_ms(c.a, [&] { omp_scan(xp, n, yp, partial); });
    c.add("inclusive_scan", "omp", n, 2 * in, ms, scan_check(xp, yp, n));
  }

#if KILN_BENCH_PAR_UNSEQ
  namespace ex = std::execution;
  if (c.a.impl != "all" && c.a.impl != "par_unseq") return;
  {
    const double ms = time_ms(c.a, [&] {
      std::transform(ex::par_unseq, xp, xp + n, yp, [](float v) { return v * 2.f; });
    });
    c.add("map", "par_unseq", n, 2 * in, ms, check_map());
  }
  {
    std::uint64_t count = 0;
    const double ms = time_ms(c.a, [&] {
      count = std::uint64_t(std::copy_if(ex::par_unseq, xp, xp + n, yp,
                                         [](float v) { return v > filter_threshold; }) -
                            yp);
    });
    c.add("filter", "par_unseq", n, in + 4.0 * double(count), ms,
          survivors_match(yp, count, e.filter_count, e.filter_sum) ? "ok" : "WRONG");
  }
  {
    std::uint64_t count = 0;
    float* a1 = t1.data();
    float* a2 = t2.data();
    const double ms = time_ms(c.a, [&] {
      std::transform(ex::par_unseq, xp, xp + n, a1, [](float v) { return v * 2.f; });
      float* end = std::copy_if(ex::par_unseq, a1, a1 + n, a2,
                                [](float v) { return v > chain_threshold; });
      std::transform(ex::par_unseq, a2, end, yp, [](float v) { return v + chain_offset; });
      count = std::uint64_t(end - a2);
    });
    c.add("map_filter_map", "par_unseq", n, in + 4.0 * double(count), ms,
          survivors_match(yp, count, e.chain_count, e.chain_sum) ? "ok" : "WRONG");
  }
  {
    float s = 0;
    const double ms = time_ms(c.a, [&] { s = std::reduce(ex::par_unseq, xp, xp + n, 0.f); });
    c.add("sum", "par_unseq", n, in + 4, ms, float_check(s, e.total));
  }
  {
    const double ms =
        time_ms(c.a, [&] { std::inclusive_scan(ex::par_unseq, xp, xp + n, yp); });
    c.add("inclusive_scan", "par_unseq", n, 2 * in, ms, scan_check(xp, yp, n));
  }
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse_args(argc, argv);
  if (a.impl != "all" && a.impl != "omp" && a.impl != "par_unseq") {
    print_usage(argv[0]);
    return 2;
  }
  std::printf("== cpu:0: %d OpenMP threads (%s)\n", omp_get_max_threads(),
#if KILN_BENCH_PAR_UNSEQ
              "std::execution::par_unseq rows through TBB"
#else
              "no TBB at build time: no std::execution::par_unseq rows"
#endif
  );
  std::vector<result> rows;
  int status = 0;
  ctx c{a, rows, status};
  {  // the roof: one 1 GiB memcpy, as Kiln's CPU queue::copy
    const std::uint64_t n = 256ull << 20;
    array src(n), dst(n);
    const double ms = time_ms(a, [&] { std::memcpy(dst.data(), src.data(), n * 4); });
    c.add("copy_roof", "memcpy", n, 8.0 * double(n), ms,
          std::memcmp(src.data(), dst.data(), n * 4) == 0 ? "ok" : "WRONG");
  }
  for (std::uint64_t n : a.sizes) device_cases(c, n);
  fill_pct_copy(rows);
  print_table(rows);
  if (!a.csv.empty() && !write_csv(a.csv, rows)) {
    std::fprintf(stderr, "cannot write %s\n", a.csv.c_str());
    return 1;
  }
  return status;
}
