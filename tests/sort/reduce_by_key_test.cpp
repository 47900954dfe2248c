// Device reduce-by-key (src/sort/reduce_by_key.hpp) against a host reference on every device:
// runs of random lengths (sizes around the chunk and scan-level edges, with the policy's chunks
// and with tiny forced ones), one huge run, all-distinct keys, NaN runs and signed zeros as
// keys and values, eleven value columns of every op at once, keys only, determinism, bad input.
#include "sort/reduce_by_key.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "conformance/backends.hpp"

namespace {

using kiln::scalar_type;
using kiln::detail::reduce_by_key;
using kiln::detail::reduce_by_key_args;
using kiln::detail::reduce_by_key_result;
using kiln::detail::run_op;
using kiln::detail::run_value;
using kiln::detail::sort_operand;

template <class K>
using stored = std::conditional_t<std::is_same_v<K, bool>, std::uint8_t, K>;

template <class T>
sort_operand operand(const kiln::buffer<T>& b) {
  return {b.view().memory(), 0};
}

// The primitive's key equality: == or both NaN; integers bitwise.
template <class K>
bool same(K a, K b) {
  if constexpr (std::is_floating_point_v<K>)
    return a == b || (std::isnan(a) && std::isnan(b));
  else
    return a == b;
}

template <class T>
std::vector<T> read(kiln::queue& q, const std::shared_ptr<kiln::detail::memory_impl>& m,
                    std::uint64_t n) {
  std::vector<T> out(n);
  if (n) kiln::detail::copy_d2h(*q.impl(), out.data(), *m, 0, n * sizeof(T));
  q.finish();
  return out;
}

// The input: keys and three value arrays.
template <class K>
struct input {
  std::vector<stored<K>> keys;
  std::vector<std::int32_t> vi;
  std::vector<float> vf;
  std::vector<double> vd;
};

// The columns every mixed check asks for, in this order.
enum col {
  i_sum64,
  f_sum64,
  f_min,
  f_max,
  cnt,
  f_mean64,
  i_first,
  d_sum,
  i_max_f64,
  f_mean32,
  i_sum32,
  columns
};

class ReduceByKeyTest : public conformance::DeviceTest {
 protected:
  std::uint64_t chunk_ = 0;
  std::uint32_t fan_ = 0;
  kiln::detail::radix_path path_ = kiln::detail::radix_path::automatic;

  // Keys of run r: K(r % m) (adjacent runs differ); run lengths 1 + rng() % (2 * mean - 1).
  template <class K>
  static input<K> runs_of(std::uint64_t n, std::uint64_t mean, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    input<K> in;
    in.keys.resize(n);
    std::uint64_t r = 0;
    for (std::uint64_t i = 0; i < n; ++r) {
      const std::uint64_t len = 1 + rng() % (2 * mean - 1);
      stored<K> k;
      if constexpr (std::is_same_v<K, bool>)
        k = r & 1;
      else if constexpr (std::is_floating_point_v<K>)
        k = K(double(r % 100003) * 0.25 - 5000);
      else
        k = static_cast<K>(r % (sizeof(K) == 1 ? 201 : 1000003) - (std::is_signed_v<K> ? 100 : 0));
      for (std::uint64_t j = 0; j < len && i < n; ++j) in.keys[i++] = k;
    }
    in.vi.resize(n);
    in.vf.resize(n);
    in.vd.resize(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      in.vi[i] = std::int32_t(rng() % 2001) - 1000;
      in.vf[i] = float(std::int64_t(rng() % 80001) - 40000) / 400.0f;
      in.vd[i] = double(std::int64_t(rng() % 2000001) - 1000000) / 3.0;
    }
    return in;
  }

