// Device radix sort (src/sort/): every key type, both directions, keys only and with 4- and
// 8-byte values, against std::stable_sort on seeded random inputs, on every device; sizes
// around the tile and chunk edges; duplicates and all-equal keys (stability through values =
// original indices); NaN, signed zeros and infinities; outputs poisoned first; bad input.
#include "sort/radix_sort.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numeric>

#include "conformance/backends.hpp"
#include "kernel_lang/parser.hpp"
#include "sort/cub_radix_sort.hpp"

namespace {

using kiln::scalar_type;
using kiln::detail::radix_policy;
using kiln::detail::radix_sort;
using kiln::detail::radix_sort_args;
using kiln::detail::sort_operand;

// bool keys travel as bytes (std::vector<bool> holds no array).
template <class K>
using stored = std::conditional_t<std::is_same_v<K, bool>, std::uint8_t, K>;

// The order the sort promises, as a strict weak order for std::stable_sort.
template <class K>
bool before(K a, K b, bool desc) {
  if constexpr (std::is_floating_point_v<K>) {
    const bool na = std::isnan(a), nb = std::isnan(b);
    if (na || nb) return !na && nb;  // NaN last in both directions
    if (a == b && std::signbit(a) != std::signbit(b)) return std::signbit(a) != desc;
  }
  return desc ? b < a : a < b;
}

template <class T>
sort_operand operand(const kiln::buffer<T>& b) {
  return {b.view().memory(), 0};
}

// n keys drawn from the values whose order is special: NaNs (quiet, negative, with a payload:
// bits compared, so their order among themselves is checked), infinities, signed zeros,
// denormals, the extremes.
template <class F>
std::vector<F> specials(std::uint64_t n, std::uint64_t seed) {
  using bits = std::conditional_t<sizeof(F) == 4, std::uint32_t, std::uint64_t>;
  const F inf = std::numeric_limits<F>::infinity();
  const F neg_nan = -std::numeric_limits<F>::quiet_NaN();
  const F payload_nan =
      std::bit_cast<F>(bits(std::bit_cast<bits>(std::numeric_limits<F>::quiet_NaN()) | 5));
  const F pool[] = {std::numeric_limits<F>::quiet_NaN(),
                    neg_nan,
                    payload_nan,
                    inf,
                    -inf,
                    F(0),
                    -F(0),
                    std::numeric_limits<F>::denorm_min(),
                    -std::numeric_limits<F>::denorm_min(),
                    std::numeric_limits<F>::max(),
                    std::numeric_limits<F>::lowest(),
                    F(1),
                    F(-1),
                    F(0.5)};
  std::mt19937_64 rng(seed);
  std::vector<F> out(n);
  for (F& v : out) v = pool[rng() % std::size(pool)];
  return out;
}

class SortTest : public conformance::DeviceTest {
 protected:
  std::vector<std::uint64_t> sizes() const {
    const std::uint64_t t = radix_policy.tile();
    std::vector<std::uint64_t> s = {0, 1, 2, t - 1, t, t + 1, 5 * t + 17, 100003};
    if (is_gpu()) s.push_back(3000017);
    return s;
  }

