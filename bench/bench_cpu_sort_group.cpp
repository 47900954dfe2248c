// bench_cpu_sort_group: kiln::query's sort and group_by on Kiln's CPU device (cpu:0) against
// the CPU peers of issue 26's targets, wall clock, one table.
//
//   bench_cpu_sort_group [--sizes 1M,4M] [--groups 1000,1000000,n/4] [--runs 3] [--warmup 1]
//                        [--threads N] [--impl all|kiln|par_unseq|gnu_parallel|omp|seq]
//                        [--cases sort,group] [--seq-max 1M]
//
// sort (n keys from a seeded hash, inputs already in a kiln::buffer on cpu:0 / a host array):
//   sort u32, sort i64    kiln: xs | sort() | to_buffer()
//                         par_unseq: std::sort(std::execution::par_unseq) (libstdc++ over TBB;
//                         only when TBB was found at build time), gnu_parallel:
//                         __gnu_parallel::sort (libstdc++'s OpenMP multiway mergesort), seq:
//                         std::sort. In place, so the input is copied into the work array
//                         before each run, outside the timed region.
//   sort_by_key u32->u32  kiln: zip(keys, idx) | order_by(_1) | to_buffer() (stable); peers sort
//                         {key, value} structs by key (not stable: checked as a permutation).
// group (n rows: int32 keys uniform in [0, G), float values in {0, .25, ..., 1.75}, so every
// float sum is exact in any order and the results compare exactly):
//   group sum+count       kiln: zip(keys, vals) | group_by(_1) | aggregate(sum(_2), count())
//                         | to_buffer() (sorted by key); omp_hash+sort: hand-written OpenMP hash
//                         aggregation (omp_hash_agg below) then a sort by key (sort_groups), with
//                         the two parts also reported alone (omp_hash, omp_sort_part); seq:
//                         std::unordered_map, then std::sort by key.
// G: counts or n/K (default 1000, 1000000, n/4). Sequential rows only up to --seq-max rows.
//
// Timing: steady_clock around each run, median of --runs after --warmup runs. "kiln speedup" is
// the peer's median / Kiln's (>= 1.0: Kiln is at least as fast). Results are checked against a
// reference computed once (ok / WRONG per row; exit status 1 on any WRONG).
// Threads: --threads N sets OpenMP's, TBB's (global_control) and Kiln's (KILN_CPU_THREADS);
// default all cores for each. Peer scratch (partition buffers, output) is kept between runs,
// as Kiln's memory pool keeps its buffers. OpenMP's, TBB's and Kiln's pools idle between
// phases; --impl runs one implementation per process where their spinning must not overlap.
#include <omp.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <memory>
#include <optional>
#include <parallel/algorithm>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>
#if KILN_BENCH_PAR_UNSEQ
#include <tbb/global_control.h>

#include <execution>
#endif

#include "bench_args.hpp"

namespace {

using namespace kiln::placeholders;

struct options {
  std::vector<std::uint64_t> sizes{1ull << 20, 4ull << 20};
  std::vector<std::string> groups{"1000", "1000000", "n/4"};
  int runs = 3, warmup = 1, threads = 0;
  std::string impl = "all";
  bool sort = true, group = true;
  std::uint64_t seq_max = 1ull << 20;
};

[[noreturn]] void usage(const char* prog, const char* why) {
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--sizes 1M,4M] [--groups 1000,1000000,n/4] [--runs N] "
               "[--warmup N]\n  [--threads N] [--impl all|kiln|par_unseq|gnu_parallel|omp|seq] "
               "[--cases sort,group] [--seq-max N]\n  counts take suffixes K, M, G (powers of 2)\n",
               prog, why, prog);
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    if (i + 1 >= argc) usage(argv[0], ("missing value after " + f).c_str());
    const std::string v = argv[++i];
    std::uint64_t count = 0;
    if (f == "--sizes") {
      if (!kiln_bench::parse_sizes(v, o.sizes)) usage(argv[0], "bad --sizes");
    } else if (f == "--groups") {
      o.groups.clear();
      for (std::size_t s = 0; s <= v.size();) {
        const std::size_t e = std::min(v.find(',', s), v.size());
        const std::string item = v.substr(s, e - s);
        const bool ratio = item.size() > 2 && item.compare(0, 2, "n/") == 0;
        if (!kiln_bench::parse_count(ratio ? item.substr(2) : item, count) ||
            (!ratio && count > 0x7fffffffull))
          usage(argv[0], ("bad --groups item " + item).c_str());
        o.groups.push_back(item);
        s = e + 1;
      }
    } else if (f == "--runs" || f == "--warmup" || f == "--threads") {
      char* end = nullptr;
      const long x = std::strtol(v.c_str(), &end, 10);
      if (*end || x < (f == "--warmup" ? 0 : 1)) usage(argv[0], ("bad " + f).c_str());
      (f == "--runs" ? o.runs : f == "--warmup" ? o.warmup : o.threads) = int(x);
    } else if (f == "--impl") {
      if (v != "all" && v != "kiln" && v != "par_unseq" && v != "gnu_parallel" && v != "omp" &&
          v != "seq")
        usage(argv[0], "bad --impl");
      o.impl = v;
    } else if (f == "--cases") {
      o.sort = v.find("sort") != std::string::npos;
      o.group = v.find("group") != std::string::npos;
      if (!o.sort && !o.group) usage(argv[0], "bad --cases");
    } else if (f == "--seq-max") {
      if (!kiln_bench::parse_count(v, o.seq_max)) usage(argv[0], "bad --seq-max");
    } else {
      usage(argv[0], ("unknown flag " + f).c_str());
    }
  }
  return o;
}

