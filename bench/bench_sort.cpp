// Device radix sort (src/sort/, kiln::detail::radix_sort) against std::stable_sort on the host:
// uint32 keys with uint32 indices (sort_by_key), keys alone, and pairs of keys below 2^16 (two
// passes skipped), 1M and 16M random keys, wall
// clock (enqueue to finish; inputs on the device, outputs preallocated), median of runs after a
// warm-up; prints Mkeys/s and checks that the pairs are stably sorted.
//
//   bench_sort [--device cpu:0] [--runs 5] [--warmup 1] [--sizes 1048576,16777216]
//              [--path tiled|chunked|cub]   (default: the automatic choice)
//              [--host 0]               (skip the std::stable_sort rows)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "sort/radix_sort.hpp"

namespace {

struct options {
  std::string device;
  int runs = 5, warmup = 1;
  std::vector<std::uint64_t> sizes = {1u << 20, 1u << 24};
  kiln::detail::radix_path path = kiln::detail::radix_path::automatic;
  bool host = true;  // also time std::stable_sort
};

double median_ms(const options& o, const std::function<void()>& work) {
  for (int i = 0; i < std::max(o.warmup, 1); ++i) work();
  std::vector<double> ms;
  for (int i = 0; i < std::max(o.runs, 1); ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void row(const char* name, std::uint64_t n, double ms) {
  std::printf("%-36s %10llu %10.2f ms %9.1f Mkeys/s\n", name, (unsigned long long)n, ms,
              double(n) / ms * 1e-3);
}

void run_size(kiln::queue& q, const options& o, std::uint64_t n) {
  std::mt19937 rng(42);
  std::vector<std::uint32_t> keys(n), idx(n);
  for (auto& k : keys) k = rng();
  std::iota(idx.begin(), idx.end(), 0u);
  const kiln::device& dev = q.get_device();
  kiln::buffer<std::uint32_t> kin(dev, keys), vin(dev, idx), kout(dev, n), vout(dev, n);
  kiln::detail::radix_sort_args a;
  a.key_type = kiln::scalar_type::u32;
  a.n = n;
  a.keys_in = {kin.view().memory(), 0};
  a.keys_out = {kout.view().memory(), 0};
  a.value_bytes = 4;
  a.values_in = {vin.view().memory(), 0};
  a.values_out = {vout.view().memory(), 0};
  a.path = o.path;
  const std::string dev_name = "radix_sort pairs " + dev.id();
  row(dev_name.c_str(), n, median_ms(o, [&] {
        kiln::detail::radix_sort(q, a);
        q.finish();
      }));
  // O(n) check: the values are a permutation, keys_out[i] == keys[values[i]], keys ascend and
  // equal keys keep their input order.
  {
    const std::vector<std::uint32_t> got_k = kout.to_vector(), got_v = vout.to_vector();
    std::vector<bool> seen(n);
    bool ok = true;
    for (std::uint64_t i = 0; i < n && ok; ++i) {
      const std::uint32_t v = got_v[i];
      ok = v < n && !seen[v] && got_k[i] == keys[v] &&
           (i == 0 || got_k[i - 1] < got_k[i] || (got_k[i - 1] == got_k[i] && got_v[i - 1] < v));
      if (v < n) seen[v] = true;
    }
    if (!ok) std::printf("  WRONG: the pairs are not stably sorted\n");
  }
  a.value_bytes = 0;
  const std::string keys_name = "radix_sort keys " + dev.id();
  row(keys_name.c_str(), n, median_ms(o, [&] {
        kiln::detail::radix_sort(q, a);
        q.finish();
      }));
  // Keys below 2^16: the two upper digits are the same for every key, their passes skipped.
  {
    std::vector<std::uint32_t> small = keys;
    for (auto& k : small) k &= 0xFFFF;
    kiln::buffer<std::uint32_t> sin(dev, small);
    kiln::detail::radix_sort_args b = a;
    b.keys_in = {sin.view().memory(), 0};
    b.value_bytes = 4;
    const std::string name = "radix_sort pairs < 2^16 " + dev.id();
    row(name.c_str(), n, median_ms(o, [&] {
          kiln::detail::radix_sort(q, b);
          q.finish();
        }));
  }

  {  // 64-bit keys (random over the whole range) and f32 keys, keys only.
    const auto keys_row = [&]<class K>(const char* label, const std::vector<K>& ks) {
      kiln::buffer<K> in(dev, ks), out(dev, n);
      kiln::detail::radix_sort_args b = a;
      b.key_type = kiln::scalar_type_of<K>;
      b.keys_in = {in.view().memory(), 0};
      b.keys_out = {out.view().memory(), 0};
      const std::string name = std::string("radix_sort keys ") + label + " " + dev.id();
      row(name.c_str(), n, median_ms(o, [&] {
            kiln::detail::radix_sort(q, b);
            q.finish();
          }));
    };
    std::mt19937_64 rng64(43);
    std::vector<std::uint64_t> k64(n);
    for (auto& k : k64) k = rng64();
    keys_row("u64", k64);
    std::vector<float> kf(n);
    for (std::uint64_t i = 0; i < n; ++i) kf[i] = float(std::int32_t(keys[i])) * 1e-3f;
    keys_row("f32", kf);
  }

  {  // The same sort through kiln::query (a barrier: copy out, sort, collect into a buffer).
    using namespace kiln::placeholders;
    kiln::buffer<std::uint32_t> kin(dev, keys);
    const std::string name = "kiln::query sort() keys " + dev.id();
    row(name.c_str(), n, median_ms(o, [&] {
          auto out = kin | kiln::sort() | kiln::to_buffer();
          q.finish();
        }));
  }

  if (!o.host) return;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> pairs(n), work(n);
  for (std::uint64_t i = 0; i < n; ++i) pairs[i] = {keys[i], std::uint32_t(i)};
  row("std::stable_sort pairs (1 thread)", n, median_ms(o, [&] {
        work = pairs;
        std::stable_sort(work.begin(), work.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
      }));
  std::vector<std::uint32_t> wk(n);
  row("std::stable_sort keys (1 thread)", n, median_ms(o, [&] {
        wk = keys;
        std::stable_sort(wk.begin(), wk.end());
      }));
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") {
      o.device = argv[i + 1];
    } else if (k == "--runs") {
      o.runs = std::atoi(argv[i + 1]);
    } else if (k == "--warmup") {
      o.warmup = std::atoi(argv[i + 1]);
    } else if (k == "--host") {
      o.host = std::atoi(argv[i + 1]) != 0;
    } else if (k == "--path") {
      const std::string v = argv[i + 1];
      o.path = v == "tiled"     ? kiln::detail::radix_path::tiled
               : v == "chunked" ? kiln::detail::radix_path::chunked
               : v == "cub"     ? kiln::detail::radix_path::cub
                                : kiln::detail::radix_path::automatic;
    } else if (k == "--sizes") {
      o.sizes.clear();
      for (char* s = argv[i + 1]; *s;) {
        o.sizes.push_back(std::strtoull(s, &s, 10));
        if (*s == ',') ++s;
      }
    } else {
      std::fprintf(stderr,
                   "usage: bench_sort [--device ID] [--runs N] [--warmup N] [--sizes A,B] [--path "
                   "tiled|chunked]\n");
      return 2;
    }
  }
  kiln::device dev = o.device.empty() ? kiln::device::best() : kiln::device::get(o.device);
  kiln::queue& q = dev.default_queue();
  std::printf("device %s (%s)\n", dev.id().c_str(), dev.info().name.c_str());
  for (std::uint64_t n : o.sizes) run_size(q, o, n);
  return 0;
}