  // Reduces `in` on the device with every column (or keys only) and checks each run against
  // the host. Returns the device's f32-into-f64 sums (determinism checks).
  template <class K>
  std::vector<double> check(const input<K>& in, bool keys_only = false) {
    using S = stored<K>;
    const std::uint64_t n = in.keys.size();
    SCOPED_TRACE(::testing::Message() << "n " << n << (keys_only ? " keys only" : "") << " chunk "
                                      << chunk_ << " fan " << fan_);
    kiln::queue& q = dev().default_queue();
    const std::uint64_t cap = std::max<std::uint64_t>(n, 1);
    kiln::buffer<S> kb(dev(), cap);
    kiln::buffer<std::int32_t> bi(dev(), cap);
    kiln::buffer<float> bf(dev(), cap);
    kiln::buffer<double> bd(dev(), cap);
    if (n) {
      kb.view().subview(0, n).copy_from(in.keys);
      bi.view().subview(0, n).copy_from(in.vi);
      bf.view().subview(0, n).copy_from(in.vf);
      bd.view().subview(0, n).copy_from(in.vd);
    }
    {  // Poison memory the outputs may be carved from (a pool hands freed blocks back).
      kiln::buffer<std::uint64_t> junk(dev(), cap * 2);
      junk.fill(conformance::poison<std::uint64_t>());
      q.finish();
    }
    reduce_by_key_args a;
    a.key_type = kiln::scalar_type_of<K>;
    a.n = n;
    a.keys = operand(kb);
    a.chunk = chunk_;
    a.scan_fan = fan_;
    a.path = path_;
    const auto i32 = scalar_type::i32, f32 = scalar_type::f32, f64 = scalar_type::f64;
    if (!keys_only) {
      a.values = {{operand(bi), i32, run_op::sum, scalar_type::i64},
                  {operand(bf), f32, run_op::sum, f64},
                  {operand(bf), f32, run_op::min, f32},
                  {operand(bf), f32, run_op::max, f32},
                  {{}, f32, run_op::count, scalar_type::u64},
                  {operand(bf), f32, run_op::mean, f64},
                  {operand(bi), i32, run_op::first, i32},
                  {operand(bd), f64, run_op::sum, f64},
                  {operand(bi), i32, run_op::max, f64},
                  {operand(bf), f32, run_op::mean, f32},
                  {operand(bi), i32, run_op::sum, i32}};
    }
    const reduce_by_key_result r = reduce_by_key(q, a);

    // The host: runs, then each column by definition (sums of floats in double).
    std::vector<std::uint64_t> start;
    for (std::uint64_t i = 0; i < n; ++i)
      if (i == 0 || !same<K>(K(in.keys[i - 1]), K(in.keys[i]))) start.push_back(i);
    const std::uint64_t runs = start.size();
    start.push_back(n);
    EXPECT_EQ(r.runs, runs);
    EXPECT_TRUE(r.keys);
    EXPECT_EQ(r.values.size(), a.values.size());
    if (r.runs != runs) return {};
    const std::vector<S> keys = read<S>(q, r.keys, runs);
    for (std::uint64_t j = 0, bad = 0; j < runs && bad < 5; ++j)
      if (std::memcmp(&keys[j], &in.keys[start[j]], sizeof(S)) != 0) {
        ++bad;
        ADD_FAILURE() << "run " << j << ": key " << +keys[j] << ", want " << +in.keys[start[j]];
      }
    if (keys_only) return {};
    const auto c_isum = read<std::int64_t>(q, r.values[i_sum64], runs);
    const auto c_fsum = read<double>(q, r.values[f_sum64], runs);
    const auto c_fmin = read<float>(q, r.values[f_min], runs);
    const auto c_fmax = read<float>(q, r.values[f_max], runs);
    const auto c_cnt = read<std::uint64_t>(q, r.values[cnt], runs);
    const auto c_mean = read<double>(q, r.values[f_mean64], runs);
    const auto c_first = read<std::int32_t>(q, r.values[i_first], runs);
    const auto c_dsum = read<double>(q, r.values[d_sum], runs);
    const auto c_imax = read<double>(q, r.values[i_max_f64], runs);
    const auto c_mean32 = read<float>(q, r.values[f_mean32], runs);
    const auto c_isum32 = read<std::int32_t>(q, r.values[i_sum32], runs);
    // Float sums: the device adds in another order; bound by the magnitudes added.
    auto near = [](double got, double want, double mag, double eps) {
      if (std::isnan(want)) return std::isnan(got);
      return std::fabs(got - want) <= eps * (mag + 1e-30);
    };
    auto same_float = [](double got, double want) {
      return std::isnan(want) ? std::isnan(got) : got == want;
    };
    std::uint64_t bad = 0;
    for (std::uint64_t j = 0; j < runs && bad < 5; ++j) {
      const std::uint64_t lo = start[j], hi = start[j + 1];
      std::int64_t isum = 0;
      double fsum = 0, fmag = 0, dsum = 0, dmag = 0;
      float fmin = in.vf[lo], fmax = in.vf[lo];
      std::int32_t imax = in.vi[lo];
      for (std::uint64_t i = lo; i < hi; ++i) {
        isum += in.vi[i];
        fsum += in.vf[i];
        fmag += std::fabs(double(in.vf[i]));
        dsum += in.vd[i];
        dmag += std::fabs(in.vd[i]);
        const float x = in.vf[i];
        if (std::isnan(x) || std::isnan(fmin) || x < fmin) fmin = std::isnan(fmin) ? fmin : x;
        if (std::isnan(x) || std::isnan(fmax) || x > fmax) fmax = std::isnan(fmax) ? fmax : x;
        imax = std::max(imax, in.vi[i]);
      }
      const double count = double(hi - lo);
      std::ostringstream why;
      if (c_isum[j] != isum) why << " i32 sum " << c_isum[j] << " want " << isum << ";";
      if (!near(c_fsum[j], fsum, fmag, 1e-12))
        why << " f32 sum " << c_fsum[j] << " want " << fsum << ";";
      if (!same_float(c_fmin[j], fmin)) why << " min " << c_fmin[j] << " want " << fmin << ";";
      if (!same_float(c_fmax[j], fmax)) why << " max " << c_fmax[j] << " want " << fmax << ";";
      if (c_cnt[j] != hi - lo) why << " count " << c_cnt[j] << " want " << hi - lo << ";";
      if (!near(c_mean[j], fsum / count, fmag / count, 1e-12))
        why << " mean " << c_mean[j] << " want " << fsum / count << ";";
      if (c_first[j] != in.vi[lo]) why << " first " << c_first[j] << " want " << in.vi[lo] << ";";
      if (!near(c_dsum[j], dsum, dmag, 1e-12))
        why << " f64 sum " << c_dsum[j] << " want " << dsum << ";";
      if (c_imax[j] != double(imax)) why << " i32 max " << c_imax[j] << " want " << imax << ";";
      if (!near(c_mean32[j], fsum / count, fmag / count, 1e-6))
        why << " mean f32 " << c_mean32[j] << " want " << fsum / count << ";";
      if (c_isum32[j] != std::int32_t(isum))
        why << " i32 sum i32 " << c_isum32[j] << " want " << isum << ";";
      if (!why.str().empty()) {
        ++bad;
        ADD_FAILURE() << "run " << j << " [" << lo << ", " << hi << "):" << why.str();
      }
    }
    return c_fsum;
  }

