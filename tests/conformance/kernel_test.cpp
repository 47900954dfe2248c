// The portable kernel language on every device: launch ranges and index builtins, barriers and
// local memory, atomics, arguments, helpers, several kernels per program, math builtins.
#include <algorithm>
#include <numeric>

#include "conformance/backends.hpp"

namespace conformance {
namespace {

class KernelTest : public DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(KernelTest);

// --- index builtins ----------------------------------------------------------------------

// Each item writes 19 values at row `lin` (its linear index): lin, then global id, local id,
// group id, local size, number of groups and global size for dimensions 0..2.
constexpr const char* ids_source = R"(
KILN_KERNEL void ids(KILN_GLOBAL uint64_t* out) {
  const uint64_t lin = kiln_global_id(0) +
      kiln_global_size(0) * (kiln_global_id(1) + kiln_global_size(1) * kiln_global_id(2));
  KILN_GLOBAL uint64_t* o = out + lin * 19;
  o[0] = lin;
  for (int d = 0; d < 3; ++d) {
    o[1 + d] = kiln_global_id(d);
    o[4 + d] = kiln_local_id(d);
    o[7 + d] = kiln_group_id(d);
    o[10 + d] = kiln_local_size(d);
    o[13 + d] = kiln_num_groups(d);
    o[16 + d] = kiln_global_size(d);
  }
})";

// Launches `ids` over g (with local size l, or the default when null) and checks every row
// against the host's computation. Unused dimensions have size 1.
void check_ids(const kiln::device& dev, const kiln::range& g, const kiln::local_size* l) {
  std::ostringstream name;
  name << "range (" << g.size[0] << ", " << g.size[1] << ", " << g.size[2] << ")";
  if (l) name << ", local (" << l->size[0] << ", " << l->size[1] << ", " << l->size[2] << ")";
  SCOPED_TRACE(name.str());
  kiln::kernel k = compile(dev, ids_source).get_kernel("ids");
  const std::uint64_t total = g.size[0] * g.size[1] * g.size[2];
  kiln::buffer<std::uint64_t> out(dev, total * 19);
  out.fill(poison<std::uint64_t>());
  if (l) k.launch(dev.default_queue(), g, *l, out);
  else k.launch(dev.default_queue(), g, out);
  const std::vector<std::uint64_t> got = out.to_vector();

  // The default local size is the implementation's choice: take it from item 0, check it is
  // sane, then hold every item to it.
  std::uint64_t ls[3];
  for (int d = 0; d < 3; ++d) ls[d] = l ? l->size[d] : got[10 + d];
  if (!l) {
    ASSERT_FALSE(is_poison(ls[0])) << "item 0 never ran";
    for (int d = 0; d < 3; ++d) ASSERT_GE(ls[d], 1u);
    for (std::uint32_t d = g.dims; d < 3; ++d) EXPECT_EQ(ls[d], 1u);
    EXPECT_LE(ls[0] * ls[1] * ls[2], dev.info().max_work_group_size);
  }
  EXPECT_TRUE(all_indices(
      total,
      [&](std::uint64_t lin) {
        const std::uint64_t* o = &got[lin * 19];
        const std::uint64_t gid[3] = {lin % g.size[0], lin / g.size[0] % g.size[1],
                                      lin / g.size[0] / g.size[1]};
        if (o[0] != lin) return false;
        for (int d = 0; d < 3; ++d) {
          if (o[1 + d] != gid[d] || o[4 + d] != gid[d] % ls[d] || o[7 + d] != gid[d] / ls[d] ||
              o[10 + d] != ls[d] || o[13 + d] != (g.size[d] + ls[d] - 1) / ls[d] ||
              o[16 + d] != g.size[d])
            return false;
        }
        return true;
      },
      [&](std::uint64_t lin) {
        std::ostringstream s;
        for (int j = 0; j < 19; ++j) s << (j ? " " : "row: ") << std::int64_t(got[lin * 19 + j]);
        return s.str();
      }));
}

TEST_P(KernelTest, IdsMatchHost1D) {
  for (auto [n, l] : std::vector<std::pair<std::uint64_t, std::uint64_t>>{
           {1000, 64}, {1024, 256}, {7, 64}, {1, 1}, {size_for(4099, 1000003), 0}}) {
    const kiln::local_size local(l);
    check_ids(dev(), kiln::range(n), l ? &local : nullptr);
  }
}

TEST_P(KernelTest, IdsMatchHost2D) {
  const kiln::local_size a(8, 4), b(16, 16), c(1, 128);
  check_ids(dev(), kiln::range(37, 23), &a);  // local size divides neither dimension
  check_ids(dev(), kiln::range(64, 32), &b);
  check_ids(dev(), kiln::range(5, 300), &c);
  check_ids(dev(), kiln::range(37, 23), nullptr);
}

TEST_P(KernelTest, IdsMatchHost3D) {
  const kiln::local_size a(4, 2, 2), b(8, 4, 2), c(1, 1, 64);
  check_ids(dev(), kiln::range(13, 7, 5), &a);
  check_ids(dev(), kiln::range(16, 8, 4), &b);
  check_ids(dev(), kiln::range(3, 3, 70), &c);
  check_ids(dev(), kiln::range(13, 7, 5), nullptr);
}

// --- barriers and local memory -------------------------------------------------------------

constexpr const char* local_memory_source = R"(
KILN_KERNEL void reverse_groups(KILN_GLOBAL int32_t* out, KILN_GLOBAL const int32_t* in) {
  KILN_LOCAL int32_t tile[256];
  const uint64_t l = kiln_local_id(0);
  tile[l] = in[kiln_global_id(0)];
  kiln_barrier();
  out[kiln_global_id(0)] = tile[kiln_local_size(0) - 1 - l];
}
KILN_KERNEL void tile_sum(KILN_GLOBAL int64_t* sums, KILN_GLOBAL const int32_t* in) {
  KILN_LOCAL int64_t part[256];
  const uint64_t t = kiln_local_id(1) * kiln_local_size(0) + kiln_local_id(0);
  part[t] = in[kiln_global_id(1) * kiln_global_size(0) + kiln_global_id(0)];
  kiln_barrier();
  for (uint64_t s = 128; s > 0; s >>= 1) {
    if (t < s) part[t] += part[t + s];
    kiln_barrier();
  }
  if (t == 0) sums[kiln_group_id(1) * kiln_num_groups(0) + kiln_group_id(0)] = part[0];
})";

