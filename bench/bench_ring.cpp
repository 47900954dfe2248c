// Ring-kernel benchmarks: single-message round trip (p50/p99/p99.9), throughput for 16-1024
// byte messages at host batch sizes 1-4096 with host CPU time per message, and a soak that
// checks every message. Peers (the mapped-memory ping-pong floor, launch per message, CUDA
// graph replay) are bench_ring_baselines, run beside it by scripts/gpu_bench_ring.sh.
//
//   bench_ring [--device cuda:0] [--quick] [--csv out.csv] [--soak SECONDS] [--only rt|tput]
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <string>
#include <thread>
#include <vector>

template <int N>
struct msg {
  std::uint32_t w[N / 4];
};
using msg16 = msg<16>;
using msg64 = msg<64>;
using msg256 = msg<256>;
using msg1024 = msg<1024>;
KILN_RING_MESSAGE(msg16, w);
KILN_RING_MESSAGE(msg64, w);
KILN_RING_MESSAGE(msg256, w);
KILN_RING_MESSAGE(msg1024, w);

namespace {

using clk = std::chrono::steady_clock;
using namespace std::chrono_literals;

template <int N>
std::string handler_source() {
  const std::string t = "msg" + std::to_string(N);
  return "KILN_FUNC void bump(const " + t + "* in, " + t + "* out, kiln_ring_ctx* ctx) {\n" +
         "  for (int i = 0; i < " + std::to_string(N / 4) +
         "; ++i) out->w[i] = in->w[i] + 1u;\n}\n";
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

struct csv_out {
  std::FILE* f = nullptr;
  std::string dev;
  void row(const std::string& metric, double v, const std::string& unit) {
    if (f)
      std::fprintf(f, "%s,%s,kiln_ring,%.6g,%s\n", dev.c_str(), metric.c_str(), v, unit.c_str());
  }
};

bool round_trip(const kiln::device& dev, std::size_t n, csv_out& csv) {
  kiln::ring_options o;
  o.units = 1;
  o.batch = 1;
  o.capacity = 16;
  kiln::ring<msg64, msg64> r(dev, handler_source<64>(), "bump", o);
  r.activate();
  std::vector<double> us;
  us.reserve(n);
  std::uint64_t errors = 0, seed = 12345;
  const std::size_t warm = 2000;
  double c0 = 0;
  for (std::size_t i = 0; i < warm + n; ++i) {
    if (i == warm) c0 = cpu_seconds();
    msg64 m;
    for (auto& w : m.w)
      w = static_cast<std::uint32_t>(seed = seed * 6364136223846793005ull + 1442695040888963407ull);
    const auto t0 = clk::now();
    if (!r.send(m, 10s)) return std::fprintf(stderr, "send timed out\n"), false;
    auto resp = r.receive(10s);
    const auto t1 = clk::now();
    if (!resp) return std::fprintf(stderr, "no response\n"), false;
    for (int k = 0; k < 16; ++k) errors += resp->value.w[k] != m.w[k] + 1;
    if (i >= warm) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  const double cpu = (cpu_seconds() - c0) / static_cast<double>(n) * 1e6;
  r.terminate();
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) {
    return us[std::min(us.size() - 1, static_cast<std::size_t>(p / 100 * us.size()))];
  };
  double mean = 0;
  for (double v : us) mean += v;
  mean /= static_cast<double>(us.size());
  std::printf("| ring round trip, 64 B, %zu msgs | %.2f | %.2f | %.2f | %.2f | %.2f | %llu |\n", n,
              pct(50), pct(99), pct(99.9), mean, cpu, static_cast<unsigned long long>(errors));
  csv.row("rt_p50_us", pct(50), "us");
  csv.row("rt_p99_us", pct(99), "us");
  csv.row("rt_p999_us", pct(99.9), "us");
  csv.row("rt_mean_us", mean, "us");
  csv.row("cpu_us_per_msg", cpu, "us");
  csv.row("errors", static_cast<double>(errors), "count");
  return errors == 0;
}

// One producer thread sends batches, this thread receives; every response is checked.
template <int N>
bool throughput(const kiln::device& dev, std::size_t batch, std::size_t total, csv_out& csv) {
  using M = msg<N>;
  kiln::ring_options o;
  o.units = dev.backend() == "cuda" ? 16 : 2;
  o.warps_per_block = 4;
  o.capacity = static_cast<std::uint32_t>(std::max<std::size_t>(4 * batch, 1024));
  kiln::ring<M, M> r(dev, handler_source<N>(), "bump", o);
  r.activate();
  total = std::max(total / batch, std::size_t(1)) * batch;
  std::vector<M> out_batch(batch);
  for (std::size_t i = 0; i < batch; ++i)
    for (int k = 0; k < N / 4; ++k) out_batch[i].w[k] = static_cast<std::uint32_t>(i * 31 + k);
  const double c0 = cpu_seconds();
  const auto t0 = clk::now();
  std::atomic<bool> failed{false};
  std::thread producer([&] {
    for (std::size_t sent = 0; sent < total; sent += batch)
      if (r.send_batch(out_batch, 10s) != batch) {
        failed = true;
        return;
      }
  });
  std::vector<kiln::ring_response<M>> in(std::max<std::size_t>(batch, 256));
  std::uint64_t errors = 0, got = 0;
  while (got < total && !failed) {
    const std::size_t k = r.receive_batch(in, 10s);
    if (k == 0) {
      failed = true;
      break;
    }
    for (std::size_t i = 0; i < k; ++i) {
      const std::size_t j = (got + i) % batch;
      errors += in[i].value.w[0] != out_batch[j].w[0] + 1 ||
                in[i].value.w[N / 4 - 1] != out_batch[j].w[N / 4 - 1] + 1 || in[i].id != got + i;
    }
    got += k;
  }
  producer.join();
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  const double cpu = (cpu_seconds() - c0) / static_cast<double>(got) * 1e9;
  r.terminate(kiln::ring_stop::drop);
  const double rate = static_cast<double>(got) / s;
  std::printf(
      "| %d B, batch %zu | %.2f M msg/s | %.2f GB/s each way | %.1f ns CPU/msg | %llu errors%s |\n",
      N, batch, rate / 1e6, rate * N / 1e9, cpu, static_cast<unsigned long long>(errors),
      failed ? " (STALLED)" : "");
  const std::string key = std::to_string(N) + "B_b" + std::to_string(batch);
  csv.row("tput_" + key + "_mmsgs", rate / 1e6, "Mmsg/s");
  csv.row("cpu_ns_per_msg_" + key, cpu, "ns");
  return errors == 0 && !failed;
}

bool soak(const kiln::device& dev, int seconds) {
  kiln::ring_options o;
  o.units = dev.backend() == "cuda" ? 8 : 2;
  o.capacity = 8192;
  kiln::ring<msg64, msg64> r(dev, handler_source<64>(), "bump", o);
  r.activate();
  std::atomic<bool> stop{false}, failed{false};
  std::thread producer([&] {
    std::vector<msg64> b(256);
    for (std::uint64_t seq = 0; !stop;) {
      for (auto& m : b) {
        for (auto& w : m.w) w = static_cast<std::uint32_t>(seq);
        m.w[1] = static_cast<std::uint32_t>(seq >> 32);
        ++seq;
      }
      if (r.send_batch(b, 30s) != b.size()) {
        failed = true;
        return;
      }
    }
  });
  std::vector<kiln::ring_response<msg64>> in(4096);
  std::uint64_t next = 0, bad = 0;
  const auto until = clk::now() + std::chrono::seconds(seconds);
  auto last_report = clk::now();
  for (;;) {
    if (clk::now() >= until) stop = true;
    const std::size_t k = r.receive_batch(in, stop ? 500ms : 30s);
    if (k == 0) {
      if (stop) break;
      failed = true;
      break;
    }
    for (std::size_t i = 0; i < k; ++i, ++next) {
      const auto& m = in[i];
      const auto lo = static_cast<std::uint32_t>(next), hi = static_cast<std::uint32_t>(next >> 32);
      bad += m.id != next || m.value.w[0] != lo + 1 || m.value.w[1] != hi + 1 ||
             m.value.w[15] != lo + 1;
    }
    if (clk::now() - last_report > 60s) {
      std::printf("soak: %llu messages, %llu bad\n", static_cast<unsigned long long>(next),
                  static_cast<unsigned long long>(bad));
      std::fflush(stdout);
      last_report = clk::now();
    }
  }
  producer.join();
  while (auto m = r.try_receive()) bad += m->id != next++;
  const kiln::ring_status st = r.status();
  r.terminate();
  const bool ok = bad == 0 && !failed && st.sent == next;
  std::printf(
      "| soak %d s on %s | %llu sent | %llu received | %llu lost/duplicated/corrupt | %s |\n",
      seconds, dev.id().c_str(), static_cast<unsigned long long>(st.sent),
      static_cast<unsigned long long>(next), static_cast<unsigned long long>(bad),
      ok ? "PASS" : "FAIL");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dev_id, csv_path, only;
  bool quick = false;
  int soak_s = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      dev_id = argv[++i];
    else if (a == "--csv" && i + 1 < argc)
      csv_path = argv[++i];
    else if (a == "--soak" && i + 1 < argc)
      soak_s = std::atoi(argv[++i]);
    else if (a == "--only" && i + 1 < argc)
      only = argv[++i];
    else if (a == "--quick")
      quick = true;
    else
      return std::fprintf(
                 stderr, "usage: %s [--device D] [--quick] [--csv F] [--soak S] [--only rt|tput]\n",
                 argv[0]),
             1;
  }
  try {
    kiln::device dev = dev_id.empty() ? kiln::device::best() : kiln::device::get(dev_id);
    std::printf("device %s (%s)\n", dev.id().c_str(), dev.info().name.c_str());
    if (soak_s > 0) return soak(dev, soak_s) ? 0 : 1;
    csv_out csv;
    csv.dev = dev.id();
    if (!csv_path.empty() && !(csv.f = std::fopen(csv_path.c_str(), "w"))) return 1;
    if (csv.f) std::fprintf(csv.f, "device,metric,impl,value,unit\n");
    bool ok = true;
    if (only.empty() || only == "rt") {
      std::printf(
          "| what | p50 us | p99 us | p99.9 us | mean us | cpu us/msg | errors "
          "|\n|---|---|---|---|---|---|---|\n");
      ok &= round_trip(dev, quick ? 5000 : 100000, csv);
    }
    if (only.empty() || only == "tput") {
      std::printf(
          "\n| message, host batch | throughput | bandwidth | host CPU | check "
          "|\n|---|---|---|---|---|\n");
      const std::size_t total = quick ? 200000 : 4000000;
      for (std::size_t b : {1u, 16u, 256u, 4096u}) {
        ok &= throughput<16>(dev, b, b == 1 ? total / 20 : total, csv);
        ok &= throughput<64>(dev, b, b == 1 ? total / 20 : total, csv);
        ok &= throughput<256>(dev, b, b == 1 ? total / 20 : total / 2, csv);
        ok &= throughput<1024>(dev, b, b == 1 ? total / 20 : total / 8, csv);
      }
    }
    if (csv.f) std::fclose(csv.f);
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ring: %s\n", e.what());
    return 1;
  }
}