std::uint64_t groups_for(const std::string& item, std::uint64_t n) {
  std::uint64_t g = 0;
  if (item.compare(0, 2, "n/") == 0) {
    kiln_bench::parse_count(item.substr(2), g);
    return std::clamp<std::uint64_t>(n / g, 1, 0x7fffffffull);
  }
  kiln_bench::parse_count(item, g);
  return g;
}

std::uint64_t splitmix(std::uint64_t x) {
  std::uint64_t z = x * 0x9E3779B97F4A7C15ull + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uninitialised host storage whose pages are first touched by a parallel loop.
template <class T>
struct host_array {
  std::unique_ptr<T[]> p;
  std::uint64_t n = 0;
  explicit host_array(std::uint64_t count) : p(new T[count]), n(count) {
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < std::int64_t(n); ++i) p[i] = T{};
  }
  T* begin() const { return p.get(); }
  T* end() const { return p.get() + n; }
  std::span<const T> span() const { return {p.get(), n}; }
};

template <class T>
void omp_copy(const host_array<T>& from, host_array<T>& to) {
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < std::int64_t(from.n); ++i) to.p[i] = from.p[i];
}

struct row {
  std::string what, impl, check;
  std::uint64_t n = 0, groups = 0;
  double ms = 0;
};

struct bench {
  const options& o;
  kiln::device dev;
  std::vector<row> rows;
  int status = 0;

  bool want(const char* impl) const { return o.impl == "all" || o.impl == impl; }

