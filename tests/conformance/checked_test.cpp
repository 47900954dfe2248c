// Checked mode (docs/kernel_language.md, "Checked mode") on every device: out-of-range reads
// and writes caught with the kernel, argument, index and line; in-range kernels give the same
// results checked and unchecked; checked and unchecked programs never share a cache entry;
// and, always on, moved-from buffers refused before the launch.
#include <chrono>
#include <random>

#include "conformance/backends.hpp"
#include "runtime/runtime.hpp"

namespace conformance {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* copy_source = R"(
KILN_KERNEL void twice(KILN_GLOBAL float* y, KILN_GLOBAL const float* x) {
  const uint64_t i = kiln_global_id(0);
  y[i] = 2.0f * x[i];
}
KILN_KERNEL void shifted(KILN_GLOBAL float* y, int64_t shift) {
  const int64_t i = (int64_t)kiln_global_id(0);
  y[i + shift] = 1.0f;
})";

// Every form the rewrite meets: nested indices, an index spanning lines, brackets in comments
// and literals, atomics on an element's address, a local array, a parameter the body moves
// (left unchecked), a helper, a 2-D range.
constexpr const char* mixed_source = R"(
KILN_FUNC float half_of(float v) { return v * 0.5f; }
KILN_KERNEL void mixed(KILN_GLOBAL float* out, KILN_GLOBAL const float* x,
                       KILN_GLOBAL const int32_t* perm, KILN_GLOBAL uint32_t* hist,
                       KILN_GLOBAL const float* moved, uint64_t w) {
  const uint64_t c = kiln_global_id(0), r = kiln_global_id(1);
  const uint64_t i = r * w + c;            /* x[not an access] */
  float tmp[2];
  tmp[0] = x[perm[i]];                     // out[i] in a comment
  tmp[1] = half_of(x[
      i]);
  const char bracket = ']';
  moved += 1;                              // moved[] is left unchecked
  out[i] = tmp[0] + tmp[1] + (bracket == ']' ? moved[i - (i > 0 ? 1 : 0)] : 0.0f);
  kiln_atomic_add(&hist[perm[i] % 4], 1u);
})";

std::string message_of_out_of_bounds(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::out_of_bounds& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected kiln::out_of_bounds, got: " << e.what();
    return "<wrong exception>";
  }
  ADD_FAILURE() << "expected kiln::out_of_bounds, nothing was thrown";
  return "<nothing thrown>";
}

// Compiles a checked program here and, without a GPU, for CUDA through NVRTC.
kiln::program compile_checked(const kiln::device& dev, std::string_view source) {
  if (cuda_compile_only())
    kiln::compile_only("cuda", cuda_check_arch, source, {}, kiln::check_mode::bounds);
  return kiln::program::compile(dev, source, {}, kiln::check_mode::bounds);
}

class CheckedTest : public DeviceTest {
 protected:
  kiln::queue& q() const { return dev().default_queue(); }
};
KILN_INSTANTIATE_PER_DEVICE(CheckedTest);

TEST_P(CheckedTest, OutOfRangeWriteIsCaughtAndRedirected) {
  const std::uint64_t n = size_for(1000, 1 << 20);
  const std::vector<float> xs = random_values<float>(n, 1);
  kiln::buffer<float> x(dev(), xs), y(dev(), n - 1);  // y is one element short
  y.fill(poison<float>());
  const kiln::program p = compile_checked(dev(), copy_source);
  EXPECT_TRUE(p.checked());
  EXPECT_THAT(
      message_of_out_of_bounds([&] { p.get_kernel("twice").launch(q(), kiln::range(n), y, x); }),
      AllOf(HasSubstr("kernel 'twice'"), HasSubstr("argument 1 ('y')"),
            HasSubstr("index " + std::to_string(n - 1) + " is outside"),
            HasSubstr(std::to_string(n - 1) + " elements"), HasSubstr("line 4")));
  // Every in-range element was written; the stray write went to the dummy slot.
  std::vector<float> want(n - 1);
  for (std::uint64_t i = 0; i + 1 < n; ++i) want[i] = 2.0f * xs[i];
  EXPECT_TRUE(elements_equal(y.to_vector(), want));
}

TEST_P(CheckedTest, OutOfRangeReadIsCaught) {
  const std::uint64_t n = size_for(1000, 1 << 20);
  kiln::buffer<float> x(dev(), random_values<float>(n - 1, 2)), y(dev(), n);
  EXPECT_THAT(
      message_of_out_of_bounds([&] {
        compile_checked(dev(), copy_source).get_kernel("twice").launch(q(), kiln::range(n), y, x);
      }),
      AllOf(HasSubstr("kernel 'twice'"), HasSubstr("argument 2 ('x')"),
            HasSubstr("index " + std::to_string(n - 1) + " is outside")));
}

