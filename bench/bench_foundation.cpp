// bench_foundation: the runtime's fixed costs and bandwidth against raw baselines, on the CUDA
// device (when there is one) and on the CPU device.
//
//   bench_foundation [--csv FILE] [--runs N] [--checked-only]
//
// Rows: empty-kernel launch (async back to back, and launch + sync) vs raw cuLaunchKernel;
// vector add 1M/256M floats and the 1 GiB device copy roof; kernel compile latency (cold,
// in-memory hit, disk hit in a fresh process); checked mode's cost (vector add and launch +
// wait, checked vs unchecked); 1 MB allocate + free vs cuMemAlloc/cuMemFree.
// The raw baselines dlopen libcuda.so.1, so without a driver only the CPU rows are printed.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <kiln/kiln.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench_report.hpp"
#include "raw_cuda.hpp"

extern char** environ;

namespace kiln_bench {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs argv and returns its stdout, or nullopt if it failed (its stderr passes through).
std::optional<std::string> run_child(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  std::string out;
  if (rc == 0) {
    char buf[256];
    for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) out.append(buf, std::size_t(n));
  }
  close(fds[0]);
  if (rc != 0) return std::nullopt;
  int status = 0;
  if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return std::nullopt;
  return out;
}

// Median device time of `work` on q over `runs` runs, timed with events after 3 warm-ups.
double event_median_ms(kiln::queue& q, int runs, const std::function<void()>& work) {
  for (int i = 0; i < 3; ++i) work();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    kiln::event start = q.record();
    work();
    kiln::event stop = q.record();
    stop.wait();
    ms.push_back(kiln::elapsed_ms(start, stop));
  }
  return median(ms);
}

void bench_vector_add_variants(const kiln::device& dev, double copy_gbs);

// A source no cache has seen: the nonce sits in the code, not only in a comment.
std::string unique_source(const char* kernel_name) {
  static unsigned counter = 0;
  const auto nonce = static_cast<unsigned long long>(clock_type::now().time_since_epoch().count() ^
                                                     (std::uint64_t(getpid()) << 40));
  std::ostringstream s;
  s << "// bench nonce " << nonce << "\nKILN_KERNEL void " << kernel_name
    << "(KILN_GLOBAL float* p) {\n  p[kiln_global_id(0)] = " << ++counter << ".0f;\n}\n";
  return s.str();
}

// Hidden mode `--disk-hit FILE1 FILE2 DEVICE`: in this fresh process, time program::compile +
// get_kernel of two sources the parent compiled (so they sit in KILN_CACHE_DIR) and print both
// in microseconds: the first pays the process's one-time costs (the target), the second not.
int disk_hit_child(const std::string& file1, const std::string& file2, const std::string& spec) {
  const kiln::device dev = kiln::device::get(spec);
  kiln::buffer<float> open_device(dev, 1);  // context creation is not the cache's cost
  double us[2];
  int i = 0;
  for (const auto& [file, name] : {std::pair{file1, "disk_hit"}, std::pair{file2, "disk_hit2"}}) {
    const std::string source = read_file(file);
    const auto t0 = clock_type::now();
    kiln::kernel k = kiln::program::compile(dev, source).get_kernel(name);
    us[i++] = seconds_since(t0) * 1e6;
  }
  const kiln::kernel_cache_stats st = kiln::cache_stats();
  if (st.disk_hits != 2 || st.compiles != 0) {
    std::fprintf(stderr, "disk-hit child: expected two disk hits, got %llu hits, %llu compiles\n",
                 (unsigned long long)st.disk_hits, (unsigned long long)st.compiles);
    return 2;
  }
  std::printf("%.3f %.3f\n", us[0], us[1]);
  return 0;
}