TEST_P(KernelTest, BarrierWorkGroupReversal) {
  compile_everywhere(local_memory_source);  // the CUDA dialect is checked even where we skip
  KILN_REQUIRE_FEATURE(dev(), barrier, "kiln_barrier() and KILN_LOCAL are GPU features");
  kiln::kernel k = compile(local_memory_source).get_kernel("reverse_groups");
  for (std::uint64_t l : {256u, 128u, 32u}) {
    SCOPED_TRACE("local size " + std::to_string(l));
    const std::uint64_t n = l * size_for(37, 4099);
    const auto in = random_values<std::int32_t>(n, 61);
    kiln::buffer<std::int32_t> inb(dev(), in), out(dev(), n);
    out.fill(poison<std::int32_t>());
    k.launch(dev().default_queue(), kiln::range(n), kiln::local_size(l), out, inb);
    std::vector<std::int32_t> want(n);
    for (std::uint64_t i = 0; i < n; ++i) want[i] = in[i / l * l + (l - 1 - i % l)];
    EXPECT_TRUE(elements_equal(out.to_vector(), want));
  }
}

TEST_P(KernelTest, BarrierTileSum2D) {
  compile_everywhere(local_memory_source);
  KILN_REQUIRE_FEATURE(dev(), barrier, "kiln_barrier() and KILN_LOCAL are GPU features");
  kiln::kernel k = compile(local_memory_source).get_kernel("tile_sum");
  const std::uint64_t gx = 37, gy = size_for(5, 301), w = gx * 16, h = gy * 16;
  const auto in = random_values<std::int32_t>(w * h, 62);
  kiln::buffer<std::int32_t> inb(dev(), in);
  kiln::buffer<std::int64_t> sums(dev(), gx * gy);
  sums.fill(poison<std::int64_t>());
  k.launch(dev().default_queue(), kiln::range(w, h), kiln::local_size(16, 16), sums, inb);
  std::vector<std::int64_t> want(gx * gy, 0);
  for (std::uint64_t y = 0; y < h; ++y)
    for (std::uint64_t x = 0; x < w; ++x) want[y / 16 * gx + x / 16] += in[y * w + x];
  EXPECT_TRUE(elements_equal(sums.to_vector(), want));
}

// --- atomics -----------------------------------------------------------------------------

constexpr const char* atomic_int_template = R"(
KILN_KERNEL void hist_$N(KILN_GLOBAL $T* count, KILN_GLOBAL $T* sum,
                         KILN_GLOBAL const uint32_t* keys, KILN_GLOBAL const $T* vals,
                         uint32_t bins) {
  const uint64_t i = kiln_global_id(0);
  const uint32_t b = keys[i] % bins;
  kiln_atomic_add(&count[b], ($T)1);
  kiln_atomic_add(&sum[b], vals[i]);
}
KILN_KERNEL void minmax_$N(KILN_GLOBAL $T* lo, KILN_GLOBAL $T* hi,
                           KILN_GLOBAL const uint32_t* keys, KILN_GLOBAL const $T* vals,
                           uint32_t bins) {
  const uint64_t i = kiln_global_id(0);
  const uint32_t b = keys[i] % bins;
  kiln_atomic_min(&lo[b], vals[i]);
  kiln_atomic_max(&hi[b], vals[i]);
}
)";

std::string atomic_int_source() {
  std::string src;
  for (auto [type, suffix] : {std::pair{"int32_t", "i32"}, std::pair{"uint32_t", "u32"},
                              std::pair{"int64_t", "i64"}, std::pair{"uint64_t", "u64"}})
    src += substitute(substitute(atomic_int_template, "$T", type), "$N", suffix);
  return src;
}

