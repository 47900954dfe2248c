// Command line, sizes, test data and the result table shared by the kiln::query benchmarks
// (bench_query.cpp with g++, thrust_query.cu with nvcc, cpu_query_baselines.cpp with g++ and
// OpenMP). C++17, no CUDA and no Kiln: usable from every one of them.
//
// Every one of them prints the same table and writes the same CSV (bench/torch_query.py too):
//
//   name,impl,device,n,median_ms,gbs,pct_copy,launches,wall_ms,timer,check
//
//   name       case: map, filter, map_filter_map, sum, inclusive_scan, copy, copy_roof,
//              host_map_filter_map, host_roundtrip
//   impl       kiln, thrust (Thrust or CUB, the way a user of them would write it), cub_fused,
//              torch, omp, par_unseq, memcpy
//   device     cuda:0, cpu:0 (Kiln's ids)
//   n          input elements (float32)
//   median_ms  median time of one run after warm-up, by `timer`
//   gbs        (input bytes + output bytes) / median_ms; output bytes count only what is kept
//              (survivors of a filter, 4 bytes for a sum)
//   pct_copy   100 * gbs / gbs of this run's copy roof (device-to-device copy of 1 GiB, or of
//              the largest size run); host_* rows: of host_roundtrip at the same n; NA if none
//   launches   kernels one run launched (kiln::last_query_stats(), or the profiler); NA unknown
//   wall_ms    median host wall-clock time of one run including the synchronisation that makes
//              the result usable (equal to median_ms where the timer is wall)
//   timer      event (cudaEvent / kiln event pairs on the stream) or wall (steady_clock)
//   check      ok, WRONG, or relerr=... (float sums and scans outside 1e-3, information only)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln_bench {

// "1M" -> 1 << 20, "16M", "256M", "4K", "1G", or a plain count.
inline bool parse_count(const std::string& s, std::uint64_t& out) {
  if (s.empty()) return false;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (end == s.c_str()) return false;
  const std::string suffix(end);
  std::uint64_t mult = 1;
  if (suffix == "K" || suffix == "k")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g")
    mult = 1ull << 30;
  else if (!suffix.empty())
    return false;
  out = std::uint64_t(v) * mult;
  return out > 0;
}

inline bool parse_sizes(const std::string& list, std::vector<std::uint64_t>& out) {
  out.clear();
  std::size_t start = 0;
  while (start <= list.size()) {
    const std::size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    std::uint64_t n = 0;
    if (!parse_count(item, n)) return false;
    out.push_back(n);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return !out.empty();
}

// 1048576 -> "1M"; other counts as they are.
inline std::string size_label(std::uint64_t n) {
  if (n >= (1ull << 30) && n % (1ull << 30) == 0) return std::to_string(n >> 30) + "G";
  if (n >= (1ull << 20) && n % (1ull << 20) == 0) return std::to_string(n >> 20) + "M";
  if (n >= (1ull << 10) && n % (1ull << 10) == 0) return std::to_string(n >> 10) + "K";
  return std::to_string(n);
}

struct args {
  std::string csv;
  int runs = 20;
  int warmup = 3;
  std::vector<std::uint64_t> sizes{1ull << 20, 16ull << 20, 256ull << 20};  // device-resident
  std::vector<std::uint64_t> host_sizes{16ull << 20, 256ull << 20};         // host-resident
  std::string device = "all";  // bench_query: all, cuda, cpu, or a Kiln spec (cuda:1)
  std::string impl = "all";    // bench_cpu_query_baselines: all, omp or par_unseq
  bool sizes_given = false, host_sizes_given = false;
};

inline void print_usage(const char* prog) {
  std::fprintf(stderr,
               "usage: %s [--csv FILE] [--runs N] [--warmup N] [--sizes 1M,16M,256M]\n"
               "          [--host-sizes 16M,256M] [--device all|cuda|cpu|SPEC]\n"
               "          [--impl all|omp|par_unseq]  (CPU baselines only)\n"
               "  sizes: counts of float32 elements, suffixes K, M, G (powers of 2);\n"
               "  --host-sizes none skips the host-resident rows\n",
               prog);
}

// Parses the common flags; prints the usage and exits with 2 on anything else.
inline args parse_args(int argc, char** argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const bool has_value = i + 1 < argc;
    if (f == "--csv" && has_value) {
      a.csv = argv[++i];
    } else if (f == "--runs" && has_value) {
      a.runs = std::max(1, std::atoi(argv[++i]));
    } else if (f == "--warmup" && has_value) {
      a.warmup = std::max(0, std::atoi(argv[++i]));
    } else if (f == "--sizes" && has_value) {
      if (!parse_sizes(argv[++i], a.sizes)) {
        print_usage(argv[0]);
        std::exit(2);
      }
      a.sizes_given = true;
    } else if (f == "--host-sizes" && has_value) {
      const std::string v = argv[++i];
      if (v == "none")
        a.host_sizes.clear();
      else if (!parse_sizes(v, a.host_sizes)) {
        print_usage(argv[0]);
        std::exit(2);
      }
      a.host_sizes_given = true;
    } else if (f == "--device" && has_value) {
      a.device = argv[++i];
    } else if (f == "--impl" && has_value) {
      a.impl = argv[++i];
    } else {
      print_usage(argv[0]);
      std::exit(2);
    }
  }
  if (a.runs < 20)
    std::fprintf(stderr, "note: --runs %d is below the 20 the published figures use\n", a.runs);
  return a;
}