void bench_compile(const kiln::device& dev, const fs::path& root, report& rep, int& status) {
  const std::string id = dev.id();
  auto cold_once = [&] {
    const std::string src = unique_source("cold");
    const auto t0 = clock_type::now();
    kiln::program::compile(dev, src).get_kernel("cold");
    return seconds_since(t0) * 1e3;
  };
  const double first_ms = cold_once();  // includes the compiler's one-time start-up in this process
  std::vector<double> cold;
  for (int i = 0; i < 5; ++i) cold.push_back(cold_once());
  rep.add({id,
           "compile_cold_first_ms",
           "compile, cold, first in process",
           "ms",
           first_ms,
           {},
           "",
           "",
           "new source, empty cache dir"});
  rep.add({id,
           "compile_cold_ms",
           "compile, cold (median of 5)",
           "ms",
           median(cold),
           {},
           "",
           "",
           "new source each run"});

  // In-memory hit: the same source again; `keep` holds the program as a user would.
  const std::string src = unique_source("hot");
  kiln::program keep = kiln::program::compile(dev, src);
  const auto hits_before = kiln::cache_stats().memory_hits;
  std::vector<double> hot;
  for (int i = 0; i < 1000; ++i) {
    const auto t0 = clock_type::now();
    kiln::program p = kiln::program::compile(dev, src);
    hot.push_back(seconds_since(t0) * 1e6);
  }
  const double hot_us = median(hot);
  const bool all_hits = kiln::cache_stats().memory_hits - hits_before == 1000;
  rep.add({id,
           "compile_memory_hit_us",
           "compile, in-memory hit (median of 1000)",
           "us",
           hot_us,
           {},
           "",
           "",
           all_hits ? pass_fail(hot_us <= 5, "<= 5 us") : "FAIL (not all were hits)"});

  // Disk hit: the parent compiles (and stores) two new sources; fresh processes load them.
  std::vector<std::string> files;
  for (const char* name : {"disk_hit", "disk_hit2"}) {
    const std::string dsrc = unique_source(name);
    kiln::program::compile(dev, dsrc).get_kernel(name);
    files.push_back((root / (std::string(name) + "_" + dev.backend() + ".kiln")).string());
    std::ofstream(files.back(), std::ios::binary) << dsrc;
  }
  std::vector<double> first, second;
  for (int i = 0; i < 5; ++i) {
    auto out = run_child({"/proc/self/exe", "--disk-hit", files[0], files[1], id});
    double a = 0, b = 0;
    if (!out || std::sscanf(out->c_str(), "%lf %lf", &a, &b) != 2) {
      rep.note("**" + id + " disk-hit child failed** (see its message above)");
      status = 1;
      return;
    }
    first.push_back(a / 1e3);
    second.push_back(b / 1e3);
  }
  const double disk_ms = median(first);
  rep.add({id,
           "compile_disk_hit_ms",
           "compile + get_kernel, disk hit, fresh process (median of 5)",
           "ms",
           disk_ms,
           {},
           "",
           "",
           pass_fail(disk_ms <= 2, "<= 2 ms")});
  rep.add({id,
           "compile_disk_hit_later_ms",
           "compile + get_kernel, disk hit, 2nd in that process",
           "ms",
           median(second),
           {},
           "",
           "",
           "without one-time costs"});
}