  // Sorts keys (with values = their indices as V, unless with_values is false) on the device
  // and compares with std::stable_sort, bit for bit.
  template <class K, class V = std::uint32_t>
  void check(const std::vector<stored<K>>& keys, bool desc, bool with_values = true) {
    using S = stored<K>;
    const std::uint64_t n = keys.size();
    SCOPED_TRACE(::testing::Message()
                 << "n " << n << (desc ? " descending" : " ascending")
                 << (with_values ? " values of " : " keys only, ") << sizeof(V) << " bytes");
    kiln::queue& q = dev().default_queue();
    // One spare element past n in each output: it must stay poisoned.
    kiln::buffer<S> kin(dev(), std::max<std::uint64_t>(n, 1)), kout(dev(), n + 1);
    if (n) kin.view().subview(0, n).copy_from(keys);
    kout.fill(conformance::poison<S>());
    std::vector<V> idx(n);
    std::iota(idx.begin(), idx.end(), V(0));
    kiln::buffer<V> vin(dev(), std::max<std::uint64_t>(n, 1)), vout(dev(), n + 1);
    if (n) vin.view().subview(0, n).copy_from(idx);
    vout.fill(conformance::poison<V>());

    radix_sort_args a;
    a.key_type = kiln::scalar_type_of<K>;
    a.n = n;
    a.keys_in = operand(kin);
    a.keys_out = operand(kout);
    a.descending = desc;
    a.path = path_;
    if (with_values) {
      a.value_bytes = sizeof(V);
      a.values_in = operand(vin);
      a.values_out = operand(vout);
    }
    radix_sort(q, a);

    std::stable_sort(idx.begin(), idx.end(), [&](V x, V y) {
      return before<K>(static_cast<K>(keys[x]), static_cast<K>(keys[y]), desc);
    });
    const std::vector<S> got = kout.to_vector();
    const std::vector<V> got_v = vout.to_vector();
    std::uint64_t bad = 0;
    for (std::uint64_t i = 0; i < n && bad < 5; ++i) {
      const bool key_ok = std::memcmp(&got[i], &keys[idx[i]], sizeof(S)) == 0;
      const bool val_ok = !with_values || got_v[i] == idx[i];
      if (!key_ok || !val_ok) {
        ++bad;
        ADD_FAILURE() << "at " << i << ": key " << +got[i] << " (want " << +keys[idx[i]]
                      << "), value " << +got_v[i] << " (want " << idx[i] << ")";
      }
    }
    EXPECT_TRUE(conformance::is_poison(got[n])) << "key written past n";
    EXPECT_TRUE(conformance::is_poison(got_v[n])) << "value written past n";
  }

  // Random keys over the type's range, or over few values (many duplicates).
  template <class K>
  static std::vector<stored<K>> random_keys(std::uint64_t n, std::uint64_t seed, bool few) {
    std::mt19937_64 rng(seed);
    std::vector<stored<K>> out(n);
    for (auto& v : out) {
      const std::uint64_t r = rng();
      if constexpr (std::is_same_v<K, bool>)
        v = r & 1;
      else if constexpr (std::is_floating_point_v<K>)
        v = few ? K(std::int64_t(r % 9) - 4) : K(std::int64_t(r % 2000001) - 1000000) / K(7);
      else if (few)
        v = static_cast<K>(r % 7 + (std::is_signed_v<K> ? K(-3) : K(0)));
      else
        v = static_cast<K>(r);
    }
    return out;
  }

  kiln::detail::radix_path path_ = kiln::detail::radix_path::automatic;