TEST_P(CheckedTest, NegativeIndexAndSubviewBound) {
  const kiln::kernel k = compile_checked(dev(), copy_source).get_kernel("shifted");
  kiln::buffer<float> all(dev(), 300);
  all.fill(poison<float>());
  EXPECT_THAT(
      message_of_out_of_bounds([&] { k.launch(q(), kiln::range(10), all, std::int64_t(-1)); }),
      AllOf(HasSubstr("argument 1 ('y')"), HasSubstr("index -1 is outside"), HasSubstr("line 8")));
  // A view's own size is the bound: the elements after it stay untouched. (Items 1..9 of the
  // first launch wrote elements 0..8.)
  const kiln::buffer_view<float> view = all.subview(100, 100);
  EXPECT_THAT(
      message_of_out_of_bounds([&] { k.launch(q(), kiln::range(101), view, std::int64_t(0)); }),
      AllOf(HasSubstr("index 100 is outside the buffer's 100 elements")));
  const std::vector<float> got = all.to_vector();
  for (std::uint64_t i = 0; i < 300; ++i)
    EXPECT_EQ(!is_poison(got[i]), i < 9 || (i >= 100 && i < 200)) << "element " << i;
}

TEST_P(CheckedTest, ZeroElementBufferIsAllowedAndItsAccessCaught) {
  kiln::buffer<float> empty(dev(), 0);
  const kiln::kernel k = compile_checked(dev(), copy_source).get_kernel("shifted");
  EXPECT_THAT(
      message_of_out_of_bounds([&] { k.launch(q(), kiln::range(1), empty, std::int64_t(0)); }),
      HasSubstr("index 0 is outside the buffer's 0 elements"));
}

TEST_P(CheckedTest, InRangeResultsMatchUnchecked) {
  const std::uint64_t w = 37, h = size_for(20, 3000), n = w * h;
  const std::vector<float> xs = random_values<float>(n, 3);
  std::vector<std::int32_t> perm(n);
  for (std::uint64_t i = 0; i < n; ++i) perm[i] = std::int32_t((i * 7919) % n);
  kiln::buffer<float> x(dev(), xs), moved(dev(), random_values<float>(n + 1, 4));
  kiln::buffer<std::int32_t> pb(dev(), perm);
  std::vector<std::vector<float>> outs;
  std::vector<std::vector<std::uint32_t>> hists;
  for (kiln::check_mode mode : {kiln::check_mode::off, kiln::check_mode::bounds}) {
    const kiln::program p = mode == kiln::check_mode::bounds
                                ? compile_checked(dev(), mixed_source)
                                : kiln::program::compile(dev(), mixed_source, {}, mode);
    EXPECT_EQ(p.checked(), mode == kiln::check_mode::bounds);
    kiln::buffer<float> out(dev(), n);
    out.fill(poison<float>());
    kiln::buffer<std::uint32_t> hist(dev(), 4);
    hist.fill(0u);
    p.get_kernel("mixed").launch(q(), kiln::range(w, h), out, x, pb, hist, moved, w);
    outs.push_back(out.to_vector());
    hists.push_back(hist.to_vector());
  }
  EXPECT_TRUE(elements_equal(outs[1], outs[0]));
  EXPECT_TRUE(elements_equal(hists[1], hists[0]));
  EXPECT_FALSE(is_poison(outs[0][n - 1]));
}

// One checked kernel per element type: OpenCL C has an overload of the check for each.
template <class T>
void round_trip(const kiln::device& dev, const char* type) {
  SCOPED_TRACE(type);
  const std::string src = substitute(R"(
KILN_KERNEL void copy_T(KILN_GLOBAL T* y, KILN_GLOBAL const T* x) {
  y[kiln_global_id(0)] = x[kiln_global_id(0)];
})",
                                     "T", type);
  std::vector<T> host(65);
  for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<T>(i % 2 ? i : 0);
  kiln::buffer<T> x(dev, host), y(dev, host.size());
  const kiln::kernel k = compile_checked(dev, src).get_kernel(std::string("copy_") + type);
  k.launch(dev.default_queue(), kiln::range(host.size()), y, x);
  EXPECT_TRUE(elements_equal(y.to_vector(), host));
  EXPECT_THROW(k.launch(dev.default_queue(), kiln::range(host.size() + 1), y, x),
               kiln::out_of_bounds);
}

