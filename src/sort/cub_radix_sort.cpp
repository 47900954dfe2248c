// CUB's onesweep radix sort through NVRTC (cub_radix_sort.hpp). The host side follows
// cub::DispatchRadixSort::InvokeOnesweep (CCCL 3.0): one histogram launch counts every pass's
// digits, one exclusive-sum launch (a block per pass) turns them into starts, then one onesweep
// launch per pass and portion (2^28 keys) ranks and scatters a tile per block, its digit
// offsets resolved by decoupled look-back. The passes alternate between the output and a
// temporary so that the last one lands in the output. No host wait, but at the first use of a
// program, which reads its policy's tile shape from the device.
#include "sort/cub_radix_sort.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/log.hpp"
#include "sort/words.hpp"

namespace kiln::detail {
namespace {

namespace fs = std::filesystem;

// The CCCL version a folder holds (CCCL_VERSION, MMMmmmppp), 0 when it holds none.
long cccl_version(const fs::path& dir) {
  std::error_code ec;
  // CUB includes Thrust's and libcu++'s headers: all three must be there.
  if (!fs::exists(dir / "cub" / "device" / "dispatch" / "kernels" / "radix_sort.cuh", ec) ||
      !fs::exists(dir / "thrust" / "version.h", ec))
    return 0;
  std::ifstream f(dir / "cuda" / "std" / "__cccl" / "version.h");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("#define CCCL_VERSION ", 0) == 0) return std::atol(line.c_str() + 21);
  return 0;
}

std::vector<fs::path> candidates() {
  std::vector<fs::path> out;
  auto toolkit = [&](const char* root) {
    if (!root || !*root) return;
    out.push_back(fs::path(root) / "include" / "cccl");
    out.push_back(fs::path(root) / "include");
  };
  toolkit(std::getenv("CUDA_PATH"));
  toolkit(std::getenv("CUDA_HOME"));
  toolkit("/usr/local/cuda");
  // NVIDIA's pip packages (PyTorch's dependencies): site-packages/nvidia/{cuda_cccl,cu13}.
  std::vector<fs::path> sites;
  for (const char* lib : {"/usr/local/lib", "/usr/lib"}) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(lib, ec))
      if (e.path().filename().string().rfind("python3", 0) == 0)
        for (const char* s : {"dist-packages", "site-packages"}) sites.push_back(e.path() / s);
  }
  if (const char* home = std::getenv("HOME")) {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fs::path(home) / ".local" / "lib", ec))
      sites.push_back(e.path() / "site-packages");
  }
  for (const auto& s : sites) {
    out.push_back(s / "nvidia" / "cuda_cccl" / "include");
    out.push_back(s / "nvidia" / "cu13" / "include" / "cccl");
  }
  return out;
}

constexpr long min_cccl = 3000000;  // the traits interface below (cub::detail::radix::traits_t)

// The kernels. $KEY/$VAL/$OFF: the key and value words and the offset type as the kernel
// language spells them; the KS_* macros before the text give the rest.
constexpr std::string_view kernels_text = R"KILN(
#include <cub/device/dispatch/kernels/radix_sort.cuh>
#include <cub/device/dispatch/tuning/tuning_radix_sort.cuh>
#include <cuda/std/cstdint>
using cuda::std::int32_t;
using cuda::std::uint8_t;
using cuda::std::uint16_t;
using cuda::std::uint32_t;
using cuda::std::uint64_t;
#define KILN_GLOBAL
#define KILN_KERNEL extern "C" __global__ __launch_bounds__(KS_BOUNDS)

namespace kiln_cub {
// A key in Kiln's order: its raw bits, ordered by kind (0 unsigned, 1 signed, 2 IEEE float
// with -0.0 before +0.0 and every NaN equal and last in both directions).
template <class U, int Kind, bool Desc>
struct key { U bits; };
struct order {};  // the "decomposer" CUB hands back to the traits below

// Digits of the bit-ordered key (after CUB's inversion when descending); a NaN's are all ones.
template <class U, int Kind, bool Desc>
struct extractor {
  static constexpr U top = U(U(1) << (sizeof(U) * 8 - 1));
  static constexpr U inf = sizeof(U) == 8 ? U(0x7FF0000000000000ull) : U(0x7F800000u);
  static constexpr U pos_inf = U(inf | top), neg_inf = U(~U(inf | top));  // bit-ordered
  unsigned shift, mask;
  __device__ extractor(int begin, int bits) : shift(begin), mask((1u << bits) - 1u) {}
  __device__ unsigned Digit(U k) const {
    if (Kind == 2) {
      const U t = Desc ? U(~k) : k;
      if (t > pos_inf || t < neg_inf) k = U(~U(0));
    }
    return unsigned(k >> shift) & mask;
  }
};
}  // namespace kiln_cub

