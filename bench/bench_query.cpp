// bench_query: kiln::query against the copy roof, on the CUDA device (when there is one) and on
// the CPU device. Peers: bench_thrust_query (Thrust/CUB), torch_query.py (PyTorch eager),
// bench_cpu_query_baselines (OpenMP, std::execution::par_unseq); scripts/gpu_bench_query.sh
// runs all of them and joins their CSVs.
//
//   bench_query [--csv FILE] [--runs N] [--warmup N] [--sizes 1M,16M,256M]
//               [--host-sizes 16M,256M|none] [--device all|cuda|cpu|SPEC]
//
// Cases, on float32 x uniform on [0, 1) (bench_args.hpp), device-resident:
//   map             x | transform(_1 * 2) | to_buffer
//   filter          x | filter(_1 > 0.5) | to_buffer                       (about half survive)
//   map_filter_map  x | transform(_1 * 2) | filter(_1 > 1) | transform(_1 + 100) | to_buffer
//   sum             x | sum
//   inclusive_scan  x | inclusive_scan | to_buffer
// host-resident (std::vector in, std::vector out):
//   host_map_filter_map  v | on(dev) | transform | filter | transform | to_vector
//   host_sum             v | on(dev) | sum                           (the host-to-device path)
// roofs: copy (queue::copy, device to device, at each size), copy_roof (1 GiB, as
// bench_foundation), host_roundtrip (queue::copy of a std::vector to the device and back),
// pinned_roundtrip (the same through kiln::pinned_buffers, event-timed: the copy engines' rate;
// each host query also prints its bytes in + out per second as a share of this).
//
// Timing: a query's terminal returns its result, so a run is timed on the host (steady_clock)
// around the whole call, followed by device::synchronize() so that work a terminal might leave
// queued (a to_buffer) is counted; the result is released after the clock stops. Median of
// --runs runs after --warmup runs (the first compiles). Copies are timed with Kiln events, as in
// bench_foundation. launches: kiln::last_query_stats().kernel_launches of the last timed run.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <kiln/kiln.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.hpp"
#include "bench_report.hpp"

namespace kiln_bench {
namespace {

using namespace kiln::placeholders;

struct timing {
  double ms = 0;
  long long launches = -1;
};

// Median wall-clock milliseconds of run() (which returns the query's result, kept alive until
// the clock has stopped), each followed by a device synchronize.
template <class Run>
timing time_query(const kiln::device& dev, const args& a, Run&& run) {
  for (int i = 0; i < a.warmup; ++i) {
    [[maybe_unused]] auto r = run();
    dev.synchronize();
  }
  std::vector<double> ms;
  timing t;
  for (int i = 0; i < a.runs; ++i) {
    const auto t0 = clock_type::now();
    [[maybe_unused]] auto r = run();
    dev.synchronize();
    ms.push_back(seconds_since(t0) * 1e3);
    t.launches = static_cast<long long>(kiln::last_query_stats().kernel_launches);
  }
  t.ms = median(ms);
  return t;
}

// Median event-timed milliseconds of work() on q, after the warm-up (as bench_foundation).
double event_median_ms(kiln::queue& q, const args& a, const std::function<void()>& work) {
  for (int i = 0; i < std::max(a.warmup, 1); ++i) work();
  q.finish();
  std::vector<double> ms;
  for (int i = 0; i < a.runs; ++i) {
    kiln::event start = q.record();
    work();
    kiln::event stop = q.record();
    stop.wait();
    ms.push_back(kiln::elapsed_ms(start, stop));
  }
  return median(ms);
}

std::vector<float> make_data(std::uint64_t n) {
  std::vector<float> x(n);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (std::uint64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) x[i] = data_value(i);
    });
  for (std::thread& th : pool) th.join();
  return x;
}

// Room for a device-resident size: input, output, scan/filter scratch, the host side copies.
bool fits(const kiln::device& dev, std::uint64_t n) {
  const std::uint64_t mem = dev.info().global_mem_bytes;
  return mem == 0 || 4 * n * sizeof(float) + (256ull << 20) <= mem;
}

class bench {
 public:
  bench(const kiln::device& dev, const args& a, std::vector<result>& rows, int& status)
      : dev_(dev), id_(dev.id()), a_(a), rows_(rows), status_(status) {}

  void run() {
    std::printf("== %s: %s\n", id_.c_str(), dev_.info().name.c_str());
    std::fflush(stdout);
    copy_roof();
    for (std::uint64_t n : a_.sizes) {
      if (!fits(dev_, n)) {
        std::printf("%s: skipping n=%s (device memory %llu bytes)\n", id_.c_str(),
                    size_label(n).c_str(), (unsigned long long)dev_.info().global_mem_bytes);
        continue;
      }
      guarded("device-resident n=" + size_label(n), [&] { device_cases(n); });
    }
    for (std::uint64_t n : a_.host_sizes) {
      if (!fits(dev_, n)) continue;
      guarded("host-resident n=" + size_label(n), [&] { host_cases(n); });
    }
  }