  template <class Setup, class Run>
  double time(Setup&& setup, Run&& run) {
    for (int i = 0; i < o.warmup; ++i) {
      setup();
      run();
    }
    std::vector<double> ms;
    for (int i = 0; i < o.runs; ++i) {
      setup();
      const auto t0 = std::chrono::steady_clock::now();
      run();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    return kiln_bench::median_of(ms);
  }

  void add(const std::string& what, const std::string& impl, std::uint64_t n, std::uint64_t g,
           double ms, const std::string& check) {
    rows.push_back({what, impl, check, n, g, ms});
    if (check == "WRONG") status = 1;
    std::printf("  %-22s %-14s n=%-6s G=%-9s %10.3f ms  %s\n", what.c_str(), impl.c_str(),
                kiln_bench::size_label(n).c_str(), g ? std::to_string(g).c_str() : "-", ms,
                check.c_str());
    std::fflush(stdout);
  }
  void missing(const std::string& what, const std::string& impl, std::uint64_t n, std::uint64_t g,
               const std::string& why) {
    rows.push_back({what, impl, why, n, g, -1});
  }
  void finish() { dev.default_queue().finish(); }
};

// ---- sort ----------------------------------------------------------------------------------
template <class K>
void sort_keys(bench& b, std::uint64_t n, const char* what, std::uint64_t seed) {
  host_array<K> in(n), ref(n), work(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < std::int64_t(n); ++i) in.p[i] = K(splitmix(std::uint64_t(i) ^ seed));
  omp_copy(in, ref);
  __gnu_parallel::sort(ref.begin(), ref.end());
  auto check = [&](const K* got) {
    return std::memcmp(got, ref.begin(), n * sizeof(K)) == 0 ? "ok" : "WRONG";
  };
  if (b.want("kiln")) {
    kiln::buffer<K> kb(b.dev, in.span());
    std::optional<kiln::buffer<K>> out;
    const double ms = b.time([&] { out.reset(); },
                             [&] {
                               out.emplace(kb | kiln::sort() | kiln::to_buffer());
                               b.finish();
                             });
    b.add(what, "kiln", n, 0, ms, check(out->to_vector().data()));
  }
#if KILN_BENCH_PAR_UNSEQ
  if (b.want("par_unseq")) {
    namespace ex = std::execution;
    const double ms = b.time([&] { std::copy(ex::par_unseq, in.begin(), in.end(), work.begin()); },
                             [&] { std::sort(ex::par_unseq, work.begin(), work.end()); });
    b.add(what, "par_unseq", n, 0, ms, check(work.begin()));
  }
#else
  if (b.want("par_unseq")) b.missing(what, "par_unseq", n, 0, "no TBB at build time");
#endif
  if (b.want("gnu_parallel")) {
    const double ms = b.time([&] { omp_copy(in, work); },
                             [&] { __gnu_parallel::sort(work.begin(), work.end()); });
    b.add(what, "gnu_parallel", n, 0, ms, check(work.begin()));
  }
  if (b.want("seq") && n <= b.o.seq_max) {
    const double ms =
        b.time([&] { omp_copy(in, work); }, [&] { std::sort(work.begin(), work.end()); });
    b.add(what, "seq", n, 0, ms, check(work.begin()));
  } else if (b.want("seq")) {
    b.missing(what, "seq", n, 0, "n > --seq-max");
  }
}

struct kv {
  std::uint32_t key, value;
};

void sort_pairs(bench& b, std::uint64_t n, std::uint64_t seed) {
  const char* what = "sort_by_key u32->u32";
  host_array<std::uint32_t> keys(n), ref_keys(n), ref_vals(n);
  host_array<kv> in(n), work(n);
  {
    host_array<std::uint64_t> packed(n);  // stable order = (key, index) order
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < std::int64_t(n); ++i) {
      keys.p[i] = std::uint32_t(splitmix(std::uint64_t(i) ^ seed));
      in.p[i] = {keys.p[i], std::uint32_t(i)};
      packed.p[i] = std::uint64_t(keys.p[i]) << 32 | std::uint64_t(i);
    }
    __gnu_parallel::sort(packed.begin(), packed.end());
#pragma omp parallel for schedule(static)
    for (std::int64_t i = 0; i < std::int64_t(n); ++i) {
      ref_keys.p[i] = std::uint32_t(packed.p[i] >> 32);
      ref_vals.p[i] = std::uint32_t(packed.p[i]);
    }
  }
  // Unstable peers: keys as the reference, values a permutation, each value's key its own.
  auto check_unstable = [&](const kv* got) {
    std::vector<char> seen(n, 0);
    for (std::uint64_t i = 0; i < n; ++i) {
      const kv e = got[i];
      if (e.key != ref_keys.p[i] || e.value >= n || seen[e.value] || keys.p[e.value] != e.key)
        return "WRONG";
      seen[e.value] = 1;
    }
    return "ok";
  };
  const auto by_key = [](const kv& x, const kv& y) { return x.key < y.key; };
  if (b.want("kiln")) {
    std::vector<std::uint32_t> idx(n);
    for (std::uint64_t i = 0; i < n; ++i) idx[i] = std::uint32_t(i);
    kiln::buffer<std::uint32_t> kb(b.dev, keys.span()), vb(b.dev, idx);
    auto q = [&] { return kiln::zip(kb, vb) | kiln::order_by(_1) | kiln::to_buffer(); };
    std::optional<decltype(q())> out;
    const double ms = b.time([&] { out.reset(); },
                             [&] {
                               out.emplace(q());
                               b.finish();
                             });
    const auto gk = std::get<0>(*out).to_vector(), gv = std::get<1>(*out).to_vector();
    const bool ok = gk.size() == n && gv.size() == n &&
                    std::memcmp(gk.data(), ref_keys.begin(), n * 4) == 0 &&
                    std::memcmp(gv.data(), ref_vals.begin(), n * 4) == 0;
    b.add(what, "kiln", n, 0, ms, ok ? "ok" : "WRONG");
  }
#if KILN_BENCH_PAR_UNSEQ
  if (b.want("par_unseq")) {
    namespace ex = std::execution;
    const double ms = b.time([&] { std::copy(ex::par_unseq, in.begin(), in.end(), work.begin()); },
                             [&] { std::sort(ex::par_unseq, work.begin(), work.end(), by_key); });
    b.add(what, "par_unseq", n, 0, ms, check_unstable(work.begin()));
  }
#else
  if (b.want("par_unseq")) b.missing(what, "par_unseq", n, 0, "no TBB at build time");
#endif
  if (b.want("gnu_parallel")) {
    const double ms = b.time([&] { omp_copy(in, work); },
                             [&] { __gnu_parallel::sort(work.begin(), work.end(), by_key); });
    b.add(what, "gnu_parallel", n, 0, ms, check_unstable(work.begin()));
  }
  if (b.want("seq") && n <= b.o.seq_max) {
    const double ms =
        b.time([&] { omp_copy(in, work); }, [&] { std::sort(work.begin(), work.end(), by_key); });
    b.add(what, "seq", n, 0, ms, check_unstable(work.begin()));
  } else if (b.want("seq")) {
    b.missing(what, "seq", n, 0, "n > --seq-max");
  }
}