CUB_NAMESPACE_BEGIN
namespace detail::radix {
template <class U, int Kind, bool Desc>
struct traits_t<kiln_cub::key<U, Kind, Desc>, false> {
  using bit_ordered_type = U;
  static constexpr U top = U(U(1) << (sizeof(U) * 8 - 1));
  struct bit_ordered_conversion_policy {
    static __host__ __device__ U to_bit_ordered(kiln_cub::order, U k) {
      if (Kind == 2) return (k & top) ? U(~k) : U(k | top);
      return Kind == 1 ? U(k ^ top) : k;
    }
    static __host__ __device__ U from_bit_ordered(kiln_cub::order, U t) {
      if (Kind == 2) return (t & top) ? U(t & U(~top)) : U(~t);
      return Kind == 1 ? U(t ^ top) : t;
    }
  };
  struct bit_ordered_inversion_policy {
    static __host__ __device__ U inverse(kiln_cub::order, U v) { return U(~v); }
  };
  template <class F, class D>
  using digit_extractor_t = kiln_cub::extractor<U, Kind, Desc>;
  // The padding keys of a partial tile (raw bits): all-ones digits in their direction (a NaN
  // for floats), so that they rank after every key of the tile.
  static __host__ __device__ U max_raw_binary_key(kiln_cub::order) {
    return Kind == 0 ? U(~U(0)) : U(~top);
  }
  static __host__ __device__ U min_raw_binary_key(kiln_cub::order) {
    return Kind == 0 ? U(0) : Kind == 1 ? top : U(~top);
  }
  static __host__ __device__ int default_end_bit(kiln_cub::order) { return sizeof(U) * 8; }
  template <class F>
  static __host__ __device__ digit_extractor_t<F, kiln_cub::order> digit_extractor(
      int begin, int bits, kiln_cub::order) {
    return digit_extractor_t<F, kiln_cub::order>(begin, bits);
  }
};
}  // namespace detail::radix
CUB_NAMESPACE_END

using ks_key = kiln_cub::key<$KEY, KS_KIND, KS_DESC != 0>;
using ks_val = KS_VAL;
using ks_chain = cub::detail::radix::policy_hub<$KEY, ks_val, $OFF>::MaxPolicy;
using ks_active = ks_chain::ActivePolicy;
using ks_hist_agent = cub::detail::radix_sort::AgentRadixSortHistogram<
    ks_active::HistogramPolicy, KS_DESC != 0, ks_key, $OFF, kiln_cub::order>;
using ks_sweep_agent = cub::detail::radix_sort::AgentRadixSortOnesweep<
    ks_active::OnesweepPolicy, KS_DESC != 0, ks_key, ks_val, $OFF, int, kiln_cub::order>;

// The tile shape the launcher needs, as the device's policy has it.
#define KS_BOUNDS 1
KILN_KERNEL void ks_policy(KILN_GLOBAL uint32_t* out) {
  out[0] = ks_active::HistogramPolicy::BLOCK_THREADS;
  out[1] = ks_active::ExclusiveSumPolicy::BLOCK_THREADS;
  out[2] = ks_active::OnesweepPolicy::BLOCK_THREADS;
  out[3] = ks_active::OnesweepPolicy::ITEMS_PER_THREAD;
  out[4] = ks_active::ONESWEEP_RADIX_BITS;
  out[5] = ks_active::ExclusiveSumPolicy::RADIX_BITS;
}
#undef KS_BOUNDS

#define KS_BOUNDS ks_active::HistogramPolicy::BLOCK_THREADS
KILN_KERNEL void ks_hist(KILN_GLOBAL $OFF* bins, KILN_GLOBAL const $KEY* keys, $OFF n,
                         int32_t begin_bit, int32_t end_bit) {
  __shared__ typename ks_hist_agent::TempStorage s;
  ks_hist_agent(s, bins, reinterpret_cast<const ks_key*>(keys), n, begin_bit, end_bit,
                kiln_cub::order{})
      .Process();
}
#undef KS_BOUNDS