TEST_P(CheckedTest, EveryElementType) {
  round_trip<std::int8_t>(dev(), "int8_t");
  round_trip<std::uint8_t>(dev(), "uint8_t");
  round_trip<std::int16_t>(dev(), "int16_t");
  round_trip<std::uint16_t>(dev(), "uint16_t");
  round_trip<std::int32_t>(dev(), "int32_t");
  round_trip<std::uint32_t>(dev(), "uint32_t");
  round_trip<std::int64_t>(dev(), "int64_t");
  round_trip<std::uint64_t>(dev(), "uint64_t");
  round_trip<float>(dev(), "float");
  round_trip<bool>(dev(), "bool");
  if (dev().supports(kiln::feature::fp64)) round_trip<double>(dev(), "double");
}

TEST_P(CheckedTest, CacheNeverMixesModes) {
  // A source no earlier run has seen, so that each mode's first compile must miss both caches.
  const std::string nonce =
      std::to_string(std::random_device{}()) + "_" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
  const std::string src = "// " + nonce + "\n" + copy_source;
  const auto before = kiln::cache_stats();
  const kiln::program off = kiln::program::compile(dev(), src, {}, kiln::check_mode::off);
  const kiln::program on = kiln::program::compile(dev(), src, {}, kiln::check_mode::bounds);
  const auto after = kiln::cache_stats();
  EXPECT_EQ(after.compiles - before.compiles, 2u) << "checked mode reused an unchecked program";
  EXPECT_EQ(after.memory_hits, before.memory_hits);
  EXPECT_FALSE(off.checked());
  EXPECT_TRUE(on.checked());
  // Each mode then finds its own program in memory.
  EXPECT_TRUE(kiln::program::compile(dev(), src, {}, kiln::check_mode::bounds).checked());
  EXPECT_FALSE(kiln::program::compile(dev(), src, {}, kiln::check_mode::off).checked());
  EXPECT_EQ(kiln::cache_stats().memory_hits - after.memory_hits, 2u);
  kiln::buffer<float> x(dev(), 8), y(dev(), 7);
  EXPECT_THROW(on.get_kernel("twice").launch(q(), kiln::range(8), y, x), kiln::out_of_bounds);
}

// Always on, checked mode or not: no launch with a buffer that holds no memory.
TEST_P(CheckedTest, MovedFromBufferRefusedBeforeLaunch) {
  for (kiln::check_mode mode : {kiln::check_mode::off, kiln::check_mode::bounds}) {
    const kiln::kernel k = kiln::program::compile(dev(), copy_source, {}, mode).get_kernel("twice");
    kiln::buffer<float> y(dev(), 16), x(dev(), 16);
    kiln::buffer<float> taken = std::move(x);
    try {
      k.launch(q(), kiln::range(16), y, x);
      ADD_FAILURE() << "a moved-from buffer was launched";
    } catch (const kiln::invalid_argument& e) {
      EXPECT_THAT(e.what(),
                  AllOf(HasSubstr("kernel 'twice', argument 2 ('x')"), HasSubstr("moved from")));
    }
    kiln::buffer<float> never;
    try {
      k.launch(q(), kiln::range(16), never, taken);
      ADD_FAILURE() << "a default-constructed buffer was launched";
    } catch (const kiln::invalid_argument& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("argument 1 ('y')"), HasSubstr("holds no memory")));
    }
    // The refusal came before the launch: the device still works.
    k.launch(q(), kiln::range(16), y, taken);
    q().finish();
  }
}

TEST(conformance_Checked, CheckEnvironmentValues) {
  using kiln::check_mode;
  EXPECT_EQ(kiln::detail::parse_check_env(nullptr), check_mode::automatic);
  EXPECT_EQ(kiln::detail::parse_check_env(""), check_mode::automatic);
  EXPECT_EQ(kiln::detail::parse_check_env("bounds"), check_mode::bounds);
  EXPECT_EQ(kiln::detail::parse_check_env("off"), check_mode::off);
  for (const char* bad : {"bound", "BOUNDS", "on", "1"}) {
    try {
      kiln::detail::parse_check_env(bad);
      ADD_FAILURE() << "KILN_CHECK=" << bad << " was accepted";
    } catch (const kiln::invalid_argument& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("KILN_CHECK='" + std::string(bad) + "'"),
                                  HasSubstr("bounds"), HasSubstr("off")));
    }
  }
  EXPECT_TRUE(kiln::detail::resolve_checked(check_mode::bounds));
  EXPECT_FALSE(kiln::detail::resolve_checked(check_mode::off));
}

}  // namespace
}  // namespace conformance