// Histogram counts and per-bin sums (wrapping for unsigned types) with kiln_atomic_add, and
// per-bin min/max, for one integer type: results are exact whatever the order.
template <class T>
void check_integer_atomics(const kiln::device& dev, const kiln::program& prog, const char* suffix,
                           std::uint64_t n) {
  SCOPED_TRACE(kiln::type_name(kiln::scalar_type_of<T>));
  const std::uint32_t bins = 61;
  const auto keys = random_values<std::uint32_t>(n, 71);
  // Signed sums stay clear of overflow (undefined); unsigned ones wrap.
  std::vector<T> vals;
  if constexpr (std::is_unsigned_v<T>) vals = random_values<T>(n, 72);
  else if constexpr (sizeof(T) == 4) vals = random_values<T>(n, 72, -1000, 1000);
  else vals = random_values<T>(n, 72, -(1ll << 40), 1ll << 40);
  const auto extremes = random_values<T>(n, 73);
  std::vector<T> count(bins, 0), sum(bins, 0), lo(bins, std::numeric_limits<T>::max()),
      hi(bins, std::numeric_limits<T>::lowest());
  for (std::uint64_t i = 0; i < n; ++i) {
    const std::uint32_t b = keys[i] % bins;
    count[b] = T(count[b] + 1);
    sum[b] = T(sum[b] + vals[i]);
    lo[b] = std::min(lo[b], extremes[i]);
    hi[b] = std::max(hi[b], extremes[i]);
  }
  kiln::buffer<std::uint32_t> kb(dev, keys);
  kiln::buffer<T> vb(dev, vals), xb(dev, extremes), cb(dev, bins), sb(dev, bins), lb(dev, bins),
      hb(dev, bins);
  cb.fill(T(0));
  sb.fill(T(0));
  lb.fill(std::numeric_limits<T>::max());
  hb.fill(std::numeric_limits<T>::lowest());
  kiln::queue& q = dev.default_queue();
  prog.get_kernel(std::string("hist_") + suffix).launch(q, kiln::range(n), cb, sb, kb, vb, bins);
  prog.get_kernel(std::string("minmax_") + suffix).launch(q, kiln::range(n), lb, hb, kb, xb, bins);
  EXPECT_TRUE(elements_equal(cb.to_vector(), count));
  EXPECT_TRUE(elements_equal(sb.to_vector(), sum));
  EXPECT_TRUE(elements_equal(lb.to_vector(), lo));
  EXPECT_TRUE(elements_equal(hb.to_vector(), hi));
}

TEST_P(KernelTest, AtomicHistogramAndMinMaxExact) {
  KILN_REQUIRE_FEATURE(dev(), atomics, "integer atomics");
  const kiln::program prog = compile(atomic_int_source());
  const std::uint64_t n = size_for(100003, 4000037);
  check_integer_atomics<std::int32_t>(dev(), prog, "i32", n);
  check_integer_atomics<std::uint32_t>(dev(), prog, "u32", n);
  check_integer_atomics<std::int64_t>(dev(), prog, "i64", n);
  check_integer_atomics<std::uint64_t>(dev(), prog, "u64", n);
}

constexpr const char* float_atomic_source = R"(
KILN_KERNEL void fsum(KILN_GLOBAL float* fs, KILN_GLOBAL double* ds, KILN_GLOBAL const float* fv,
                      KILN_GLOBAL const double* dv, uint32_t bins) {
  const uint64_t i = kiln_global_id(0);
  kiln_atomic_add(&fs[i % bins], fv[i]);
  kiln_atomic_add(&ds[i % bins], dv[i]);
})";

// Float values are multiples of 1/64 whose every partial sum is exact in float, so the result
// is exact in any order and a single lost update shows. Doubles are arbitrary: a tolerance.
TEST_P(KernelTest, FloatAtomicAddSums) {
  compile_everywhere(float_atomic_source);
  KILN_REQUIRE_FEATURE(dev(), float_atomics, "kiln_atomic_add on float and double");
  KILN_REQUIRE_FEATURE(dev(), fp64, "double arithmetic");
  kiln::kernel k = compile(float_atomic_source).get_kernel("fsum");
  const std::uint64_t n = 32768;  // 0.5 + n * 4 < 2^24 / 64: exact partial sums
  auto fv = random_values<std::int32_t>(n, 81, 1, 256);
  std::vector<float> fvals(n);
  for (std::uint64_t i = 0; i < n; ++i) fvals[i] = float(fv[i]) / 64.0f;
  const auto dvals = random_values<double>(n, 82, 0.5, 1.5);
  kiln::buffer<float> fvb(dev(), fvals);
  kiln::buffer<double> dvb(dev(), dvals);
  for (std::uint32_t bins : {1u, 7u}) {
    SCOPED_TRACE("bins " + std::to_string(bins));
    kiln::buffer<float> fs(dev(), bins);
    kiln::buffer<double> ds(dev(), bins);
    fs.fill(0.5f);
    ds.fill(0.5);
    k.launch(dev().default_queue(), kiln::range(n), fs, ds, fvb, dvb, bins);
    std::vector<float> fwant(bins, 0.5f);
    std::vector<double> dwant(bins, 0.5);
    for (std::uint64_t i = 0; i < n; ++i) {
      fwant[i % bins] += fvals[i];
      dwant[i % bins] += dvals[i];
    }
    EXPECT_TRUE(elements_equal(fs.to_vector(), fwant));
    EXPECT_TRUE(elements_near(ds.to_vector(), dwant, [&](std::uint64_t b) {
      return double(n) * std::numeric_limits<double>::epsilon() * dwant[b];
    }));
  }
}