  template <class K>
  void every_size(bool desc) {
    for (std::uint64_t n : sizes()) {
      check<K>(random_keys<K>(n, 1000 + n, false), desc);
      if (n > 2) check<K>(random_keys<K>(n, 2000 + n, true), desc);
    }
  }
};

TEST_P(SortTest, EveryKeyTypeAscendingAndDescendingWithIndices) {
  auto both = [&]<class K>(K) {
    SCOPED_TRACE(kiln::type_name(kiln::scalar_type_of<K>));
    every_size<K>(false);
    every_size<K>(true);
  };
  both(bool{});
  both(std::int8_t{});
  both(std::uint8_t{});
  both(std::int16_t{});
  both(std::uint16_t{});
  both(std::int32_t{});
  both(std::uint32_t{});
  both(std::int64_t{});
  both(std::uint64_t{});
  both(float{});
  both(double{});
}

// The tiled kernels (local memory, barriers) run by default on GPUs only; on PoCL they run
// here, so CI checks their text on every key width, both directions, values of both sizes.
TEST_P(SortTest, TiledKernelsWhereBarriersExist) {
  KILN_REQUIRE_FEATURE(dev(), barrier, "the tiled kernels use local memory and barriers");
  path_ = kiln::detail::radix_path::tiled;
  for (std::uint64_t n : sizes()) {
    for (bool desc : {false, true}) {
      check<std::uint8_t>(random_keys<std::uint8_t>(n, 10 + n, false), desc);
      check<std::int16_t>(random_keys<std::int16_t>(n, 11 + n, true), desc);
      check<float>(random_keys<float>(n, 12 + n, false), desc, false);
      check<std::int64_t, std::uint64_t>(random_keys<std::int64_t>(n, 13 + n, true), desc);
    }
  }
  check<double>(specials<double>(5000, 14), true);
  check<float, std::uint64_t>(specials<float>(5000, 15), false);
}

// CUB's onesweep agents (CUDA devices with CCCL's headers): every key width and kind in both
// directions, keys only and with 4- and 8-byte values, sizes around CUB's tiles (3840 keys of
// 32 bits on sm_90) and its partial last tile; Kiln's order of NaNs and signed zeros, which
// CUB's own traits do not give.
TEST_P(SortTest, CubAgentsWhereCcclIsFound) {
  const std::string why = kiln::detail::cub_sort_unavailable(dev());
  if (!why.empty()) GTEST_SKIP() << "CUB's radix sort: " << why;
  path_ = kiln::detail::radix_path::cub;
  for (std::uint64_t n : {1ull, 2ull, 3839ull, 3840ull, 3841ull, 7681ull, 100003ull, 3000017ull})
    for (bool desc : {false, true}) {
      check<bool>(random_keys<bool>(n, 20 + n, false), desc);
      check<std::int8_t>(random_keys<std::int8_t>(n, 21 + n, false), desc, false);
      check<std::uint16_t, std::uint64_t>(random_keys<std::uint16_t>(n, 22 + n, true), desc);
      check<std::int32_t>(random_keys<std::int32_t>(n, 23 + n, false), desc);
      check<std::uint32_t>(random_keys<std::uint32_t>(n, 24 + n, true), desc, false);
      check<float>(random_keys<float>(n, 25 + n, false), desc);
      check<std::int64_t, std::uint64_t>(random_keys<std::int64_t>(n, 26 + n, false), desc);
      check<double>(random_keys<double>(n, 27 + n, true), desc, false);
      check<float, std::uint64_t>(specials<float>(n, 28 + n), desc);
      check<double>(specials<double>(n, 29 + n), desc);
    }
}

// Keys whose digits are constant in some passes (those passes move nothing): skipped first,
// last, in the middle and all but one, so the keys end in the output, the temporary or the
// input before the final copy; both paths where the device runs both.
TEST_P(SortTest, PassesWithOneDigitValueAreSkipped) {
  std::vector<kiln::detail::radix_path> paths = {kiln::detail::radix_path::chunked};
  if (dev().supports(kiln::feature::barrier)) paths.push_back(kiln::detail::radix_path::tiled);
  const std::uint64_t n = 3 * radix_policy.tile() + 11;
  for (kiln::detail::radix_path path : paths) {
    path_ = path;
    for (std::uint64_t mask :
         {0x00FF00FFull, 0xFF00FF00ull, 0x0000FF00ull, 0xFF000000ull, 0x00FFFF00ull}) {
      SCOPED_TRACE(::testing::Message() << "mask " << std::hex << mask);
      std::vector<std::uint32_t> u = random_keys<std::uint32_t>(n, mask, false);
      for (auto& v : u) v &= std::uint32_t(mask);
      check<std::uint32_t>(u, false);
      check<std::uint32_t>(u, true, false);
      std::vector<std::int64_t> i64(n);
      for (std::uint64_t i = 0; i < n; ++i) i64[i] = std::int64_t(u[i]) << 16;
      check<std::int64_t, std::uint64_t>(i64, true);
    }
  }
}

TEST_P(SortTest, KeysOnlyAndEightByteValues) {
  for (std::uint64_t n : sizes()) {
    check<std::int32_t>(random_keys<std::int32_t>(n, 3 + n, false), false, false);
    check<double>(random_keys<double>(n, 4 + n, true), true, false);
    check<std::uint64_t, std::uint64_t>(random_keys<std::uint64_t>(n, 5 + n, false), false);
    check<float, std::uint64_t>(random_keys<float>(n, 6 + n, true), true);
  }
}

// 2^24 + 3 keys (~16K tiles, a scan of several rounds per work-group) on GPUs.
TEST_P(SortTest, SixteenMillionKeysOnGpus) {
  KILN_REQUIRE_GPU(dev());
  const std::uint64_t n = (std::uint64_t(1) << 24) + 3;
  check<std::uint32_t>(random_keys<std::uint32_t>(n, 81, false), false);
  check<double, std::uint64_t>(random_keys<double>(n, 82, true), true);
  check<std::int64_t>(random_keys<std::int64_t>(n, 83, false), false, false);
}

TEST_P(SortTest, AllEqualKeysKeepInputOrder) {
  const std::uint64_t n = 3 * radix_policy.tile() + 5;
  check<std::int32_t>(std::vector<std::int32_t>(n, -7), false);
  check<std::int32_t>(std::vector<std::int32_t>(n, -7), true);
  check<double>(std::vector<double>(n, 2.5), true);
}

TEST_P(SortTest, FloatsNanLastSignedZerosAndInfinities) {
  for (std::uint64_t n : {std::uint64_t(14), radix_policy.tile() + 1, std::uint64_t(20011)}) {
    for (bool desc : {false, true}) {
      check<float>(specials<float>(n, n), desc);
      check<double>(specials<double>(n, n + 1), desc);
      check<double, std::uint64_t>(specials<double>(n, n + 2), desc);
    }
  }
}

// n one-byte keys in 0..250 into an output filled with 255, keys only: the output ascends and
// holds each value as often as the input (an unwritten or misplaced element breaks one of the
// two).
void check_byte_keys(const kiln::device& dev, std::uint64_t n) {
  std::vector<std::uint8_t> keys(n);
  std::uint64_t want[256] = {};
  for (std::uint64_t i = 0; i < n; ++i) {
    keys[i] = std::uint8_t((i * 2654435761u >> 7) % 251);
    ++want[keys[i]];
  }
  kiln::buffer<std::uint8_t> kin(dev, keys), kout(dev, n);
  kout.fill(255);
  radix_sort_args a;
  a.key_type = scalar_type::u8;
  a.n = n;
  a.keys_in = operand(kin);
  a.keys_out = operand(kout);
  keys.clear();
  keys.shrink_to_fit();
  radix_sort(dev.default_queue(), a);
  const std::vector<std::uint8_t> got = kout.to_vector();
  std::uint64_t have[256] = {};
  std::uint64_t descents = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    ++have[got[i]];
    descents += i && got[i] < got[i - 1];
  }
  EXPECT_EQ(descents, 0u);
  for (int v = 0; v < 256; ++v) EXPECT_EQ(have[v], want[v]) << "key " << v;
}