// ---- group-by: the hand-written OpenMP hash aggregation ------------------------------------
struct agg_entry {
  std::int32_t key;
  float sum;
  std::uint64_t count;  // 0: an empty slot
};

inline std::uint32_t hash32(std::int32_t key) {  // murmur3's finaliser
  std::uint32_t h = std::uint32_t(key);
  h ^= h >> 16;
  h *= 0x85ebca6bu;
  h ^= h >> 13;
  h *= 0xc2b2ae35u;
  return h ^ (h >> 16);
}

// Open addressing, linear probing on the hash's low bits, power-of-two capacity.
struct agg_table {
  std::vector<agg_entry> slot, spare;  // spare: the slots before a growth (capacity kept)
  std::uint32_t mask = 0, used = 0;
  void reset(unsigned bits) {
    slot.assign(std::size_t(1) << bits, agg_entry{0, 0.f, 0});
    mask = (1u << bits) - 1;
    used = 0;
  }
  agg_entry& find(std::int32_t key, std::uint32_t h) {  // key's entry, or the empty slot for it
    std::uint32_t i = h & mask;
    while (slot[i].count != 0 && slot[i].key != key) i = (i + 1) & mask;
    return slot[i];
  }
  void add(const agg_entry& e, std::uint32_t h) {  // merges e; grows to stay at most half full
    agg_entry* s = &find(e.key, h);
    if (s->count == 0) {
      if (2 * (used + 1) > mask + 1) {
        spare.swap(slot);
        reset(unsigned(std::countr_zero(std::size_t(mask) + 1)) + 1);
        for (const agg_entry& o : spare)
          if (o.count) {
            find(o.key, hash32(o.key)) = o;
            ++used;
          }
        s = &find(e.key, h);
      }
      s->key = e.key;
      ++used;
    }
    s->sum += e.sum;
    s->count += e.count;
  }
};

// Each thread aggregates its chunks of 64K rows in a small table (16K slots, 256 KiB: stays in
// L2); when half full, the table is flushed into 256-1024 partitions by the hash's top bits, or,
// where it merged fewer than 2 rows per entry, the thread's remaining rows go straight to the
// partitions (as DuckDB's pre-aggregation gives up). Each partition is then merged by one thread
// into its own table (parallel over partitions), counted, and copied out. Few groups: one flush
// per thread, a tiny merge. Many: a radix partition of the rows, and every merge table holds
// a few thousandths of the groups.
struct omp_hash_agg {
  static constexpr unsigned local_bits = 14;
  std::vector<std::vector<std::vector<agg_entry>>> spill;  // [thread][partition]
  std::vector<agg_table> merged;                           // [partition]
  std::vector<std::uint64_t> offset;
  std::vector<agg_entry> out;