// CUB's DeviceRadixSortExclusiveSumKernel: a block per pass scans that pass's digit counts.
#define KS_BOUNDS ks_active::ExclusiveSumPolicy::BLOCK_THREADS
KILN_KERNEL void ks_exclusive_sum(KILN_GLOBAL $OFF* bins) {
  constexpr int digits = 1 << ks_active::ExclusiveSumPolicy::RADIX_BITS;
  constexpr int threads = ks_active::ExclusiveSumPolicy::BLOCK_THREADS;
  constexpr int per = (digits + threads - 1) / threads;
  using scan_t = cub::BlockScan<$OFF, threads>;
  __shared__ typename scan_t::TempStorage s;
  $OFF v[per];
  const int start = blockIdx.x * digits;
  for (int u = 0; u < per; ++u) {
    const int b = threadIdx.x * per + u;
    v[u] = b < digits ? bins[start + b] : ($OFF)0;
  }
  scan_t(s).ExclusiveSum(v, v);
  for (int u = 0; u < per; ++u) {
    const int b = threadIdx.x * per + u;
    if (b < digits) bins[start + b] = v[u];
  }
}
#undef KS_BOUNDS

// One pass over one portion. Keys-only sorts pass $VALW pointers CUB never reads.
#define KS_BOUNDS ks_active::OnesweepPolicy::BLOCK_THREADS
KILN_KERNEL void ks_onesweep(KILN_GLOBAL int32_t* lookback, KILN_GLOBAL int32_t* ctrs,
                             KILN_GLOBAL $OFF* bins_next, int32_t has_next,
                             KILN_GLOBAL const $OFF* bins, KILN_GLOBAL $KEY* keys_out,
                             KILN_GLOBAL const $KEY* keys_in, KILN_GLOBAL $VALW* values_out,
                             KILN_GLOBAL const $VALW* values_in, int32_t n, int32_t current_bit,
                             int32_t num_bits) {
  __shared__ typename ks_sweep_agent::TempStorage s;
  ks_sweep_agent(s, lookback, ctrs, has_next ? bins_next : nullptr, bins,
                 reinterpret_cast<ks_key*>(keys_out), reinterpret_cast<const ks_key*>(keys_in),
                 reinterpret_cast<ks_val*>(values_out),
                 reinterpret_cast<const ks_val*>(values_in), n, current_bit, num_bits,
                 kiln_cub::order{})
      .Process();
}
#undef KS_BOUNDS
)KILN";

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t p = s.find(from); p != std::string::npos; p = s.find(from, p + to.size()))
    s.replace(p, from.size(), to);
}

}  // namespace

std::string cub_radix_sort_source(std::uint32_t kb, std::uint32_t vb, int kind, bool desc,
                                  bool wide) {
  std::string s = "#define KS_KIND " + std::to_string(kind) + "\n#define KS_DESC " +
                  (desc ? "1" : "0") + "\n#define KS_VAL " +
                  (vb ? word_name(vb) : std::string("cub::NullType")) + "\n";
  s += kernels_text;
  replace_all(s, "$KEY", word_name(kb));
  replace_all(s, "$VALW", word_name(vb ? vb : 4));
  replace_all(s, "$OFF", wide ? "uint64_t" : "uint32_t");
  return s;
}

namespace {

// The policy's numbers (ks_policy's out[]).
struct tile_policy {
  std::uint32_t hist_threads = 0, sum_threads = 0, threads = 0, items = 0, bits = 0, sum_bits = 0;
};

// CUB's policy depends on the device's architecture and the key, value and offset widths only.
tile_policy policy_of(queue& q, const kernel& ks_policy, std::uint32_t kb, std::uint32_t vb,
                      bool wide) {
  static std::mutex mu;
  static std::map<std::tuple<std::string, std::uint32_t, std::uint32_t, bool>, tile_policy> known;
  const auto id = std::make_tuple(q.get_device().id(), kb, vb, wide);
  {
    std::lock_guard lock(mu);
    if (auto it = known.find(id); it != known.end()) return it->second;
  }
  queue_impl& qi = *q.impl();
  const sort_operand out{allocate_on(qi, 6 * 4), 0};
  arg_binding b[] = {array_arg(out, scalar_type::u32, false, 6)};
  launch(*ks_policy.impl(), qi, range(1), nullptr, b, 1);
  std::uint32_t v[6] = {};
  copy_d2h(qi, v, *out.mem, 0, sizeof v);
  q.finish();
  const tile_policy p{v[0], v[1], v[2], v[3], v[4], v[5]};
  if (!p.hist_threads || !p.sum_threads || !p.threads || !p.items || p.bits < 1 || p.bits > 8 ||
      p.sum_bits != p.bits)
    throw backend_failure("kiln radix_sort: CUB's policy reads back as hist " +
                          std::to_string(p.hist_threads) + ", tile " + std::to_string(p.threads) +
                          " x " + std::to_string(p.items) + ", " + std::to_string(p.bits) +
                          " bits: not a usable onesweep policy");
  std::lock_guard lock(mu);
  known.emplace(id, p);
  return p;
}

bool env_off() {
  const char* v = std::getenv("KILN_CUB");
  return v && std::string_view(v) == "0";
}

}  // namespace