void bench_launch(const kiln::device& dev, raw_cuda* raw, report& rep) {
  const std::string id = dev.id();
  kiln::kernel k = kiln::program::compile(dev, "KILN_KERNEL void empty(KILN_GLOBAL float* p) {}")
                       .get_kernel("empty");
  kiln::buffer<float> p(dev, 1);
  kiln::queue q(dev);
  // Kiln's default work-group for range(1): the kernel's preferred size; the raw loop matches.
  const unsigned block = std::min(k.preferred_work_group_size(), 1024u);

  auto kiln_loop = [&](int n, bool sync_each) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < n; ++i) {
      k.launch(q, kiln::range(1), p);
      if (sync_each) q.finish();
    }
    q.finish();
    return seconds_since(t0);
  };
  kiln_loop(1000, false);  // warm-up: module load, queue, driver paths
  if (raw) raw->launch_loop(1000, false, block);

  // Interleaved repetitions, so that clock or thermal drift hits both sides alike.
  struct mode {
    bool sync;
    int n;
    const char* metric;
    const char* what;
  };
  for (const mode m :
       {mode{false, 20000, "launch_async_us", "empty kernel launch, async back to back"},
        mode{true, 5000, "launch_sync_us", "empty kernel launch + sync"}}) {
    std::vector<double> kt, rt;
    for (int r = 0; r < 5; ++r) {
      kt.push_back(kiln_loop(m.n, m.sync) / m.n * 1e6);
      if (raw) rt.push_back(raw->launch_loop(m.n, m.sync, block) / m.n * 1e6);
    }
    row out{id, m.metric, m.what, "us", median(kt), {}, "cuda_driver", "raw cuLaunchKernel", ""};
    if (raw) {
      out.baseline = median(rt);
      const double over = *out.kiln - *out.baseline;
      out.verdict = (over >= 0 ? "+" : "") + report::fmt(over) + " us; " +
                    pass_fail(over <= 1.0, "<= raw + 1 us");
    }
    rep.add(out);
  }
}

// Bandwidths by Kiln events: c = a + b (12 bytes/element), and a 1 GiB device copy (2 GiB moved).
void bench_bandwidth(const kiln::device& dev, int runs, report& rep, int& status) {
  const std::string id = dev.id();
  kiln::queue q(dev);
  auto median_ms = [&](const std::function<void()>& work) {
    return event_median_ms(q, runs, work);
  };

  const std::uint64_t copy_n = (1ull << 30) / sizeof(float);
  double copy_gbs = 0;
  {
    kiln::buffer<float> src(dev, copy_n), dst(dev, copy_n);
    q.fill(src, 1.0f);
    const double ms = median_ms([&] { q.copy(src, dst); });
    copy_gbs = 2.0 * double(copy_n * sizeof(float)) / (ms * 1e-3) / 1e9;
    rep.add({id,
             "copy_1GiB_gbs",
             "device copy 1 GiB (bytes read + written)",
             "GB/s",
             copy_gbs,
             {},
             "",
             "",
             "copy roof"});
  }

  kiln::kernel add = kiln::program::compile(dev, R"(
    KILN_KERNEL void vector_add(KILN_GLOBAL float* c, KILN_GLOBAL const float* a,
                                KILN_GLOBAL const float* b) {
      const uint64_t i = kiln_global_id(0);
      c[i] = a[i] + b[i];
    })")
                         .get_kernel("vector_add");
  for (const auto& [n, label] : {std::pair{1ull << 20, "1M"}, std::pair{256ull << 20, "256M"}}) {
    kiln::buffer<float> a(dev, n), b(dev, n), c(dev, n);
    q.fill(a, 1.5f);
    q.fill(b, 2.25f);
    const double ms = median_ms([&] { add.launch(q, kiln::range(n), c, a, b); });
    q.finish();
    // Spot-check both ends: a wrong kernel would make the bandwidth meaningless.
    for (auto v : {c.subview(0, 1024).to_vector(), c.subview(n - 1024, 1024).to_vector()})
      for (float x : v)
        if (x != 3.75f) {
          rep.note("**" + id + " vector add " + label + " produced wrong results**");
          status = 1;
          return;
        }
    const double gbs = 12.0 * double(n) / (ms * 1e-3) / 1e9;
    char verdict[128];
    std::snprintf(
        verdict, sizeof verdict, "%.1f%% of copy; %s per add", 100.0 * gbs / copy_gbs,
        ms < 1 ? (report::fmt(ms * 1e3) + " us").c_str() : (report::fmt(ms) + " ms").c_str());
    rep.add({id,
             std::string("vector_add_") + label + "_gbs",
             std::string("vector add c = a + b, ") + label + " floats",
             "GB/s",
             gbs,
             {},
             "",
             "",
             verdict});
  }
  bench_vector_add_variants(dev, copy_gbs);
}