constexpr const char* atomic_misc_source = R"(
KILN_KERNEL void tickets32(KILN_GLOBAL uint32_t* counter, KILN_GLOBAL uint32_t* tickets) {
  uint32_t expected = 0;  // a guess: the first failed cas returns the real value
  for (;;) {
    const uint32_t seen = kiln_atomic_cas(counter, expected, expected + 1u);
    if (seen == expected) break;
    expected = seen;
  }
  tickets[kiln_global_id(0)] = expected;
}
KILN_KERNEL void tickets64(KILN_GLOBAL int64_t* counter, KILN_GLOBAL int64_t* tickets) {
  int64_t expected = 0;
  for (;;) {
    const int64_t seen = kiln_atomic_cas(counter, expected, expected + 1);
    if (seen == expected) break;
    expected = seen;
  }
  tickets[kiln_global_id(0)] = expected;
}
KILN_KERNEL void bits(KILN_GLOBAL uint64_t* or_mask, KILN_GLOBAL uint64_t* and_mask,
                      KILN_GLOBAL uint32_t* xor_mask, KILN_GLOBAL int32_t* down,
                      KILN_GLOBAL int32_t* old_down, KILN_GLOBAL int64_t* slot,
                      KILN_GLOBAL int64_t* swapped) {
  const uint64_t i = kiln_global_id(0);
  kiln_atomic_or(&or_mask[i / 64], (uint64_t)1 << (i % 64));
  kiln_atomic_and(&and_mask[i / 64], ~((uint64_t)1 << (i % 64)));
  kiln_atomic_xor(&xor_mask[i % 7], (uint32_t)(i * 2654435761u));
  old_down[i] = kiln_atomic_sub(down, (int32_t)1);
  swapped[i] = kiln_atomic_xchg(slot, (int64_t)i);
})";

// A cas loop hands out tickets: every ticket exactly once, the counter ends at base + n.
TEST_P(KernelTest, AtomicCasCounterHandsOutEveryTicket) {
  KILN_REQUIRE_FEATURE(dev(), atomics, "integer atomics");
  const kiln::program prog = compile(atomic_misc_source);
  const std::uint64_t n = 4096;  // every item contends on one address: keep it modest
  kiln::buffer<std::uint32_t> c32(dev(), 1), t32(dev(), n);
  kiln::buffer<std::int64_t> c64(dev(), 1), t64(dev(), n);
  c32.fill(1000u);
  c64.fill(std::int64_t(1) << 40);
  t32.fill(poison<std::uint32_t>());
  t64.fill(poison<std::int64_t>());
  prog.get_kernel("tickets32").launch(dev().default_queue(), kiln::range(n), c32, t32);
  prog.get_kernel("tickets64").launch(dev().default_queue(), kiln::range(n), c64, t64);
  EXPECT_EQ(c32.to_vector()[0], 1000u + n);
  EXPECT_EQ(c64.to_vector()[0], (std::int64_t(1) << 40) + std::int64_t(n));
  auto got32 = t32.to_vector();
  auto got64 = t64.to_vector();
  std::sort(got32.begin(), got32.end());
  std::sort(got64.begin(), got64.end());
  std::vector<std::uint32_t> want32(n);
  std::vector<std::int64_t> want64(n);
  std::iota(want32.begin(), want32.end(), 1000u);
  std::iota(want64.begin(), want64.end(), std::int64_t(1) << 40);
  EXPECT_TRUE(elements_equal(got32, want32));
  EXPECT_TRUE(elements_equal(got64, want64));
}