// Outputs left empty are allocated (keys and values both: the overlap check must not take two
// outputs still to allocate for one array; found by kiln::query's order_by).
TEST_P(SortTest, OutputsAllocatedWhenNotGiven) {
  const std::vector<std::uint32_t> keys = {5, 1, 4, 1, 3};
  const std::vector<std::uint64_t> vals = {0, 1, 2, 3, 4};
  kiln::buffer<std::uint32_t> kin(dev(), keys);
  kiln::buffer<std::uint64_t> vin(dev(), vals);
  radix_sort_args a;
  a.n = keys.size();
  a.keys_in = operand(kin);
  a.value_bytes = 8;
  a.values_in = operand(vin);
  const kiln::detail::radix_sorted r = radix_sort(dev().default_queue(), a);
  ASSERT_TRUE(r.keys.mem && r.values.mem);
  EXPECT_NE(r.keys.mem, r.values.mem);
  std::vector<std::uint32_t> k(keys.size());
  std::vector<std::uint64_t> v(vals.size());
  kiln::detail::copy_d2h(*dev().default_queue().impl(), k.data(), *r.keys.mem, 0, 4 * k.size());
  kiln::detail::copy_d2h(*dev().default_queue().impl(), v.data(), *r.values.mem, 0, 8 * v.size());
  dev().default_queue().finish();
  EXPECT_EQ(k, (std::vector<std::uint32_t>{1, 1, 3, 4, 5}));
  EXPECT_EQ(v, (std::vector<std::uint64_t>{1, 3, 4, 2, 0}));
}

TEST_P(SortTest, ByteKeysCounted) { check_byte_keys(dev(), 100003); }

// 64-bit sizes: more than 2^32 keys (one pass of byte keys: ~4 GiB in, out and ~8 GiB of
// counts); GPUs with room for it only.
TEST_P(SortTest, MoreThanTwoToThe32Keys) {
  KILN_REQUIRE_GPU(dev());
  const std::uint64_t n = (std::uint64_t(1) << 32) + 4099;
  if (dev().info().global_mem_bytes < 5 * n)
    GTEST_SKIP() << dev().id() << " holds less than the " << 5 * n << " bytes the case needs";
  check_byte_keys(dev(), n);
}