// Where the 256M vector add loses to Thrust: work-group size, restrict, and items per thread.
// Printed as information; the headline row above is the plain kernel with Kiln's defaults.
void bench_vector_add_variants(const kiln::device& dev, double copy_gbs) {
  if (dev.info().type != kiln::device_type::gpu) return;
  const std::uint64_t n = 256ull << 20;
  kiln::queue q(dev);
  kiln::buffer<float> a(dev, n), b(dev, n), c(dev, n);
  q.fill(a, 1.5f);
  q.fill(b, 2.25f);
  auto median_ms = [&](const std::function<void()>& work) { return event_median_ms(q, 20, work); };
  kiln::program p = kiln::program::compile(dev, R"(
    KILN_KERNEL void plain(KILN_GLOBAL float* c, KILN_GLOBAL const float* a,
                           KILN_GLOBAL const float* b) {
      const uint64_t i = kiln_global_id(0);
      c[i] = a[i] + b[i];
    }
    KILN_KERNEL void restricted(KILN_GLOBAL float* KILN_RESTRICT c,
                                KILN_GLOBAL const float* KILN_RESTRICT a,
                                KILN_GLOBAL const float* KILN_RESTRICT b) {
      const uint64_t i = kiln_global_id(0);
      c[i] = a[i] + b[i];
    }
    KILN_KERNEL void four_per_item(KILN_GLOBAL float* KILN_RESTRICT c,
                                   KILN_GLOBAL const float* KILN_RESTRICT a,
                                   KILN_GLOBAL const float* KILN_RESTRICT b) {
      const uint64_t i = kiln_global_id(0), s = kiln_global_size(0);
      const float a0 = a[i], a1 = a[i + s], a2 = a[i + 2 * s], a3 = a[i + 3 * s];
      const float b0 = b[i], b1 = b[i + s], b2 = b[i + 2 * s], b3 = b[i + 3 * s];
      c[i] = a0 + b0; c[i + s] = a1 + b1; c[i + 2 * s] = a2 + b2; c[i + 3 * s] = a3 + b3;
    })");
  std::printf(
      "\n| %s vector add 256M variant | local size | GB/s | %% of copy |\n| --- | --- | --- | --- "
      "|\n",
      dev.id().c_str());
  auto row = [&](const char* name, std::uint32_t local, std::uint64_t items,
                 const std::function<void()>& launch) {
    const double ms = median_ms(launch);
    q.finish();
    const double gbs = 12.0 * double(n) / (ms * 1e-3) / 1e9;
    std::printf("| %s | %s | %.0f | %.1f%% |\n", name,
                local ? std::to_string(local).c_str() : "default", gbs, 100.0 * gbs / copy_gbs);
    (void)items;
  };
  kiln::kernel plain = p.get_kernel("plain"), restricted = p.get_kernel("restricted"),
               four = p.get_kernel("four_per_item");
  std::printf("| (kiln's default local size for plain: %u) | | | |\n",
              plain.preferred_work_group_size());
  row("plain", 0, n, [&] { plain.launch(q, kiln::range(n), c, a, b); });
  for (std::uint32_t l : {128u, 256u, 512u, 1024u})
    row("plain", l, n, [&] { plain.launch(q, kiln::range(n), kiln::local_size(l), c, a, b); });
  row("restrict", 0, n, [&] { restricted.launch(q, kiln::range(n), c, a, b); });
  row("restrict", 256, n,
      [&] { restricted.launch(q, kiln::range(n), kiln::local_size(256), c, a, b); });
  row("restrict, 4 per item", 0, n / 4, [&] { four.launch(q, kiln::range(n / 4), c, a, b); });
  row("restrict, 4 per item", 256, n / 4,
      [&] { four.launch(q, kiln::range(n / 4), kiln::local_size(256), c, a, b); });
  for (float x : c.subview(n - 1024, 1024).to_vector())
    if (x != 3.75f) std::printf("**variant produced wrong results**\n");
}