  // Sizes around the policy's chunk edges (CPU devices: chunks of >= 32768, up to two per
  // core), or, with forced chunks, around those.
  std::vector<std::uint64_t> sizes() const {
    const std::uint64_t c = chunk_ ? chunk_ : kiln::detail::reduce_policy.cpu_chunk_elems;
    std::vector<std::uint64_t> s = {0, 1, 2, c - 1, c, c + 1, 5 * c + 3};
    if (!chunk_) s.push_back(is_gpu() ? 3000017 : 1000003);
    return s;
  }
};

TEST_P(ReduceByKeyTest, RunsOfEveryLengthAroundChunkEdges) {
  for (std::uint64_t n : sizes())
    for (std::uint64_t mean : {1, 3, 40, 5000}) {
      if (n > 200000 && (mean == 1 || mean == 40)) continue;  // the host reference's time
      SCOPED_TRACE(::testing::Message() << "mean run " << mean);
      check<std::uint32_t>(runs_of<std::uint32_t>(n, mean, n * 7 + mean));
    }
}

// Tiny chunks and fans: runs spanning many chunks, three and more levels of the state scan.
TEST_P(ReduceByKeyTest, TinyChunksAndScanLevels) {
  for (auto [chunk, fan] :
       {std::pair<std::uint64_t, std::uint32_t>{1, 2}, {3, 2}, {5, 3}, {7, 16}}) {
    chunk_ = chunk;
    fan_ = fan;
    for (std::uint64_t n : {1, 2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 100, 1000, 20011})
      for (std::uint64_t mean : {1, 2, 6, 300}) check<float>(runs_of<float>(n, mean, n + mean));
  }
}

// The tiled kernels (local memory, barriers) run by default on GPUs only; on PoCL they run
// here, on whole tiles only (PoCL 5 runs a tile with items past n wrongly: see
// reduce_by_key.cpp), with the policy's tiles, and with tiles of 256 items x 1 and x 3
// elements and tiny scan fans. GPUs run every size.
TEST_P(ReduceByKeyTest, TiledKernelsWhereBarriersExist) {
  KILN_REQUIRE_FEATURE(dev(), barrier, "the tiled kernels use local memory and barriers");
  path_ = kiln::detail::radix_path::tiled;
  const std::uint64_t threads = kiln::detail::reduce_policy.tile_threads;
  const std::uint64_t tile = threads * kiln::detail::reduce_policy.tile_items;
  auto sizes_of = [&](std::uint64_t t) {
    return is_gpu() ? std::vector<std::uint64_t>{1, 2, t - 1, t, t + 1, 7 * t + 5, 40009}
                    : std::vector<std::uint64_t>{t, 2 * t, 7 * t};
  };
  for (std::uint64_t n : sizes_of(tile))
    for (std::uint64_t mean : {1, 4, 3000}) check<float>(runs_of<float>(n, mean, n + mean));
  check<std::uint32_t>(runs_of<std::uint32_t>(tile * 25, 2, 3), true);
  for (auto [chunk, fan] : {std::pair<std::uint64_t, std::uint32_t>{1, 2}, {3, 3}}) {
    chunk_ = chunk;
    fan_ = fan;
    for (std::uint64_t n : sizes_of(threads * chunk))
      for (std::uint64_t mean : {1, 2, 700}) check<float>(runs_of<float>(n, mean, n * mean));
  }
  fan_ = 0;
  chunk_ = 0;
  input<float> one = runs_of<float>(tile * 13, 1, 5);
  std::fill(one.keys.begin(), one.keys.end(), -0.0f);
  check<float>(one);
}

TEST_P(ReduceByKeyTest, EveryKeyWidthAndKind) {
  for (std::uint64_t n : {std::uint64_t(1000), std::uint64_t(100003)}) {
    check<bool>(runs_of<bool>(n, 5, 1));
    check<std::int8_t>(runs_of<std::int8_t>(n, 2, 2));
    check<std::uint8_t>(runs_of<std::uint8_t>(n, 1, 3));
    check<std::int16_t>(runs_of<std::int16_t>(n, 7, 4));
    check<std::int32_t>(runs_of<std::int32_t>(n, 3, 5));
    check<std::int64_t>(runs_of<std::int64_t>(n, 9, 6));
    check<std::uint64_t>(runs_of<std::uint64_t>(n, 1, 7));
    check<double>(runs_of<double>(n, 4, 8));
  }
}

TEST_P(ReduceByKeyTest, KeysOnly) {
  for (std::uint64_t n : sizes()) {
    check<std::uint32_t>(runs_of<std::uint32_t>(n, 3, n), true);
    check<double>(runs_of<double>(n, 1, n), true);
  }
}

TEST_P(ReduceByKeyTest, OneHugeRunAndAllDistinct) {
  const std::uint64_t n = size_for(300007, 20000003);
  input<std::int64_t> one = runs_of<std::int64_t>(n, 1, 9);
  std::fill(one.keys.begin(), one.keys.end(), -42);
  check<std::int64_t>(one);
  input<std::int64_t> distinct = runs_of<std::int64_t>(n, 1, 10);
  for (std::uint64_t i = 0; i < n; ++i) distinct.keys[i] = std::int64_t(i) - 5;
  check<std::int64_t>(distinct);
}

// NaN keys of every sign and payload in a row are one run; -0.0 and +0.0 are one run (its key
// is the first one's bits). NaN values propagate through min, max, sums and means.
TEST_P(ReduceByKeyTest, NanRunsAndSignedZeros) {
  for (std::uint64_t n : {std::uint64_t(50), std::uint64_t(200003)}) {
    input<float> in = runs_of<float>(n, 6, 11);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float payload = std::bit_cast<float>(std::bit_cast<std::uint32_t>(nan) | 5);
    const float pool[] = {
        nan, -nan, payload, 0.0f, -0.0f, 1.0f, std::numeric_limits<float>::infinity()};
    std::mt19937_64 rng(12);
    // Blocks of keys drawn from the specials: NaN blocks merge, zero blocks merge.
    for (std::uint64_t i = 0; i < n;) {
      const float k = pool[rng() % std::size(pool)];
      for (std::uint64_t len = 1 + rng() % 9; len && i < n; --len) in.keys[i++] = k;
    }
    for (std::uint64_t i = 0; i < n; ++i)
      if (rng() % 97 == 0) in.vf[i] = rng() % 2 ? nan : -0.0f;
    check<float>(in);
    chunk_ = 4;  // NaN and zero runs across chunk edges too
    fan_ = 3;
    check<float>(in);
    chunk_ = 0;
    fan_ = 0;
  }
}

TEST_P(ReduceByKeyTest, DeterministicBitForBit) {
  const input<std::uint32_t> in = runs_of<std::uint32_t>(size_for(300007, 3000017), 20000, 13);
  chunk_ = 1000;
  fan_ = 4;
  const std::vector<double> a = check<std::uint32_t>(in), b = check<std::uint32_t>(in);
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(double)), 0);
}