TEST_P(SortTest, AllocatesOutputsAndLeavesInputsAlone) {
  const std::vector<std::int64_t> keys = random_keys<std::int64_t>(5000, 9, false);
  kiln::buffer<std::int64_t> kin(dev(), keys);
  radix_sort_args a;
  a.key_type = scalar_type::i64;
  a.n = keys.size();
  a.keys_in = operand(kin);
  a.descending = true;
  const auto r = radix_sort(dev().default_queue(), a);
  ASSERT_TRUE(r.keys.mem);
  EXPECT_FALSE(r.values.mem);
  std::vector<std::int64_t> want = keys;
  std::sort(want.begin(), want.end(), std::greater<>());
  EXPECT_EQ(kiln::buffer_view<std::int64_t>(r.keys.mem, r.keys.offset, keys.size()).to_vector(),
            want);
  EXPECT_EQ(kin.to_vector(), keys);
}

// Sorts on two queues of one device, enqueued back to back with no wait between, each with its
// own temporaries: both results right once both queues finish.
TEST_P(SortTest, TwoQueuesAtOnce) {
  const std::uint64_t n = 50021;
  kiln::queue q1(dev()), q2(dev());
  std::vector<std::vector<std::uint32_t>> keys = {random_keys<std::uint32_t>(n, 71, false),
                                                  random_keys<std::uint32_t>(n, 72, true)};
  std::vector<kiln::buffer<std::uint32_t>> in;
  for (const auto& k : keys) in.emplace_back(dev(), k);
  std::vector<kiln::detail::radix_sorted> out;
  for (int i = 0; i < 2; ++i) {
    radix_sort_args a;
    a.key_type = scalar_type::u32;
    a.n = n;
    a.keys_in = operand(in[std::size_t(i)]);
    a.descending = i == 1;
    out.push_back(radix_sort(i ? q2 : q1, a));
  }
  q1.finish();
  q2.finish();
  for (int i = 0; i < 2; ++i) {
    std::vector<std::uint32_t> want = keys[std::size_t(i)];
    if (i)
      std::sort(want.begin(), want.end(), std::greater<>());
    else
      std::sort(want.begin(), want.end());
    const auto& r = out[std::size_t(i)].keys;
    EXPECT_EQ(kiln::buffer_view<std::uint32_t>(r.mem, r.offset, n).to_vector(), want) << i;
  }
}

TEST_P(SortTest, BadInputIsRefusedClearly) {
  kiln::queue& q = dev().default_queue();
  kiln::buffer<std::uint16_t> k16(dev(), 10), out16(dev(), 10);
  kiln::buffer<std::uint32_t> k32(dev(), 10), v32(dev(), 10), o32(dev(), 10);
  radix_sort_args a;
  a.n = 10;
  a.keys_in = operand(k16);
  a.keys_out = operand(out16);
  for (scalar_type t : {scalar_type::f16, scalar_type::bf16}) {
    a.key_type = t;
    try {
      radix_sort(q, a);
      ADD_FAILURE() << "no error for " << kiln::type_name(t);
    } catch (const kiln::unsupported& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(kiln::type_name(t)));
    }
  }
  a.key_type = scalar_type::u32;
  a.keys_in = operand(k32);
  a.keys_out = operand(o32);
  a.value_bytes = 2;
  a.values_in = operand(v32);
  EXPECT_THROW(radix_sort(q, a), kiln::invalid_argument);
  a.value_bytes = 0;
  a.n = 11;  // more keys than the buffers hold
  EXPECT_THROW(radix_sort(q, a), kiln::invalid_argument);
  a.n = 10;
  a.path = kiln::detail::radix_path::tiled;
  if (!dev().supports(kiln::feature::barrier)) {
    EXPECT_THROW(radix_sort(q, a), kiln::unsupported);
  }
  a.path = kiln::detail::radix_path::cub;
  if (const std::string why = kiln::detail::cub_sort_unavailable(dev()); !why.empty()) {
    try {
      radix_sort(q, a);
      ADD_FAILURE() << "the CUB path ran on " << dev().id();
    } catch (const kiln::unsupported& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(why));
    }
  }
  a.path = kiln::detail::radix_path::automatic;
  a.keys_out = a.keys_in;  // in place: refused
  EXPECT_THROW(radix_sort(q, a), kiln::invalid_argument);
  a.keys_out = operand(o32);
  a.keys_out.offset = 1;  // 9 elements left
  EXPECT_THROW(radix_sort(q, a), kiln::invalid_argument);
  a.keys_out.offset = 0;
  a.value_bytes = 4;
  a.values_in = {};
  EXPECT_THROW(radix_sort(q, a), kiln::invalid_argument);
  a.value_bytes = 0;
  if (auto o = other()) {
    kiln::buffer<std::uint32_t> elsewhere(*o, 10);
    a.keys_out = operand(elsewhere);
    EXPECT_THROW(radix_sort(q, a), kiln::device_mismatch);
  }
}