// ---- test data ----------------------------------------------------------------------------
// x[i] = (splitmix64(i) >> 40) / 2^24: uniform on [0, 1), exactly representable in float, the
// same in every benchmark (torch_query.py computes the same hash). Thresholds: filter keeps
// x > 0.5, the chain keeps 2x > 1.0; both about half.
constexpr float filter_threshold = 0.5f;
constexpr float chain_threshold = 1.0f;  // applied to x * 2
constexpr float chain_offset = 100.0f;

inline float data_value(std::uint64_t i) {
  std::uint64_t z = i * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) * (1.0f / 16777216.0f);
}

// Expected results, computed on the host once per size.
struct expected {
  std::uint64_t filter_count = 0, chain_count = 0;
  double filter_sum = 0, chain_sum = 0;  // exact in double for this data (multiples of 2^-24)
  double total = 0;                      // sum of x
};

inline expected expect(const float* x, std::uint64_t n) {
  expected e;
  for (std::uint64_t i = 0; i < n; ++i) {
    const float v = x[i];
    e.total += v;
    if (v > filter_threshold) {
      ++e.filter_count;
      e.filter_sum += v;
    }
    const float m = v * 2.0f;
    if (m > chain_threshold) {
      ++e.chain_count;
      e.chain_sum += double(m + chain_offset);
    }
  }
  return e;
}

// Filter results: count and the (order-independent, exact) sum of the survivors.
inline bool survivors_match(const float* y, std::uint64_t count, std::uint64_t want_count,
                            double want_sum) {
  if (count != want_count) return false;
  double s = 0;
  for (std::uint64_t i = 0; i < count; ++i) s += y[i];
  return s == want_sum;
}

// "ok" when |got - want| <= 1e-3 relative, else "relerr=..." (float sums differ by order).
inline std::string float_check(double got, double want) {
  const double rel = std::fabs(got - want) / std::max(std::fabs(want), 1.0);
  if (rel <= 1e-3) return "ok";
  char buf[48];
  std::snprintf(buf, sizeof buf, "relerr=%.1e", rel);
  return buf;
}