TEST_P(KernelTest, AtomicBitwiseSubAndExchangeExact) {
  KILN_REQUIRE_FEATURE(dev(), atomics, "integer atomics");
  kiln::kernel k = compile(atomic_misc_source).get_kernel("bits");
  const std::uint64_t n = 64 * size_for(100, 10000) + 17, words = (n + 63) / 64;
  kiln::buffer<std::uint64_t> or_mask(dev(), words), and_mask(dev(), words);
  kiln::buffer<std::uint32_t> xor_mask(dev(), 7);
  kiln::buffer<std::int32_t> down(dev(), 1), old_down(dev(), n);
  kiln::buffer<std::int64_t> slot(dev(), 1), swapped(dev(), n);
  or_mask.fill(0);
  and_mask.fill(~std::uint64_t(0));
  xor_mask.fill(0x12345678u);
  down.fill(std::int32_t(n));
  old_down.fill(poison<std::int32_t>());
  slot.fill(-1);
  swapped.fill(poison<std::int64_t>());
  k.launch(dev().default_queue(), kiln::range(n), or_mask, and_mask, xor_mask, down, old_down, slot, swapped);

  std::vector<std::uint64_t> want_or(words, ~std::uint64_t(0)), want_and(words, 0);
  want_or.back() = (std::uint64_t(1) << 17) - 1;  // the last word holds items 64 * k .. + 16
  want_and.back() = ~want_or.back();
  std::vector<std::uint32_t> want_xor(7, 0x12345678u);
  for (std::uint64_t i = 0; i < n; ++i) want_xor[i % 7] ^= std::uint32_t(i * 2654435761u);
  EXPECT_TRUE(elements_equal(or_mask.to_vector(), want_or));
  EXPECT_TRUE(elements_equal(and_mask.to_vector(), want_and));
  EXPECT_TRUE(elements_equal(xor_mask.to_vector(), want_xor));

  // sub returned every value n..1 once; xchg passed every id (and the initial -1) along once.
  EXPECT_EQ(down.to_vector()[0], 0);
  auto olds = old_down.to_vector();
  std::sort(olds.begin(), olds.end());
  std::vector<std::int32_t> want_olds(n);
  std::iota(want_olds.begin(), want_olds.end(), 1);
  EXPECT_TRUE(elements_equal(olds, want_olds));
  auto chain = swapped.to_vector();
  chain.push_back(slot.to_vector()[0]);
  std::sort(chain.begin(), chain.end());
  std::vector<std::int64_t> want_chain(n + 1);
  std::iota(want_chain.begin(), want_chain.end(), -1);
  EXPECT_TRUE(elements_equal(chain, want_chain));
}

// --- large launches, arguments, programs ------------------------------------------------------

TEST_P(KernelTest, LaunchOf2To28ItemsOnGpu) {
  KILN_REQUIRE_GPU(dev());
  const char* src = R"(
KILN_KERNEL void big(KILN_GLOBAL uint32_t* out) {
  const uint64_t i = kiln_global_id(0);
  out[i] = (uint32_t)((i * 2654435761ull) >> 3);
})";
  kiln::kernel k = compile(src).get_kernel("big");
  const std::uint64_t n = (std::uint64_t(1) << 28) + 5;
  kiln::buffer<std::uint32_t> out(dev(), n);
  out.fill(poison<std::uint32_t>());
  k.launch(dev().default_queue(), kiln::range(n), out);
  const auto got = out.to_vector();
  EXPECT_TRUE(all_indices(
      n, [&](std::uint64_t i) { return got[i] == std::uint32_t((i * 2654435761ull) >> 3); },
      [&](std::uint64_t i) { return std::to_string(got[i]); }));
}

// Scalars of every size in an order that misaligns naive packing; each item writes a row.
TEST_P(KernelTest, ScalarArgumentsOfSeveralTypes) {
  const char* src = R"(
KILN_KERNEL void scalars(KILN_GLOBAL int64_t* ints, KILN_GLOBAL uint64_t* uints,
                         KILN_GLOBAL double* reals, int8_t a, double b, uint16_t c, int64_t d,
                         bool e, float f, uint8_t g, uint64_t h, int16_t k, int32_t m,
                         uint32_t n) {
  const uint64_t i = kiln_global_id(0);
  ints[i * 4 + 0] = a; ints[i * 4 + 1] = d; ints[i * 4 + 2] = k; ints[i * 4 + 3] = m;
  uints[i * 4 + 0] = c; uints[i * 4 + 1] = g; uints[i * 4 + 2] = h; uints[i * 4 + 3] = n;
  reals[i * 3 + 0] = b; reals[i * 3 + 1] = f; reals[i * 3 + 2] = e ? 1.0 : -1.0;
})";
  KILN_REQUIRE_FEATURE(dev(), fp64, "the kernel stores doubles");
  kiln::kernel k = compile(src).get_kernel("scalars");
  const std::uint64_t items = 5;
  kiln::buffer<std::int64_t> ints(dev(), items * 4);
  kiln::buffer<std::uint64_t> uints(dev(), items * 4);
  kiln::buffer<double> reals(dev(), items * 3);
  auto run = [&](std::int8_t a, double b, std::uint16_t c, std::int64_t d, bool e, float f,
                 std::uint8_t g, std::uint64_t h, std::int16_t kk, std::int32_t m, std::uint32_t n) {
    ints.fill(poison<std::int64_t>());
    uints.fill(poison<std::uint64_t>());
    reals.fill(poison<double>());
    k.launch(dev().default_queue(), kiln::range(items), ints, uints, reals, a, b, c, d, e, f, g, h, kk, m, n);
    std::vector<std::int64_t> wi;
    std::vector<std::uint64_t> wu;
    std::vector<double> wr;
    for (std::uint64_t i = 0; i < items; ++i) {
      wi.insert(wi.end(), {a, d, kk, m});
      wu.insert(wu.end(), {c, g, h, n});
      wr.insert(wr.end(), {b, double(f), e ? 1.0 : -1.0});
    }
    EXPECT_TRUE(elements_equal(ints.to_vector(), wi));
    EXPECT_TRUE(elements_equal(uints.to_vector(), wu));
    EXPECT_TRUE(elements_equal(reals.to_vector(), wr));
  };
  run(-128, -1.25e300, 65535, INT64_MIN + 7, true, 1.17549435e-38f, 255, UINT64_MAX - 2,
      -32767, INT32_MIN, UINT32_MAX);
  run(127, 3.5, 1, INT64_MAX, false, -3.0e38f, 1, 1, 32767, 123456789, 0x80000001u);
}