// The CUDA dialect of the kernel texts compiles (NVRTC, compile-only where there is no GPU):
// every tiled text, which CUDA runs, and two chunked ones, its fallback (NVRTC takes ~1 s for
// each chunked text; their words are all that differ).
TEST(SortCompile, CudaDialectOfTheTexts) {
  for (std::uint32_t kb : {1u, 2u, 4u, 8u})
    for (std::uint32_t vb : {4u, 8u})
      EXPECT_NO_THROW(
          conformance::compile_everywhere(kiln::detail::radix_sort_source(true, kb, vb)))
          << "tiled, " << kb << "-byte keys, " << vb << "-byte values";
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::radix_sort_source(false, 1, 4)));
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::radix_sort_source(false, 8, 8)));
}

// The header search: KILN_CCCL_INCLUDE naming a folder without CCCL, or one with a CCCL older
// than 3.0, is refused with the folder, the version and what is needed named.
TEST(SortCub, HeaderSearchNamesWhatItFound) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(testing::TempDir()) / "kiln-cccl-search";
  fs::remove_all(root);
  std::string why;
  EXPECT_FALSE(kiln::detail::find_cccl((root / "absent").c_str(), &why));
  EXPECT_THAT(why, ::testing::HasSubstr("KILN_CCCL_INCLUDE=" + (root / "absent").string()));
  EXPECT_THAT(why, ::testing::HasSubstr("holds no CCCL 3.0+"));
  // A CCCL 2.8 layout: found, and refused for its version.
  fs::create_directories(root / "cub/device/dispatch/kernels");
  fs::create_directories(root / "thrust");
  fs::create_directories(root / "cuda/std/__cccl");
  std::ofstream(root / "cub/device/dispatch/kernels/radix_sort.cuh") << "\n";
  std::ofstream(root / "thrust/version.h") << "\n";
  std::ofstream(root / "cuda/std/__cccl/version.h") << "#define CCCL_VERSION 2008000\n";
  why.clear();
  EXPECT_FALSE(kiln::detail::find_cccl(root.c_str(), &why));
  EXPECT_THAT(why, ::testing::HasSubstr("holds CCCL 2.8 (3.0 or newer needed)"));
  // The same layout at 3.0 is taken.
  std::ofstream(root / "cuda/std/__cccl/version.h") << "#define CCCL_VERSION 3000001\n";
  EXPECT_EQ(kiln::detail::find_cccl(root.c_str(), &why), std::optional<std::string>(root.string()));
  fs::remove_all(root);
}

// The CUB texts compile with NVRTC against the CCCL headers found (compile-only where there is
// no GPU): each key width, kind and value width once, both directions, 64-bit offsets.
TEST(SortCompile, CubTextsCompileWithNvrtc) {
  std::string why;
  const std::optional<std::string> dir = kiln::detail::cccl_include_dir(&why);
  if (!dir) GTEST_SKIP() << why;
  const std::string opts = "-I\"" + *dir + "\"";
  const struct {
    std::uint32_t kb, vb;
    int kind;
    bool desc, wide;
  } cases[] = {{4, 0, 2, false, false},
               {8, 8, 2, true, false},
               {1, 4, 1, false, false},
               {2, 0, 0, true, false},
               {4, 4, 0, false, true}};
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message()
                 << c.kb << "-byte keys of kind " << c.kind << ", values " << c.vb
                 << (c.desc ? ", descending" : "") << (c.wide ? ", 64-bit offsets" : ""));
    const std::string src = kiln::detail::cub_radix_sort_source(c.kb, c.vb, c.kind, c.desc, c.wide);
    // Launches know the kernels' parameters from their KILN_KERNEL declarations.
    std::vector<std::string> names;
    for (const auto& k : kiln::kernel_lang::parse(src).kernels) names.push_back(k.name);
    EXPECT_EQ(names, (std::vector<std::string>{"ks_policy", "ks_hist", "ks_exclusive_sum",
                                               "ks_onesweep"}));
    try {
      kiln::detail::compile_native_only("cuda", "sm_90", src, opts);
    } catch (const kiln::unsupported& e) {
      GTEST_SKIP() << e.what();
    }
  }
}

KILN_INSTANTIATE_PER_DEVICE(SortTest);

}  // namespace