// Checked mode's cost (docs/kernel_language.md, "Checked mode"): one memory-bound kernel
// compiled checked and unchecked. Device time by events (a checked launch adds a 64-byte fill
// and read-back around the kernel), then the host time of launch + wait on one element, the
// fixed cost every checked launch pays (it allocates its error record and waits).
void bench_checked(const kiln::device& dev, int runs, report& rep, int& status) {
  const std::string id = dev.id();
  const bool gpu = dev.info().type == kiln::device_type::gpu;
  const std::uint64_t n = gpu ? 256ull << 20 : 16ull << 20;
  const std::string label = gpu ? "256M" : "16M";
  const char* src = R"(
    KILN_KERNEL void vector_add(KILN_GLOBAL float* c, KILN_GLOBAL const float* a,
                                KILN_GLOBAL const float* b) {
      const uint64_t i = kiln_global_id(0);
      c[i] = a[i] + b[i];
    })";
  kiln::queue q(dev);
  kiln::buffer<float> a(dev, n), b(dev, n), c(dev, n);
  q.fill(a, 1.5f);
  q.fill(b, 2.25f);
  kiln::kernel k[2] = {
      kiln::program::compile(dev, src, {}, kiln::check_mode::off).get_kernel("vector_add"),
      kiln::program::compile(dev, src, {}, kiln::check_mode::bounds).get_kernel("vector_add")};
  double ms[2], sync_us[2];
  for (int m = 0; m < 2; ++m) {
    c.fill(0.0f);
    ms[m] = event_median_ms(q, runs, [&] { k[m].launch(q, kiln::range(n), c, a, b); });
    q.finish();
    for (float x : c.subview(n - 1024, 1024).to_vector())
      if (x != 3.75f) {
        rep.note("**" + id + " checked-mode vector add produced wrong results**");
        status = 1;
        return;
      }
    std::vector<double> us;
    for (int i = 0; i < 2000; ++i) {
      const auto t0 = clock_type::now();
      k[m].launch(q, kiln::range(1), c, a, b);
      q.finish();
      us.push_back(seconds_since(t0) * 1e6);
    }
    sync_us[m] = median(us);
  }
  rep.add({id, "checked_vector_add_" + label + "_ms",
           "vector add " + label + " floats, checked mode (KILN_CHECK=bounds)", "ms", ms[1], ms[0],
           "kiln_unchecked", "unchecked", report::fmt(ms[1] / ms[0]) + "x of unchecked"});
  rep.add({id, "checked_launch_sync_us", "launch + wait, 1 item, checked mode", "us", sync_us[1],
           sync_us[0], "kiln_unchecked", "unchecked",
           "+" + report::fmt(sync_us[1] - sync_us[0]) + " us per launch"});
}