  void run(const std::int32_t* keys, const float* vals, std::uint64_t n) {
    const int threads = omp_get_max_threads();
    // 256 to 1024 partitions: up to 64K groups each (n bounds the groups), so that every merge
    // table stays within 2 MiB, without more write streams than the TLB covers.
    const unsigned part_bits = unsigned(std::clamp(int(std::bit_width(n)) - 17, 8, 10));
    const unsigned parts = 1u << part_bits;
    constexpr std::uint64_t chunk = 1u << 16;
    const std::int64_t chunks = std::int64_t((n + chunk - 1) / chunk);
    spill.resize(std::size_t(threads));
    for (auto& per_thread : spill) {  // emptied here, not by each thread: the team may be smaller
      per_thread.resize(parts);
      for (auto& v : per_thread) v.clear();
    }
#pragma omp parallel num_threads(threads)
    {
      auto& mine = spill[std::size_t(omp_get_thread_num())];
      agg_table local;
      local.reset(local_bits);
      const std::uint32_t limit = (local.mask + 1) / 2;
      auto flush = [&] {
        for (agg_entry& e : local.slot)
          if (e.count) {
            mine[hash32(e.key) >> (32 - part_bits)].push_back(e);
            e = {0, 0.f, 0};
          }
        local.used = 0;
      };
      // Chunks taken dynamically: a thread that loses its core to another process holds no
      // one up. rows: this thread's rows so far; since: at the last flush.
      std::uint64_t rows = 0, since = 0;
      bool direct = false;
#pragma omp for schedule(dynamic, 1) nowait
      for (std::int64_t c = 0; c < chunks; ++c) {
        const std::uint64_t b = std::uint64_t(c) * chunk, e = std::min(n, b + chunk);
        std::uint64_t i = b;
        for (; i < e && !direct; ++i) {
          const std::int32_t k = keys[i];
          const std::uint32_t h = hash32(k);
          agg_entry* s = &local.find(k, h);
          if (s->count == 0) {
            if (local.used == limit) {
              // The table merged fewer than 2 rows per entry: it does not pay; partition the
              // rest of the rows directly.
              if (rows + (i - b) - since < 2 * std::uint64_t(limit)) {
                direct = true;
                break;
              }
              flush();
              since = rows + (i - b);
              s = &local.find(k, h);
            }
            s->key = k;
            ++local.used;
          }
          s->sum += vals[i];
          ++s->count;
        }
        for (; i < e; ++i)
          mine[hash32(keys[i]) >> (32 - part_bits)].push_back({keys[i], vals[i], 1});
        rows += e - b;
      }
      flush();
    }
    merged.resize(parts);
    offset.assign(parts + 1, 0);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int p = 0; p < int(parts); ++p) {
      agg_table& m = merged[std::size_t(p)];
      m.reset(10);
      for (const auto& per_thread : spill)
        for (const agg_entry& e : per_thread[std::size_t(p)]) m.add(e, hash32(e.key));
      offset[std::size_t(p) + 1] = m.used;
    }
    for (unsigned p = 0; p < parts; ++p) offset[p + 1] += offset[p];
    out.resize(offset[parts]);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
    for (int p = 0; p < int(parts); ++p) {
      agg_entry* o = out.data() + offset[std::size_t(p)];
      for (const agg_entry& e : merged[std::size_t(p)].slot)
        if (e.count) *o++ = e;
    }
  }
};

// Orders the groups by key: std::sort below 64K of them (a parallel sort's team costs more),
// else libstdc++'s OpenMP mergesort.
void sort_groups(std::vector<agg_entry>& v) {
  const auto by_key = [](const agg_entry& x, const agg_entry& y) { return x.key < y.key; };
  if (v.size() < (1u << 16))
    std::sort(v.begin(), v.end(), by_key);
  else
    __gnu_parallel::sort(v.begin(), v.end(), by_key);
}

// The expected groups: per key, the count and the sum in quarters (exact, order-free).
struct group_ref {
  std::vector<std::int32_t> keys;
  std::vector<float> sums;
  std::vector<std::uint64_t> counts;