// An inclusive scan of the test data, checked at about 1000 evenly spaced positions and the
// last one against a double prefix sum; worst relative error as float_check does.
inline std::string scan_check(const float* x, const float* y, std::uint64_t n) {
  const std::uint64_t step = std::max<std::uint64_t>(1, n / 1000);
  double run = 0, worst = 0, got = 0, want = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    run += x[i];
    if (i % step == 0 || i == n - 1) {
      const double rel = std::fabs(double(y[i]) - run) / std::max(std::fabs(run), 1.0);
      if (rel > worst) {
        worst = rel;
        got = y[i];
        want = run;
      }
    }
  }
  return worst == 0 ? "ok" : float_check(got, want);
}

// ---- results ------------------------------------------------------------------------------
struct result {
  std::string name, impl, device;
  std::uint64_t n = 0;
  double median_ms = 0, gbs = 0;
  double pct_copy = -1;        // < 0: NA
  long long launches = -1;     // < 0: NA
  double wall_ms = -1;         // < 0: NA
  std::string timer = "wall";  // "event" or "wall"
  std::string check = "ok";
};

inline double gbs_of(double bytes, double ms) { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0; }

inline std::string fmt_num(double v, const char* f) {
  if (v < 0 || std::isnan(v)) return "NA";
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

inline const char* csv_header() {
  return "name,impl,device,n,median_ms,gbs,pct_copy,launches,wall_ms,timer,check";
}

// One whitespace-separated line per row, the CSV's columns in the same order.
inline void print_table(const std::vector<result>& rows, std::FILE* out = stdout) {
  std::fprintf(out, "\n%-20s %-10s %-7s %10s %11s %9s %8s %8s %11s %-5s %s\n", "name", "impl",
               "device", "n", "median_ms", "GB/s", "%copy", "launches", "wall_ms", "timer",
               "check");
  for (const result& r : rows)
    std::fprintf(out, "%-20s %-10s %-7s %10llu %11s %9s %8s %8s %11s %-5s %s\n", r.name.c_str(),
                 r.impl.c_str(), r.device.c_str(), (unsigned long long)r.n,
                 fmt_num(r.median_ms, "%.4f").c_str(), fmt_num(r.gbs, "%.1f").c_str(),
                 fmt_num(r.pct_copy, "%.1f").c_str(),
                 r.launches < 0 ? "NA" : std::to_string(r.launches).c_str(),
                 fmt_num(r.wall_ms, "%.4f").c_str(), r.timer.c_str(), r.check.c_str());
  std::fflush(out);
}

inline bool write_csv(const std::string& path, const std::vector<result>& rows) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  std::fprintf(f, "%s\n", csv_header());
  for (const result& r : rows)
    std::fprintf(f, "%s,%s,%s,%llu,%s,%s,%s,%s,%s,%s,%s\n", r.name.c_str(), r.impl.c_str(),
                 r.device.c_str(), (unsigned long long)r.n, fmt_num(r.median_ms, "%.6g").c_str(),
                 fmt_num(r.gbs, "%.6g").c_str(), fmt_num(r.pct_copy, "%.4g").c_str(),
                 r.launches < 0 ? "NA" : std::to_string(r.launches).c_str(),
                 fmt_num(r.wall_ms, "%.6g").c_str(), r.timer.c_str(), r.check.c_str());
  return std::fclose(f) == 0;
}

// Fills pct_copy of every row (of one benchmark binary): device rows against the copy_roof
// row of their device, host_* rows against host_roundtrip of the same device, impl and n.
inline void fill_pct_copy(std::vector<result>& rows) {
  for (result& r : rows) {
    if (r.name == "host_roundtrip") continue;
    const bool host = r.name.rfind("host_", 0) == 0;
    for (const result& ref : rows) {
      if (ref.device != r.device) continue;
      if (host ? (ref.name != "host_roundtrip" || ref.n != r.n) : ref.name != "copy_roof")
        continue;
      if (ref.gbs > 0) r.pct_copy = 100.0 * r.gbs / ref.gbs;
      break;
    }
  }
}

// Median of a copy (samples are small).
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace kiln_bench