TEST_P(KernelTest, SeveralKernelsInOneProgram) {
  const char* src = R"(
KILN_KERNEL void iota(KILN_GLOBAL float* a) {
  const uint64_t i = kiln_global_id(0);
  a[i] = (float)i + 0.5f;
}
KILN_KERNEL void scale(KILN_GLOBAL float* a, float s) {
  const uint64_t i = kiln_global_id(0);
  a[i] = a[i] * s;
}
KILN_KERNEL void add(KILN_GLOBAL float* c, KILN_GLOBAL const float* a, KILN_GLOBAL const float* b) {
  const uint64_t i = kiln_global_id(0);
  c[i] = a[i] + b[i];
}
KILN_KERNEL void nothing() {}
)";
  const kiln::program prog = compile(src);
  EXPECT_EQ(prog.kernel_names(), (std::vector<std::string>{"iota", "scale", "add", "nothing"}));
  EXPECT_TRUE(prog.get_device() == dev());
  const kiln::kernel add = prog.get_kernel("add");
  EXPECT_EQ(add.name(), "add");
  ASSERT_EQ(add.params().size(), 3u);
  EXPECT_EQ(add.params()[0].name, "c");
  EXPECT_EQ(add.params()[0].type, kiln::scalar_type::f32);
  EXPECT_TRUE(add.params()[0].is_pointer);
  EXPECT_FALSE(add.params()[0].is_const);
  EXPECT_TRUE(add.params()[1].is_const);
  EXPECT_FALSE(prog.get_kernel("scale").params()[1].is_pointer);
  EXPECT_TRUE(prog.get_kernel("nothing").params().empty());

  const std::uint64_t n = size_for(1000, 1 << 20);
  kiln::buffer<float> a(dev(), n), b(dev(), n), c(dev(), n);
  for (auto* buf : {&a, &b, &c}) buf->fill(poison<float>());
  kiln::queue& q = dev().default_queue();
  prog.get_kernel("iota").launch(q, kiln::range(n), a);
  prog.get_kernel("scale").launch(q, kiln::range(n), a, 3.0f);
  prog.get_kernel("iota").launch(q, kiln::range(n), b);  // a second lookup of the same kernel
  add.launch(q, kiln::range(n), c, a, b);
  prog.get_kernel("nothing").launch(q, kiln::range(10));
  std::vector<float> want(n);
  for (std::uint64_t i = 0; i < n; ++i) want[i] = 4.0f * (float(i) + 0.5f);
  EXPECT_TRUE(elements_equal(c.to_vector(), want));
}

TEST_P(KernelTest, SubviewArgumentsStartAtTheirOffsets) {
  const char* src = R"(
KILN_KERNEL void plus_one(KILN_GLOBAL int32_t* y, KILN_GLOBAL const int32_t* x) {
  const uint64_t i = kiln_global_id(0);
  y[i] = x[i] + 1;
})";
  kiln::kernel k = compile(src).get_kernel("plus_one");
  const auto x = random_values<std::int32_t>(1000, 91, -1000000, 1000000);
  kiln::buffer<std::int32_t> xb(dev(), x), yb(dev(), 1000);
  yb.fill(poison<std::int32_t>());
  const kiln::buffer_view<const std::int32_t> xv = xb.subview(200, 500);
  k.launch(dev().default_queue(), kiln::range(500), yb.subview(3, 500), xv);
  std::vector<std::int32_t> want(1000, poison<std::int32_t>());
  for (int i = 0; i < 500; ++i) want[3 + i] = x[200 + i] + 1;
  EXPECT_TRUE(elements_equal(yb.to_vector(), want));
}