std::optional<std::string> find_cccl(const char* kiln_cccl_include, std::string* why) {
  std::string tried;
  std::optional<std::string> found;
  auto take = [&](const fs::path& dir) {
    const long v = cccl_version(dir);
    if (v >= min_cccl) return found = dir.string(), true;
    if (v > 0)
      tried += "; " + dir.string() + " holds CCCL " + std::to_string(v / 1000000) + "." +
               std::to_string(v / 1000 % 1000) + " (3.0 or newer needed)";
    return false;
  };
  std::string reason;
  if (kiln_cccl_include && *kiln_cccl_include) {
    if (take(kiln_cccl_include)) return found;
    reason = "KILN_CCCL_INCLUDE=" + std::string(kiln_cccl_include) +
             " holds no CCCL 3.0+ (cub/device/dispatch/kernels/radix_sort.cuh, "
             "thrust/version.h and cuda/std/__cccl/version.h)" +
             tried;
  } else {
    for (const fs::path& d : candidates())
      if (take(d)) return found;
    reason =
        "CCCL 3.0+ headers (CUB) not found: set KILN_CCCL_INCLUDE to the folder holding "
        "cub/, thrust/ and cuda/, or install the CUDA toolkit or the nvidia-cuda-cccl package" +
        tried;
  }
  if (why) *why = reason;
  return std::nullopt;
}

std::optional<std::string> cccl_include_dir(std::string* why) {
  static const std::pair<std::optional<std::string>, std::string> found = [] {
    std::pair<std::optional<std::string>, std::string> r;
    r.first = find_cccl(std::getenv("KILN_CCCL_INCLUDE"), &r.second);
    return r;
  }();
  if (why) *why = found.second;
  return found.first;
}

std::string cub_sort_unavailable(const device& dev) {
  if (dev.info().backend != "cuda") return "not a CUDA device";
  if (env_off()) return "off (KILN_CUB=0)";
  std::string why;
  return cccl_include_dir(&why) ? std::string() : why;
}

