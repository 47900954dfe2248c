// Timing helpers and the result table shared by the benchmarks: one row per measurement,
// printed as markdown and written as a long-format CSV (device,metric,impl,value,unit) that
// scripts/gpu_bench.sh joins with the Thrust benchmark's CSV.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace kiln_bench {

using clock_type = std::chrono::steady_clock;

inline double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Median of a copy (samples are small).
inline double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One measurement: Kiln's figure, optionally a baseline's, and how to judge it.
struct row {
  std::string device;  // "cuda:0", "cpu:0"
  std::string metric;  // CSV key, e.g. "launch_async_us"
  std::string what;    // human label
  std::string unit;    // "us", "ms", "GB/s"
  std::optional<double> kiln, baseline;
  std::string baseline_impl;   // CSV impl of the baseline: "cuda_driver", "libc"
  std::string baseline_label;  // shown next to the baseline value
  std::string verdict;         // "ratio/target" column
};

class report {
 public:
  void add(row r) { rows_.push_back(std::move(r)); }
  void note(std::string line) { notes_.push_back(std::move(line)); }

  void print_markdown(std::FILE* out) const {
    std::fprintf(out, "\n| what | kiln | baseline | ratio / target |\n| --- | --- | --- | --- |\n");
    for (const row& r : rows_) {
      std::string base = "—";
      if (r.baseline) base = fmt(*r.baseline) + " " + r.unit + " (" + r.baseline_label + ")";
      std::fprintf(out, "| %s %s | %s | %s | %s |\n", r.device.c_str(), r.what.c_str(),
                   r.kiln ? (fmt(*r.kiln) + " " + r.unit).c_str() : "—", base.c_str(),
                   r.verdict.empty() ? "—" : r.verdict.c_str());
    }
    for (const std::string& n : notes_) std::fprintf(out, "\n%s\n", n.c_str());
  }

  bool write_csv(const std::string& path) const {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return false;
    std::fprintf(f, "device,metric,impl,value,unit\n");
    for (const row& r : rows_) {
      if (r.kiln)
        std::fprintf(f, "%s,%s,kiln,%.6g,%s\n", r.device.c_str(), r.metric.c_str(), *r.kiln,
                     r.unit.c_str());
      if (r.baseline)
        std::fprintf(f, "%s,%s,%s,%.6g,%s\n", r.device.c_str(), r.metric.c_str(),
                     r.baseline_impl.c_str(), *r.baseline, r.unit.c_str());
    }
    return std::fclose(f) == 0;
  }

  // Three significant-ish digits without scientific notation for typical figures.
  static std::string fmt(double v) {
    char buf[64];
    const double a = v < 0 ? -v : v;
    std::snprintf(buf, sizeof buf,
                  a >= 100  ? "%.0f"
                  : a >= 10 ? "%.1f"
                  : a >= 1  ? "%.2f"
                            : "%.3f",
                  v);
    return buf;
  }

 private:
  std::vector<row> rows_;
  std::vector<std::string> notes_;
};

// "PASS"/"FAIL" with the target spelled out, e.g. pass_fail(3.1, 5, "<= 5 us").
inline std::string pass_fail(bool ok, const std::string& target) {
  return std::string(ok ? "PASS" : "FAIL") + " (target " + target + ")";
}

}  // namespace kiln_bench