 private:
  void guarded(const std::string& what, const std::function<void()>& f) {
    try {
      f();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s %s: %s\n", id_.c_str(), what.c_str(), e.what());
      status_ = 1;
    }
  }

  void add(const std::string& name, std::uint64_t n, double bytes, double ms, long long launches,
           const std::string& timer, const std::string& check) {
    result r;
    r.name = name;
    r.impl = "kiln";
    r.device = id_;
    r.n = n;
    r.median_ms = ms;
    r.gbs = gbs_of(bytes, ms);
    r.launches = launches;
    r.wall_ms = timer == "wall" ? ms : -1;
    r.timer = timer;
    r.check = check;
    if (check == "WRONG") {
      std::fprintf(stderr, "%s %s n=%s: WRONG result\n", id_.c_str(), name.c_str(),
                   size_label(n).c_str());
      status_ = 1;
    }
    std::printf("  %-20s n=%-5s %10.4f ms %9.1f GB/s  launches %s  %s\n", name.c_str(),
                size_label(n).c_str(), ms, r.gbs,
                launches < 0 ? "NA" : std::to_string(launches).c_str(), check.c_str());
    std::fflush(stdout);
    rows_.push_back(r);
  }

  // 1 GiB device to device (2 GiB moved), or the largest size when that does not fit.
  void copy_roof() {
    std::uint64_t n = 256ull << 20;
    if (!fits(dev_, n)) n = *std::max_element(a_.sizes.begin(), a_.sizes.end());
    guarded("copy roof", [&] {
      kiln::queue q(dev_);
      kiln::buffer<float> src(dev_, n), dst(dev_, n);
      q.fill(src, 1.0f);
      const double ms = event_median_ms(q, a_, [&] { q.copy(src, dst); });
      add("copy_roof", n, 2.0 * 4 * double(n), ms, -1, "event", "ok");
    });
  }

  void device_cases(std::uint64_t n) {
    const std::vector<float> hx = make_data(n);
    const expected e = expect(hx.data(), n);
    kiln::buffer<float> x(dev_, hx);
    const double in = 4.0 * double(n);

    {  // copy at this size, by events
      kiln::queue q(dev_);
      kiln::buffer<float> dst(dev_, n);
      const double ms = event_median_ms(q, a_, [&] { q.copy(x, dst); });
      add("copy", n, 2 * in, ms, -1, "event", "ok");
    }
    {
      auto run = [&] { return x | kiln::transform(_1 * 2.f) | kiln::to_buffer(); };
      const timing t = time_query(dev_, a_, run);
      const std::vector<float> y = run().to_vector();
      bool ok = y.size() == n;
      for (std::uint64_t i = 0; ok && i < n; ++i) ok = y[i] == 2.f * hx[i];
      add("map", n, 2 * in, t.ms, t.launches, "wall", ok ? "ok" : "WRONG");
    }
    {
      const float thr = filter_threshold;
      auto run = [&] { return x | kiln::filter(_1 > thr) | kiln::to_buffer(); };
      const timing t = time_query(dev_, a_, run);
      const std::vector<float> y = run().to_vector();
      add("filter", n, in + 4.0 * double(y.size()), t.ms, t.launches, "wall",
          order_note(survivors_match(y.data(), y.size(), e.filter_count, e.filter_sum), y,
                     hx, [](float v) { return v > filter_threshold ? std::optional<float>(v) : std::nullopt; }));
    }
    {
      const float thr = chain_threshold, off = chain_offset;
      auto run = [&] {
        return x | kiln::transform(_1 * 2.f) | kiln::filter(_1 > thr) |
               kiln::transform(_1 + off) | kiln::to_buffer();
      };
      const timing t = time_query(dev_, a_, run);
      const std::vector<float> y = run().to_vector();
      add("map_filter_map", n, in + 4.0 * double(y.size()), t.ms, t.launches, "wall",
          order_note(survivors_match(y.data(), y.size(), e.chain_count, e.chain_sum), y, hx,
                     [](float v) {
                       const float m = v * 2.f;
                       return m > chain_threshold ? std::optional<float>(m + chain_offset)
                                                  : std::nullopt;
                     }));
    }
    {
      float s = 0;
      const timing t = time_query(dev_, a_, [&] {
        s = x | kiln::sum();
        return s;
      });
      add("sum", n, in + 4, t.ms, t.launches, "wall", float_check(s, e.total));
    }
    {
      auto run = [&] { return x | kiln::inclusive_scan() | kiln::to_buffer(); };
      const timing t = time_query(dev_, a_, run);
      const std::vector<float> y = run().to_vector();
      add("inclusive_scan", n, 2 * in, t.ms, t.launches, "wall",
          y.size() == n ? scan_check(hx.data(), y.data(), n) : "WRONG");
    }
  }