TEST_P(KernelTest, KilnFuncHelpers) {
  const char* src = R"(
KILN_FUNC uint32_t mix(uint32_t v) {
  v ^= v >> 16; v *= 0x7feb352du; v ^= v >> 15; v *= 0x846ca68bu; v ^= v >> 16;
  return v;
}
KILN_FUNC uint32_t mix_twice(uint32_t v, uint64_t i) { return mix(mix(v) + (uint32_t)i); }
KILN_FUNC float square(float v) { return v * v; }
KILN_KERNEL void helpers(KILN_GLOBAL uint32_t* h, KILN_GLOBAL float* s, KILN_GLOBAL const float* x) {
  const uint64_t i = kiln_global_id(0);
  h[i] = mix_twice((uint32_t)i ^ 0xabcdu, i);
  s[i] = square(x[i]);
})";
  auto mix = [](std::uint32_t v) {
    v ^= v >> 16; v *= 0x7feb352du; v ^= v >> 15; v *= 0x846ca68bu; v ^= v >> 16;
    return v;
  };
  kiln::kernel k = compile(src).get_kernel("helpers");
  const std::uint64_t n = size_for(5003, 1000003);
  const auto x = random_values<float>(n, 92);
  kiln::buffer<float> xb(dev(), x), s(dev(), n);
  kiln::buffer<std::uint32_t> h(dev(), n);
  s.fill(poison<float>());
  h.fill(poison<std::uint32_t>());
  k.launch(dev().default_queue(), kiln::range(n), h, s, xb);
  std::vector<std::uint32_t> want_h(n);
  std::vector<float> want_s(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    want_h[i] = mix(mix(std::uint32_t(i) ^ 0xabcdu) + std::uint32_t(i));
    want_s[i] = x[i] * x[i];
  }
  EXPECT_TRUE(elements_equal(h.to_vector(), want_h));
  EXPECT_TRUE(elements_equal(s.to_vector(), want_s));
}

// --- math builtins ------------------------------------------------------------------------

constexpr int math_count = 21;
constexpr const char* math_template = R"(
KILN_KERNEL void math(KILN_GLOBAL $T* out, KILN_GLOBAL const $T* xs, KILN_GLOBAL const $T* ys) {
  const uint64_t i = kiln_global_id(0);
  const $T a = xs[i], b = ys[i], p = a * b, h = b * ($T)0.5;
  KILN_GLOBAL $T* o = out + i * 21;
  o[0] = sqrt(a);     o[1] = rsqrt(a);    o[2] = exp(b);      o[3] = log(a);
  o[4] = pow(a, b);   o[5] = sin(p);      o[6] = cos(p);      o[7] = tanh(b);
  o[8] = floor(p);    o[9] = ceil(p);     o[10] = fabs(b);    o[11] = fma(a, b, a);
  o[12] = fmin(a, b); o[13] = fmax(a, b); o[14] = min(a, b);  o[15] = max(a, b);
  o[16] = exp2(b);    o[17] = log2(a);    o[18] = tan(h);     o[19] = trunc(p);
  o[20] = round(p);
})";

// Each builtin against std:: in double. Tolerances in units of the type's epsilon relative to
// the result: CUDA documents at most 2 ulp for these (4 for powf and tanf); 0 where the result
// is exact. tan's argument stays within (-pi/2, pi/2).
template <class T>
void check_math(const kiln::device& dev, std::uint64_t n) {
  SCOPED_TRACE(kiln::type_name(kiln::scalar_type_of<T>));
  const std::string src = substitute(math_template, "$T", kiln::type_name(kiln::scalar_type_of<T>));
  kiln::kernel k = compile(dev, src).get_kernel("math");
  const auto xs = random_values<T>(n, 101, T(0.1), T(10));
  const auto ys = random_values<T>(n, 102, T(-3), T(3));
  kiln::buffer<T> xb(dev, xs), yb(dev, ys), out(dev, n * math_count);
  out.fill(poison<T>());
  k.launch(dev.default_queue(), kiln::range(n), out, xb, yb);
  const std::vector<T> got = out.to_vector();
  const char* names[math_count] = {"sqrt",  "rsqrt", "exp",  "log",  "pow",  "sin",  "cos",
                                   "tanh",  "floor", "ceil", "fabs", "fma",  "fmin", "fmax",
                                   "min",   "max",   "exp2", "log2", "tan",  "trunc", "round"};
  const double ulps[math_count] = {1, 4, 4, 4, 8, 4, 4, 4, 0, 0, 0, 1, 0, 0, 0, 0, 4, 4, 8, 0, 0};
  for (int f = 0; f < math_count; ++f) {
    std::vector<T> col(n);
    std::vector<double> want(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      // p and h rounded to T like the kernel's.
      const double a = xs[i], b = ys[i], p = T(xs[i] * ys[i]), h = T(ys[i] * T(0.5));
      const double r[math_count] = {
          std::sqrt(a),    1 / std::sqrt(a), std::exp(b), std::log(a),
          std::pow(a, b),  std::sin(p),     std::cos(p),     std::tanh(b),   std::floor(p),
          std::ceil(p),    std::fabs(b),    std::fma(a, b, a), std::fmin(a, b), std::fmax(a, b),
          std::min(a, b),  std::max(a, b),  std::exp2(b),    std::log2(a),   std::tan(h),
          std::trunc(p),   std::round(p)};
      col[i] = got[i * math_count + std::uint64_t(f)];
      want[i] = ulps[f] == 0 ? double(T(r[f])) : r[f];
    }
    const double eps = std::numeric_limits<T>::epsilon();
    EXPECT_TRUE(elements_near(col, want, [&](std::uint64_t i) {
      return ulps[f] * eps * std::max(std::fabs(want[i]), 1e-3);
    })) << names[f];
  }
}

TEST_P(KernelTest, MathBuiltinsMatchStdInDouble) {
  compile_everywhere(substitute(math_template, "$T", "double"));
  KILN_REQUIRE_FEATURE(dev(), fp64, "double arithmetic");
  check_math<double>(dev(), size_for(4001, 1000003));
}