TEST_P(ReduceByKeyTest, BadInputIsRefusedClearly) {
  kiln::queue& q = dev().default_queue();
  kiln::buffer<std::uint32_t> keys(dev(), 10);
  kiln::buffer<float> vals(dev(), 10);
  reduce_by_key_args a;
  a.n = 10;
  a.keys = operand(keys);
  a.values = {{operand(vals), scalar_type::f32, run_op::sum, scalar_type::f64}};
  {
    reduce_by_key_args keys_only = a;  // a program other tests compile too
    keys_only.values.clear();
    EXPECT_NO_THROW(reduce_by_key(q, keys_only));
  }
  auto expect = [&](auto&& change, auto exception) {
    reduce_by_key_args b = a;
    change(b);
    EXPECT_THROW(reduce_by_key(q, b), decltype(exception));
  };
  expect([](auto& b) { b.key_type = scalar_type::f16; }, kiln::unsupported(""));
  expect([](auto& b) { b.key_type = scalar_type::bf16; }, kiln::unsupported(""));
  expect([](auto& b) { b.values[0].type = scalar_type::f16; }, kiln::unsupported(""));
  expect([](auto& b) { b.values[0].out_type = scalar_type::bf16; }, kiln::unsupported(""));
  expect([](auto& b) { b.values[0].op = run_op::count; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.values[0].out_type = scalar_type::boolean; }, kiln::invalid_argument(""));
  expect(
      [](auto& b) {
        b.values[0].op = run_op::mean;
        b.values[0].out_type = scalar_type::i32;
      },
      kiln::invalid_argument(""));
  expect([](auto& b) { b.values[0].op = run_op(17); }, kiln::invalid_argument(""));
  expect([](auto& b) { b.keys = {}; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.values[0].in = {}; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.n = 11; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.keys.offset = 1; }, kiln::invalid_argument(""));
  expect([](auto& b) { b.key_type = scalar_type::u64; }, kiln::invalid_argument(""));  // 5 fit
  if (auto o = other()) {
    kiln::buffer<float> elsewhere(*o, 10);
    expect([&](auto& b) { b.values[0].in = operand(elsewhere); }, kiln::device_mismatch(""));
  }
  if (dev().supports(kiln::feature::barrier)) {  // 11 accumulated columns: 52 KiB of locals
    reduce_by_key_args wide = a;
    wide.values.assign(11, a.values[0]);
    wide.path = kiln::detail::radix_path::tiled;
    EXPECT_THROW(reduce_by_key(q, wide), kiln::unsupported);
  }
  // n == 0: no runs, valid allocations, arrays optional.
  reduce_by_key_args z;
  z.values = {{{}, scalar_type::f32, run_op::max, scalar_type::f32},
              {{}, scalar_type::f32, run_op::count, scalar_type::u64}};
  const reduce_by_key_result r = reduce_by_key(q, z);
  EXPECT_EQ(r.runs, 0u);
  ASSERT_TRUE(r.keys);
  ASSERT_EQ(r.values.size(), 2u);
  EXPECT_TRUE(r.values[0] && r.values[1]);
}