  group_ref(const host_array<std::int32_t>& k, const host_array<std::uint8_t>& quarters,
            std::uint64_t g) {
    std::unique_ptr<std::uint64_t[]> qs(new std::uint64_t[g]()), cn(new std::uint64_t[g]());
    std::uint64_t* q = qs.get();
    std::uint64_t* c = cn.get();
    const std::int64_t n = std::int64_t(k.n);
    if (g <= (1u << 16)) {  // per-thread arrays (few keys: atomics would contend)
#pragma omp parallel
      {
        std::vector<std::uint64_t> tq(g), tc(g);
#pragma omp for schedule(static) nowait
        for (std::int64_t i = 0; i < n; ++i) tq[k.p[i]] += quarters.p[i], ++tc[k.p[i]];
#pragma omp critical
        for (std::uint64_t j = 0; j < g; ++j) q[j] += tq[j], c[j] += tc[j];
      }
    } else {
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
#pragma omp atomic
        q[k.p[i]] += quarters.p[i];
#pragma omp atomic
        ++c[k.p[i]];
      }
    }
    for (std::uint64_t i = 0; i < g; ++i)
      if (c[i]) {
        keys.push_back(std::int32_t(i));
        sums.push_back(float(q[i]) * 0.25f);
        counts.push_back(c[i]);
      }
  }
  // "ok" when m groups read through key(i), sum(i), count(i) are these, in key order.
  template <class Key, class Sum, class Count>
  const char* check(std::uint64_t m, Key key, Sum sum, Count count) const {
    if (m != keys.size()) return "WRONG";
    for (std::uint64_t i = 0; i < m; ++i)
      if (key(i) != keys[i] || count(i) != counts[i] ||
          std::fabs(sum(i) - sums[i]) > 1e-6f * std::max(1.f, sums[i]))
        return "WRONG";
    return "ok";
  }
};

void group_sum(bench& b, std::uint64_t n, std::uint64_t g, std::uint64_t seed) {
  const char* what = "group sum+count";
  host_array<std::int32_t> keys(n);
  host_array<std::uint8_t> quarters(n);
  host_array<float> vals(n);
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < std::int64_t(n); ++i) {
    const std::uint64_t h = splitmix(std::uint64_t(i) ^ seed);
    keys.p[i] = std::int32_t((h >> 8) % g);
    quarters.p[i] = std::uint8_t(h & 7);
    vals.p[i] = float(h & 7) * 0.25f;
  }
  const group_ref ref(keys, quarters, g);
  auto check_entries = [&](const std::vector<agg_entry>& v) {
    return ref.check(
        v.size(), [&](std::uint64_t i) { return v[i].key; },
        [&](std::uint64_t i) { return v[i].sum; }, [&](std::uint64_t i) { return v[i].count; });
  };
  const auto by_key = [](const agg_entry& x, const agg_entry& y) { return x.key < y.key; };

  if (b.want("kiln")) {
    kiln::buffer<std::int32_t> kb(b.dev, keys.span());
    kiln::buffer<float> vb(b.dev, vals.span());
    auto q = [&] {
      return kiln::zip(kb, vb) | kiln::group_by(_1) |
             kiln::aggregate(kiln::agg::sum(_2), kiln::agg::count()) | kiln::to_buffer();
    };
    std::optional<decltype(q())> out;
    const double ms = b.time([&] { out.reset(); },
                             [&] {
                               out.emplace(q());
                               b.finish();
                             });
    const auto k = std::get<0>(*out).to_vector();
    const auto s = std::get<1>(*out).to_vector();
    const auto c = std::get<2>(*out).to_vector();
    b.add(what, "kiln", n, g, ms,
          ref.check(
              k.size(), [&](std::uint64_t i) { return k[i]; },
              [&](std::uint64_t i) { return s[i]; }, [&](std::uint64_t i) { return c[i]; }));
  }
  if (b.want("omp")) {
    omp_hash_agg agg;
    std::vector<double> hash_ms;
    const double ms = b.time([] {},
                             [&] {
                               const auto t0 = std::chrono::steady_clock::now();
                               agg.run(keys.begin(), vals.begin(), n);
                               hash_ms.push_back(std::chrono::duration<double, std::milli>(
                                                     std::chrono::steady_clock::now() - t0)
                                                     .count());
                               sort_groups(agg.out);
                             });
    hash_ms.erase(hash_ms.begin(), hash_ms.begin() + b.o.warmup);
    const double hash = kiln_bench::median_of(hash_ms);
    const char* chk = check_entries(agg.out);
    b.add(what, "omp_hash+sort", n, g, ms, chk);
    b.add(what, "omp_hash", n, g, hash, chk);
    agg.run(keys.begin(), vals.begin(), n);  // the unsorted output, copied in before each sort
    const std::vector<agg_entry> unsorted = agg.out;
    const double sort = b.time(
        [&] {
#pragma omp parallel for schedule(static)
          for (std::int64_t i = 0; i < std::int64_t(unsorted.size()); ++i) agg.out[i] = unsorted[i];
        },
        [&] { sort_groups(agg.out); });
    b.add(what, "omp_sort_part", n, g, sort, check_entries(agg.out));
  }
  if (b.want("seq") && n <= b.o.seq_max) {
    std::vector<agg_entry> out;
    const double ms = b.time([&] { out.clear(); },
                             [&] {
                               std::unordered_map<std::int32_t, std::pair<float, std::uint64_t>> m;
                               for (std::uint64_t i = 0; i < n; ++i) {
                                 auto& e = m[keys.p[i]];
                                 e.first += vals.p[i];
                                 ++e.second;
                               }
                               out.reserve(m.size());
                               for (const auto& [k, e] : m) out.push_back({k, e.first, e.second});
                               std::sort(out.begin(), out.end(), by_key);
                             });
    b.add(what, "seq_unordered_map", n, g, ms, check_entries(out));
  } else if (b.want("seq")) {
    b.missing(what, "seq_unordered_map", n, g, "n > --seq-max");
  }
}