void bench_alloc(const kiln::device& dev, raw_cuda* raw, report& rep) {
  const std::string id = dev.id();
  constexpr std::uint64_t bytes = 1 << 20;
  auto kiln_median = [&](int n) {
    std::vector<double> us;
    for (int i = 0; i < n; ++i) {
      const auto t0 = clock_type::now();
      { kiln::buffer<std::uint8_t> b(dev, bytes); }
      us.push_back(seconds_since(t0) * 1e6);
    }
    return median(us);
  };
  kiln_median(100);  // warm-up: fills the pool
  const double k = kiln_median(10000);
  row out{id, "alloc_1MB_us", "1 MB buffer allocate + free (median)", "us", k, {}, "", "", ""};
  if (dev.backend() == "cuda") {
    out.baseline_impl = "cuda_driver";
    out.baseline_label = "cuMemAlloc + cuMemFree";
    if (raw) out.baseline = raw->alloc_free_median(2000, bytes) * 1e6;
    out.verdict = pass_fail(k <= 5, "<= 5 us");
  } else {
    // A compiler may drop a malloc/free pair; the volatile sink keeps it.
    static void* volatile sink;
    std::vector<double> us;
    for (int i = 0; i < 10000; ++i) {
      const auto t0 = clock_type::now();
      sink = std::aligned_alloc(64, bytes);
      std::free(sink);
      us.push_back(seconds_since(t0) * 1e6);
    }
    out.baseline = median(us);
    out.baseline_impl = "libc";
    out.baseline_label = "aligned_alloc + free";
  }
  if (out.baseline && *out.baseline > 0)
    out.verdict = report::fmt(k / *out.baseline) + "x of baseline" +
                  (out.verdict.empty() ? "" : "; " + out.verdict);
  rep.add(out);
}

bool g_checked_only = false;  // --checked-only: checked mode's rows alone

void bench_device(const kiln::device& dev, raw_cuda* raw, const fs::path& root, int runs,
                  report& rep, int& status) {
  std::printf("== %s: %s\n", dev.id().c_str(), dev.info().name.c_str());
  std::fflush(stdout);
  try {
    if (g_checked_only) return bench_checked(dev, runs, rep, status);
    // Compile first, so that "first in process" really is this device's first compile.
    bench_compile(dev, root, rep, status);
    bench_launch(dev, raw, rep);
    bench_bandwidth(dev, runs, rep, status);
    bench_checked(dev, runs, rep, status);
    bench_alloc(dev, raw, rep);
  } catch (const std::exception& e) {
    rep.note("**" + dev.id() + " rows incomplete**: " + e.what());
    std::fprintf(stderr, "%s: %s\n", dev.id().c_str(), e.what());
    status = 1;
  }
}

// Why no CUDA device: the backend's own explanation when Kiln has one.
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
  std::string csv;
  int runs = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--disk-hit" && i + 3 < argc)
      return disk_hit_child(argv[i + 1], argv[i + 2], argv[i + 3]);
    if (a == "--csv" && i + 1 < argc)
      csv = argv[++i];
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(20, std::atoi(argv[++i]));
    else if (a == "--checked-only")
      g_checked_only = true;
    else {
      std::fprintf(stderr, "usage: %s [--csv FILE] [--runs N>=20] [--checked-only]\n", argv[0]);
      return 2;
    }
  }

  // A fresh cache directory, set before Kiln first reads KILN_CACHE_DIR; children inherit it.
  char root_template[] = "/tmp/kiln-bench-XXXXXX";
  if (!mkdtemp(root_template)) {
    std::perror("mkdtemp");
    return 1;
  }
  const fs::path root = root_template;
  setenv("KILN_CACHE_DIR", (root / "cache").c_str(), 1);

  report rep;
  int status = 0;
  std::optional<kiln::device> gpu;
  try {
    gpu = kiln::device::get("cuda");
  } catch (const kiln::error&) {
  }
  if (gpu) {
    std::string why;
    std::unique_ptr<raw_cuda> raw = raw_cuda::open(gpu->index(), &why);
    if (!raw) rep.note("Raw CUDA baselines skipped: " + why);
    bench_device(*gpu, raw.get(), root, runs, rep, status);
  } else {
    const std::string why = why_no_cuda();
    std::printf("CUDA rows skipped: %s\n", why.c_str());
    rep.note("CUDA rows skipped: " + why);
  }
  bench_device(kiln::device::get("cpu"), nullptr, root, runs, rep, status);

  rep.print_markdown(stdout);
  if (!csv.empty() && !rep.write_csv(csv)) {
    std::fprintf(stderr, "cannot write %s\n", csv.c_str());
    status = 1;
  }
  std::error_code ec;
  fs::remove_all(root, ec);
  return status;
}