// The CUDA dialect of the texts compiles (NVRTC, compile-only where there is no GPU): tiled
// ones, which GPUs run, and a chunked one (path = chunked).
TEST(ReduceByKeyCompile, CudaDialectOfTheTexts) {
  const std::vector<run_value> every = {
      {{}, scalar_type::i32, run_op::sum, scalar_type::i64},
      {{}, scalar_type::f32, run_op::min, scalar_type::f32},
      {{}, scalar_type::f64, run_op::max, scalar_type::f64},
      {{}, scalar_type::f32, run_op::count, scalar_type::u64},
      {{}, scalar_type::f32, run_op::mean, scalar_type::f32},
      {{}, scalar_type::boolean, run_op::first, scalar_type::boolean}};
  EXPECT_NO_THROW(
      conformance::compile_everywhere(kiln::detail::reduce_by_key_source(true, 4, every)));
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::reduce_by_key_source(true, 8, {})));
  // Ten accumulated columns: 48 KiB of shared memory, CUDA's static limit.
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::reduce_by_key_source(
      true, 8, std::vector<run_value>(10, {{}, scalar_type::f64, run_op::sum, scalar_type::f64}))));
  EXPECT_NO_THROW(
      conformance::compile_everywhere(kiln::detail::reduce_by_key_source(false, 1, every)));
}

KILN_INSTANTIATE_PER_DEVICE(ReduceByKeyTest);

}  // namespace