void print_table(const bench& b) {
  std::printf("\n%-22s %6s %10s  %-18s %10s %9s %12s  %s\n", "case", "n", "groups", "impl", "ms",
              "Mrows/s", "kiln speedup", "check");
  for (const row& r : b.rows) {
    const std::string g = r.groups ? std::to_string(r.groups) : "-";
    if (r.ms < 0) {
      std::printf("%-22s %6s %10s  %-18s %10s %9s %12s  (%s)\n", r.what.c_str(),
                  kiln_bench::size_label(r.n).c_str(), g.c_str(), r.impl.c_str(), "-", "-", "-",
                  r.check.c_str());
      continue;
    }
    double kiln_ms = -1;
    for (const row& k : b.rows)
      if (k.impl == "kiln" && k.what == r.what && k.n == r.n && k.groups == r.groups)
        kiln_ms = k.ms;
    char speed[32] = "-";
    if (r.impl != "kiln" && kiln_ms > 0)
      std::snprintf(speed, sizeof speed, "%.2fx", r.ms / kiln_ms);
    std::printf("%-22s %6s %10s  %-18s %10.3f %9.1f %12s  %s\n", r.what.c_str(),
                kiln_bench::size_label(r.n).c_str(), g.c_str(), r.impl.c_str(), r.ms,
                double(r.n) / r.ms * 1e-3, speed, r.check.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  if (o.threads > 0) {
    setenv("KILN_CPU_THREADS", std::to_string(o.threads).c_str(), 1);  // before the device
    omp_set_num_threads(o.threads);
  }
#if KILN_BENCH_PAR_UNSEQ
  std::optional<tbb::global_control> tbb_threads;
  if (o.threads > 0)
    tbb_threads.emplace(tbb::global_control::max_allowed_parallelism, std::size_t(o.threads));
  const int tbb_n =
      int(tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
#endif
  bench b{o, kiln::device::get("cpu:0"), {}, 0};
  std::printf("bench_cpu_sort_group: cpu:0 (%s), %d OpenMP threads, ", b.dev.info().name.c_str(),
              omp_get_max_threads());
#if KILN_BENCH_PAR_UNSEQ
  std::printf("par_unseq through TBB (%d threads)", tbb_n);
#else
  std::printf("no TBB at build time: no std::execution::par_unseq rows");
#endif
  std::printf(", median of %d after %d warm-up, wall clock\n", o.runs, o.warmup);
  for (const std::uint64_t n : o.sizes) {
    if (o.sort) {
      sort_keys<std::uint32_t>(b, n, "sort u32", 1);
      sort_keys<std::int64_t>(b, n, "sort i64", 2);
      sort_pairs(b, n, 3);
    }
    if (o.group)
      for (const std::string& g : o.groups) group_sum(b, n, groups_for(g, n), 4);
  }
  print_table(b);
  return b.status;
}