TEST_P(KernelTest, MathBuiltinsMatchStdInFloat) {
  check_math<float>(dev(), size_for(4001, 1000003));
}

TEST_P(KernelTest, IntegerMinMaxBuiltins) {
  const char* src = R"(
KILN_KERNEL void int_minmax(KILN_GLOBAL int64_t* o64, KILN_GLOBAL uint32_t* o32,
                            KILN_GLOBAL const int64_t* a, KILN_GLOBAL const int64_t* b) {
  const uint64_t i = kiln_global_id(0);
  o64[2 * i] = min(a[i], b[i]);
  o64[2 * i + 1] = max(a[i], b[i]);
  o32[2 * i] = min((uint32_t)a[i], (uint32_t)b[i]);
  o32[2 * i + 1] = max((uint32_t)a[i], (uint32_t)b[i]);
})";
  kiln::kernel k = compile(src).get_kernel("int_minmax");
  const std::uint64_t n = 3001;
  const auto a = random_values<std::int64_t>(n, 111), b = random_values<std::int64_t>(n, 112);
  kiln::buffer<std::int64_t> ab(dev(), a), bb(dev(), b), o64(dev(), 2 * n);
  kiln::buffer<std::uint32_t> o32(dev(), 2 * n);
  o64.fill(poison<std::int64_t>());
  o32.fill(poison<std::uint32_t>());
  k.launch(dev().default_queue(), kiln::range(n), o64, o32, ab, bb);
  std::vector<std::int64_t> w64;
  std::vector<std::uint32_t> w32;
  for (std::uint64_t i = 0; i < n; ++i) {
    w64.insert(w64.end(), {std::min(a[i], b[i]), std::max(a[i], b[i])});
    w32.insert(w32.end(), {std::min(std::uint32_t(a[i]), std::uint32_t(b[i])),
                           std::max(std::uint32_t(a[i]), std::uint32_t(b[i]))});
  }
  EXPECT_TRUE(elements_equal(o64.to_vector(), w64));
  EXPECT_TRUE(elements_equal(o32.to_vector(), w32));
}

TEST_P(KernelTest, AbsBuiltinOnSignedAndFloatingTypes) {
  const char* src = R"(
KILN_KERNEL void absolute(KILN_GLOBAL int32_t* i32, KILN_GLOBAL int64_t* i64,
                          KILN_GLOBAL float* f32, KILN_GLOBAL double* f64) {
  const uint64_t i = kiln_global_id(0);
  i32[i] = abs(i32[i]);
  i64[i] = abs(i64[i]);
  f32[i] = abs(f32[i]);
  f64[i] = abs(f64[i]);
})";
  kiln::kernel k = compile(src).get_kernel("absolute");
  const std::uint64_t n = 1003;
  auto a = random_values<std::int32_t>(n, 121, -2000000000, 2000000000);
  auto b = random_values<std::int64_t>(n, 122, -(1ll << 62), 1ll << 62);
  auto c = random_values<float>(n, 123);
  auto d = random_values<double>(n, 124);
  kiln::buffer<std::int32_t> ab(dev(), a);
  kiln::buffer<std::int64_t> bb(dev(), b);
  kiln::buffer<float> cb(dev(), c);
  kiln::buffer<double> db(dev(), d);
  k.launch(dev().default_queue(), kiln::range(n), ab, bb, cb, db);
  for (auto& v : a) v = std::abs(v);
  for (auto& v : b) v = std::abs(v);
  for (auto& v : c) v = std::fabs(v);
  for (auto& v : d) v = std::fabs(v);
  EXPECT_TRUE(elements_equal(ab.to_vector(), a));
  EXPECT_TRUE(elements_equal(bb.to_vector(), b));
  EXPECT_TRUE(elements_equal(cb.to_vector(), c));
  EXPECT_TRUE(elements_equal(db.to_vector(), d));
}

// Portability: CUDA's atomic overloads accept a plain int literal for an unsigned or 64-bit
// counter (the usual conversions apply); the same kernel must compile on every backend.
TEST_P(KernelTest, AtomicAddWithIntLiteralCompilesOnEveryBackend) {
  const char* src = R"(
KILN_KERNEL void count(KILN_GLOBAL uint32_t* c32, KILN_GLOBAL uint64_t* c64) {
  kiln_atomic_add(&c32[0], 1);
  kiln_atomic_add(&c64[0], 1);
})";
  KILN_REQUIRE_FEATURE(dev(), atomics, "integer atomics");
  kiln::kernel k = compile(src).get_kernel("count");
  kiln::buffer<std::uint32_t> c32(dev(), 1);
  kiln::buffer<std::uint64_t> c64(dev(), 1);
  c32.fill(5u);
  c64.fill(7u);
  k.launch(dev().default_queue(), kiln::range(100), c32, c64);
  EXPECT_EQ(c32.to_vector()[0], 105u);
  EXPECT_EQ(c64.to_vector()[0], 107u);
}

}  // namespace
}  // namespace conformance