void cub_radix_sort(queue& q, const radix_sort_args& a, std::uint32_t kb, std::uint32_t vb,
                    const radix_sorted& r) {
  queue_impl& qi = *q.impl();
  const device& dev = q.get_device();
  const std::uint64_t n = a.n;
  const bool wide = n > 0xFFFFFFFFull;
  const int kind = order_kind(a.key_type);
  // One program per key width, kind, direction, value width and offset width, found by that key
  // (no source rendered or hashed once it is known).
  const std::uint64_t key = kb | std::uint64_t(vb) << 8 | std::uint64_t(kind) << 16 |
                            std::uint64_t(a.descending) << 24 | std::uint64_t(wide) << 25;
  const std::vector<kernel> ks =
      get_generated(dev, "cub_radix_sort", key, [&] {
        generated_program g;
        g.source = cub_radix_sort_source(kb, vb, kind, a.descending, wide);
        g.kernels = {"ks_policy", "ks_hist", "ks_exclusive_sum", "ks_onesweep"};
        g.native = true;
        g.options = "-I\"" + *cccl_include_dir() + "\"";
        return g;
      }).kernels;
  const tile_policy p = policy_of(q, ks[0], kb, vb, wide);
  const scalar_type off_t = wide ? scalar_type::u64 : scalar_type::u32;
  const std::uint64_t ob = wide ? 8 : 4;
  const std::uint64_t digits = 1ull << p.bits, tile = std::uint64_t(p.threads) * p.items;
  const std::uint32_t passes = (kb * 8 + p.bits - 1) / p.bits;
  // Portions keep the look-back's counts below 2^30 (CUB's PORTION_SIZE).
  const std::uint64_t portion = ((1ull << 28) - 1) / tile * tile;
  const std::uint64_t portions = (n + portion - 1) / portion;
  const std::uint64_t max_blocks = (std::min(n, portion) + tile - 1) / tile;

  auto fresh = [&](std::uint64_t bytes) {
    return sort_operand{allocate_on(qi, std::max<std::uint64_t>(bytes, 8)), 0};
  };
  const sort_operand bins = fresh(portions * passes * digits * ob);
  const sort_operand lookback = fresh(max_blocks * digits * 4);
  const sort_operand ctrs = fresh(portions * passes * 4);
  const std::uint32_t zero = 0;
  fill(qi, *ctrs.mem, 0, &zero, 4, portions * passes);
  fill(qi, *bins.mem, 0, &zero, 4, passes * digits * ob / 4);

  const kernel &hist = ks[1], &sum = ks[2], &sweep = ks[3];
  const std::uint64_t sms = std::max<std::uint32_t>(dev.info().compute_units, 1);
  const std::uint64_t hist_blocks =
      std::min<std::uint64_t>(sms * std::max<std::uint32_t>(2048 / p.hist_threads, 1),
                              std::max<std::uint64_t>((n + tile - 1) / tile, 1));
  {
    std::vector<arg_binding> b = {array_arg(bins, off_t, false, passes * digits),
                                  array_arg(a.keys_in, word_type(kb), true, n)};
    b.push_back(wide ? bind_arg(n) : bind_arg(static_cast<std::uint32_t>(n)));
    b.push_back(bind_arg(std::int32_t(0)));
    b.push_back(bind_arg(std::int32_t(kb * 8)));
    const range group(p.hist_threads);
    launch(*hist.impl(), qi, range(hist_blocks * p.hist_threads), &group, b.data(), b.size());
  }
  {
    arg_binding b[] = {array_arg(bins, off_t, false, passes * digits)};
    const range group(p.sum_threads);
    launch(*sum.impl(), qi, range(std::uint64_t(passes) * p.sum_threads), &group, b, 1);
  }
  // Pass k writes the output when the passes left after it are even in number.
  const sort_operand tmp_k = passes > 1 ? fresh(n * kb) : r.keys;
  const sort_operand tmp_v = passes > 1 && vb ? fresh(n * vb) : r.values;
  const std::uint32_t vw = vb ? vb : 4;
  const range group(p.threads);
  for (std::uint32_t pass = 0; pass < passes; ++pass) {
    const bool to_out = (passes - 1 - pass) % 2 == 0;
    const sort_operand& ko = to_out ? r.keys : tmp_k;
    const sort_operand& ki = pass == 0 ? a.keys_in : (to_out ? tmp_k : r.keys);
    const sort_operand& vo = to_out ? r.values : tmp_v;
    const sort_operand& vi = pass == 0 ? a.values_in : (to_out ? tmp_v : r.values);
    const int bits = static_cast<int>(std::min<std::uint32_t>(p.bits, kb * 8 - pass * p.bits));
    for (std::uint64_t po = 0; po < portions; ++po) {
      const std::uint64_t start = po * portion, items = std::min(n - start, portion);
      const std::uint64_t blocks = (items + tile - 1) / tile;
      fill(qi, *lookback.mem, 0, &zero, 4, blocks * digits);
      const bool next = po + 1 < portions;
      std::vector<arg_binding> b = {
          array_arg(lookback, scalar_type::i32, false, blocks * digits),
          array_arg({ctrs.mem, po * passes + pass}, scalar_type::i32, false, 1),
          array_arg({bins.mem, ((next ? po + 1 : po) * passes + pass) * digits}, off_t, false,
                    digits),
          bind_arg(std::int32_t(next ? 1 : 0)),
          array_arg({bins.mem, (po * passes + pass) * digits}, off_t, true, digits),
          array_arg(ko, word_type(kb), false, n),
          array_arg({ki.mem, ki.offset + start}, word_type(kb), true, items),
          array_arg(vb ? vo : bins, word_type(vw), false, vb ? n : 0),
          array_arg(vb ? sort_operand{vi.mem, vi.offset + start} : bins, word_type(vw), true,
                    vb ? items : 0),
          bind_arg(static_cast<std::int32_t>(items)),
          bind_arg(static_cast<std::int32_t>(pass * p.bits)),
          bind_arg(static_cast<std::int32_t>(bits))};
      launch(*sweep.impl(), qi, range(blocks * p.threads), &group, b.data(), b.size());
    }
  }
}

}  // namespace kiln::detail