  // "ok" when the survivors match; "ok-unordered" when they match but not in input order.
  template <class Keep>
  static std::string order_note(bool match, const std::vector<float>& y,
                                const std::vector<float>& hx, Keep keep) {
    if (!match) return "WRONG";
    std::uint64_t j = 0;
    for (std::uint64_t i = 0; i < hx.size() && j < std::min<std::uint64_t>(y.size(), 4096); ++i)
      if (auto v = keep(hx[i])) {
        if (*v != y[j]) return "ok-unordered";
        ++j;
      }
    return "ok";
  }

  void host_cases(std::uint64_t n) {
    const std::vector<float> hx = make_data(n);
    const expected e = expect(hx.data(), n);
    const double in = 4.0 * double(n);
    {  // the roof: the same bytes through queue::copy, pageable std::vector both ways
      kiln::queue q(dev_);
      kiln::buffer<float> d(dev_, n);
      std::vector<float> back(n);
      for (int i = 0; i < a_.warmup; ++i) {
        q.copy(hx, d);
        q.copy(d, back);
        q.finish();
      }
      std::vector<double> ms;
      for (int i = 0; i < a_.runs; ++i) {
        const auto t0 = clock_type::now();
        q.copy(hx, d);
        q.copy(d, back);
        q.finish();
        ms.push_back(seconds_since(t0) * 1e3);
      }
      add("host_roundtrip", n, 2 * in, median(ms), -1, "wall", back == hx ? "ok" : "WRONG");
    }
    double pinned_gbs = 0;
    {  // the roof host queries are held to: the same bytes, pinned both ways (copy engines' speed)
      kiln::queue q(dev_);
      kiln::buffer<float> d(dev_, n);
      kiln::pinned_buffer<float> up(dev_, n), down(dev_, n);
      std::copy(hx.begin(), hx.end(), up.begin());
      const double ms = event_median_ms(q, a_, [&] {
        q.copy(up, d);
        q.copy(d, down);
      });
      pinned_gbs = gbs_of(2 * in, ms);
      add("pinned_roundtrip", n, 2 * in, ms, -1, "events",
          std::equal(hx.begin(), hx.end(), down.begin()) ? "ok" : "WRONG");
    }
    // A host query's bytes in + out over its wall time, as a share of pinned_roundtrip's rate.
    const auto of_pinned = [&](const char* name, double bytes, double ms) {
      std::printf("  %-20s %5.1f%% of pinned_roundtrip's GB/s\n", name,
                  100.0 * gbs_of(bytes, ms) / std::max(pinned_gbs, 1e-9));
    };
    {  // host data in, one value out: the host-to-device path alone
      float s = 0;
      const timing t = time_query(dev_, a_, [&] {
        s = hx | kiln::on(dev_) | kiln::sum();
        return s;
      });
      add("host_sum", n, in + 4, t.ms, t.launches, "wall", float_check(s, e.total));
      of_pinned("host_sum", in + 4, t.ms);
    }
    {
      const float thr = chain_threshold, off = chain_offset;
      auto run = [&] {
        return hx | kiln::on(dev_) | kiln::transform(_1 * 2.f) | kiln::filter(_1 > thr) |
               kiln::transform(_1 + off) | kiln::to_vector();
      };
      const timing t = time_query(dev_, a_, run);
      const std::vector<float> y = run();
      add("host_map_filter_map", n, in + 4.0 * double(y.size()), t.ms, t.launches, "wall",
          survivors_match(y.data(), y.size(), e.chain_count, e.chain_sum) ? "ok" : "WRONG");
      of_pinned("host_map_filter_map", in + 4.0 * double(y.size()), t.ms);
    }
  }

  kiln::device dev_;
  std::string id_;
  const args& a_;
  std::vector<result>& rows_;
  int& status_;
};

std::string why_no_cuda() {
  for (const kiln::backend_status& b : kiln::backends())
    if (b.name == "cuda")
      return b.loaded ? "the CUDA backend loaded but found no device (" + b.detail + ")"
                      : "the CUDA backend is unavailable: " + b.detail;
  return "no CUDA plugin (libkiln_backend_cuda.so) next to libkiln or in KILN_PLUGIN_PATH";
}

}  // namespace
}  // namespace kiln_bench

int main(int argc, char** argv) {
  using namespace kiln_bench;
  const args a = parse_args(argc, argv);
  std::vector<kiln::device> devices;
  int status = 0;
  try {
    if (a.device == "all") {
      try {
        devices.push_back(kiln::device::get("cuda"));
      } catch (const kiln::error&) {
        std::printf("CUDA rows skipped: %s\n", why_no_cuda().c_str());
      }
      devices.push_back(kiln::device::get("cpu"));
    } else {
      devices.push_back(kiln::device::get(a.device));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_query: %s\n", e.what());
    return 1;
  }

  std::vector<result> rows;
  for (const kiln::device& dev : devices) bench(dev, a, rows, status).run();
  fill_pct_copy(rows);
  print_table(rows);
  if (!a.csv.empty() && !write_csv(a.csv, rows)) {
    std::fprintf(stderr, "cannot write %s\n", a.csv.c_str());
    status = 1;
  }
  return status;
}
