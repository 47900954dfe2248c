// What the query runtime promises beyond values: kernel launches per fused chain, byte
// counters, constants that never recompile, KILN_DUMP_KERNELS, host inputs (on(dev),
// on(automatic)), and errors for bad inputs.
#include <dirent.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <thread>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;
using ::testing::HasSubstr;

class FusionTest : public QueryTest {
 protected:
  std::uint64_t big() const { return size_for(100003, (1u << 22) + 1); }
};
KILN_INSTANTIATE_QUERY_PER_DEVICE(FusionTest);

template <class T>
std::vector<T> kept_if(const std::vector<T>& x, std::function<bool(T)> keep) {
  std::vector<T> out;
  std::copy_if(x.begin(), x.end(), std::back_inserter(out), keep);
  return out;
}

// Every chain with the number of launches the spec promises for it (gpu, cpu), or {0, 0} for
// "at least 2" (positions needed after a filter: the filtered prefix is materialised first).
// Each case also checks its value.
TEST_P(FusionTest, LaunchCounts) {
  const std::uint64_t n = big();
  const auto x = data<float>(n, 1);
  const auto y = data<std::int32_t>(n, 2);
  const kiln::buffer<float> xs = upload(dev(), x);
  const kiln::buffer<std::int32_t> ys = upload(dev(), y);
  const float t = 10.f;
  const auto pos = kept_if<float>(x, [&](float v) { return v > t; });
  std::vector<float> doubled(n), after_skip;
  for (std::uint64_t i = 0; i < n; ++i) doubled[i] = x[i] * 2.f + 1.f;
  for (std::uint64_t i = 3; i < n; ++i) after_skip.push_back(float(y[i]) + float(i - 3));
  std::optional<float> max_where_y_positive;
  for (std::uint64_t i = 0; i < n; ++i)
    if (y[i] > 0) max_where_y_positive = std::max(max_where_y_positive.value_or(x[i]), x[i]);
  const auto lo = std::min_element(x.begin(), x.end()) - x.begin();
  const auto first_pos_min = std::min_element(pos.begin(), pos.end()) - pos.begin();

  struct chain {
    const char* name;
    launches want;
    std::function<void()> run;
  };
  const std::vector<chain> chains = {
      {"transform | transform | to_vector",
       {1, 1},
       [&] {
         EXPECT_TRUE(elements_equal(
             xs | kiln::transform(_1 * 2.f) | kiln::transform(_1 + 1.f) | kiln::to_vector(),
             doubled));
       }},
      {"zip | transform | to_vector",
       {1, 1},
       [&] {
         const auto v =
             kiln::zip(xs, ys) | kiln::transform(_1 + kiln::cast<float>(_2)) | kiln::to_vector();
         EXPECT_EQ(v.size(), n);
       }},
      {"skip | take | enumerate | transform(_2 + _1 + _i) | to_vector",
       {1, 1},
       [&] {
         const auto v = ys | kiln::skip(3) | kiln::take(n) | kiln::enumerate() |
                        kiln::transform(kiln::cast<float>(_2) + kiln::cast<float>(_1) + 0.f * _i) |
                        kiln::to_vector();
         EXPECT_TRUE(elements_equal(v, after_skip));
       }},
      {"transform | filter | transform | to_vector",
       {1, 2},
       [&] {
         const auto v = xs | kiln::transform(_1 * 1.f) | kiln::filter(_1 > t) |
                        kiln::transform(_1 + 0.f) | kiln::to_vector();
         EXPECT_TRUE(elements_equal(v, pos));
       }},
      {"filter | to_buffer",
       {1, 2},
       [&] { EXPECT_EQ((xs | kiln::filter(_1 > t) | kiln::to_buffer()).size(), pos.size()); }},
      {"transform | sum", {1, 2}, [&] { (void)(xs | kiln::transform(_1 * 2.f) | kiln::sum()); }},
      {"filter | count",
       {1, 2},
       [&] { EXPECT_EQ(xs | kiln::filter(_1 > t) | kiln::count(), pos.size()); }},
      {"zip | filter | max",
       {1, 2},
       [&] {
         EXPECT_EQ(kiln::zip(xs, ys) | kiln::filter(_2 > 0) | kiln::transform(_1) | kiln::max(),
                   max_where_y_positive);
       }},
      {"argmin", {1, 2}, [&] { EXPECT_EQ(xs | kiln::argmin(), std::optional<std::uint64_t>(lo)); }},
      {"average", {1, 2}, [&] { EXPECT_TRUE((xs | kiln::average()).has_value()); }},
      {"reduce(init, max)",
       {1, 2},
       [&] {
         EXPECT_EQ(xs | kiln::reduce(-1e30f, kiln::max(_1, _2)),
                   *std::max_element(x.begin(), x.end()));
       }},
      {"transform | inclusive_scan | to_vector",
       {1, 2},
       [&] {
         EXPECT_EQ(
             (xs | kiln::transform(_1 * 1.f) | kiln::inclusive_scan() | kiln::to_vector()).size(),
             n);
       }},
      {"exclusive_scan(init, op) | transform | to_vector",
       {1, 2},
       [&] {
         const auto v = ys | kiln::exclusive_scan(std::int32_t{0}, kiln::max(_1, _2)) |
                        kiln::transform(_1 + 1) | kiln::to_vector();
         EXPECT_EQ(v.size(), n);
       }},
      {"filter | take | to_vector",
       {0, 0},
       [&] {
         EXPECT_TRUE(elements_equal(
             xs | kiln::filter(_1 > t) | kiln::take(5) | kiln::to_vector(),
             std::vector<float>(pos.begin(), pos.begin() + std::min<std::size_t>(5, pos.size()))));
       }},
      {"filter | enumerate | transform | to_vector",
       {0, 0},
       [&] {
         const auto v = xs | kiln::filter(_1 > t) | kiln::enumerate() | kiln::transform(_1) |
                        kiln::to_vector();
         ASSERT_EQ(v.size(), pos.size());
         EXPECT_EQ(v.back(), std::int64_t(pos.size()) - 1);
       }},
      {"filter | argmin",
       {0, 0},
       [&] {
         EXPECT_EQ(xs | kiln::filter(_1 > t) | kiln::argmin(),
                   std::optional<std::uint64_t>(first_pos_min));
       }},
      {"filter | inclusive_scan | to_vector",
       {0, 0},
       [&] {
         EXPECT_EQ((xs | kiln::filter(_1 > t) | kiln::inclusive_scan() | kiln::to_vector()).size(),
                   pos.size());
       }},
  };
  for (const chain& c : chains) {
    SCOPED_TRACE(c.name);
    c.run();
    const kiln::query_stats st = stats();
    EXPECT_EQ(st.device, dev().id());
    if (c.want.gpu == 0) {
      EXPECT_GE(st.kernel_launches, 2u) << "positions after a filter materialise the prefix first";
    } else {
      EXPECT_EQ(st.kernel_launches, is_gpu() ? c.want.gpu : c.want.cpu)
          << (is_gpu() ? "GPU: one fused kernel per chain"
                       : "CPU: map chains 1 launch; filter-collect, reductions, scans 2");
    }
  }
}

// _i (or enumerate) before take, with no filter anywhere: still a map chain, so one launch on
// every device. Before skip, the positions earlier stages saw differ from the later ones: the
// planner materialises there (one more kernel) rather than bake the count into the kernel.
TEST_P(FusionTest, IndexBeforeSliceStaysOneKernel) {
  const std::uint64_t n = big();
  const auto y = data<std::int32_t>(n, 2);
  const kiln::buffer<std::int32_t> ys = upload(dev(), y);
  std::vector<float> want;
  for (std::uint64_t i = 3; i < n; ++i) want.push_back(float(y[i]) + float(i));
  const auto v = ys | kiln::transform(kiln::cast<float>(_1) + kiln::cast<float>(_i)) |
                 kiln::skip(3) | kiln::to_vector();
  EXPECT_TRUE(elements_equal(v, want));
  EXPECT_EQ(stats().kernel_launches, 2u) << "transform(_i) | skip materialises before the skip";
  const auto e =
      ys | kiln::enumerate() | kiln::take(n / 2) | kiln::transform(_1) | kiln::to_vector();
  EXPECT_EQ(e.size(), n / 2);
  EXPECT_EQ(stats().kernel_launches, 1u) << "enumerate | take | transform is a map chain";
}

// Counters of one query: inputs read once, results written once, no transfers beyond the
// result for device inputs, reset between queries.
TEST_P(FusionTest, ByteCounters) {
  const std::uint64_t n = big();
  const auto x = data<float>(n, 3);
  const auto w = data<double>(n, 4);
  const kiln::buffer<float> xs = upload(dev(), x);
  const kiln::buffer<double> ws = upload(dev(), w);
  const std::uint64_t slack = 4096;
  auto in_range = [](std::uint64_t v, std::uint64_t lo, std::uint64_t hi) {
    return ::testing::AssertionResult(v >= lo && v <= hi)
           << v << " not in [" << lo << ", " << hi << "]";
  };

  (void)(kiln::zip(xs, ws) | kiln::transform(_1 * _2) | kiln::to_vector());
  kiln::query_stats st = stats();
  EXPECT_TRUE(in_range(st.bytes_read, n * 12, 2 * n * 12 + slack)) << "map: bytes_read";
  EXPECT_TRUE(in_range(st.bytes_written, n * 8, 2 * n * 8 + slack)) << "map: bytes_written";
  EXPECT_LE(st.host_to_device_bytes, slack) << "device inputs: nothing to upload";
  EXPECT_EQ(st.device, dev().id());

  const std::uint64_t kept = std::count_if(x.begin(), x.end(), [](float v) { return v > 50.f; });
  (void)(xs | kiln::filter(_1 > 50.f) | kiln::to_vector());
  st = stats();
  EXPECT_TRUE(in_range(st.bytes_read, n * 4, 2 * n * 4 + slack)) << "filter: bytes_read";
  EXPECT_TRUE(in_range(st.bytes_written, kept * 4, 2 * kept * 4 + slack))
      << "filter: bytes_written counts the " << kept << " survivors";

  (void)(xs | kiln::sum());
  st = stats();
  EXPECT_TRUE(in_range(st.bytes_read, n * 4, 2 * n * 4 + slack)) << "sum: bytes_read";
  EXPECT_LE(st.bytes_written, n * 4 / 8 + slack) << "a reduction writes partials only";
  EXPECT_LE(st.device_to_host_bytes, slack) << "a reduction reads back one value";
  EXPECT_LE(st.host_to_device_bytes, slack);
  if (is_gpu()) {
    EXPECT_GT(st.device_to_host_bytes, 0u) << "the result comes back from the GPU";
  }
}

// Captured host scalars are kernel parameters: after a warm-up, the same query shape with new
// constants compiles nothing and gives the new constants' result.
TEST_P(FusionTest, NewConstantsDoNotRecompile) {
  const std::uint64_t n = 4097;
  const auto x = data<std::int32_t>(n, 5);
  const kiln::buffer<std::int32_t> xs = upload(dev(), x);
  auto run = [&](std::int32_t a, double b, std::int8_t lo, std::int64_t init) {
    const std::int64_t got =
        xs | kiln::transform(kiln::cast<std::int64_t>(_1 / a + b)) |
        kiln::filter(kiln::clamp(_1, std::int64_t{lo}, std::int64_t{100}) > lo) |
        kiln::reduce(init, _1 + _2);
    std::int64_t want = init;
    for (std::int32_t v : x) {
      const auto m = static_cast<std::int64_t>(v / a + b);
      if (std::clamp<std::int64_t>(m, lo, 100) > lo) want += m;
    }
    EXPECT_EQ(got, want) << "a=" << a << " b=" << b << " lo=" << int(lo) << " init=" << init;
  };
  auto scan = [&](std::int64_t init) {
    const auto v = xs | kiln::exclusive_scan(init) | kiln::to_vector();
    ASSERT_EQ(v.size(), n);
    EXPECT_EQ(v[0], init);
    EXPECT_EQ(v[1], init + x[0]);
  };
  run(3, 0.5, -5, 0);  // warm-up: may compile, or load from the disk cache
  scan(0);
  const std::uint64_t compiles = kiln::cache_stats().compiles;
  run(-7, 1e9, 20, -123456789);
  EXPECT_EQ(stats().programs_compiled, 0u);
  run(1 << 20, -2.25, -128, 42);
  scan(-99);
  EXPECT_EQ(stats().programs_compiled, 0u);
  EXPECT_EQ(kiln::cache_stats().compiles, compiles) << "a new constant recompiled a kernel";
}

std::vector<std::filesystem::path> kiln_files(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".kiln") out.push_back(e.path());
  return out;
}
std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// KILN_DUMP_KERNELS=<dir>, read at each run: every generated kernel source (also of a query
// whose program is already cached) lands in <dir>/*.kiln; captured constants are parameters,
// not text; unset, nothing more is written.
TEST_P(FusionTest, DumpKernels) {
  char tmpl[] = "/tmp/kiln_query_dump_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::filesystem::path dir = tmpl;
  const auto x = data<std::int32_t>(1000, 6);  // times secret: no int64 overflow
  const kiln::buffer<std::int32_t> xs = upload(dev(), x);
  const std::int64_t secret = 987654321;
  auto q = [&] { return xs | kiln::transform(_1 * secret) | kiln::filter(_1 > 0) | kiln::count(); };
  const std::uint64_t want = q();  // warm: the program is cached from here on
  {
    scoped_env env("KILN_DUMP_KERNELS", dir.string());
    EXPECT_EQ(q(), want);
    const auto files = kiln_files(dir);
    ASSERT_GE(files.size(), 1u) << "no *.kiln file in " << dir;
    bool kernel = false;
    for (const auto& f : files) {
      const std::string text = slurp(f);
      EXPECT_FALSE(text.empty()) << f;
      kernel |= text.find("KILN_KERNEL") != std::string::npos;
      EXPECT_EQ(text.find(std::to_string(secret)), std::string::npos)
          << f << ": a captured constant appears in the kernel source";
    }
    EXPECT_TRUE(kernel) << "no dumped file holds a KILN_KERNEL entry point";
    // A chain cut in two (positions after a filter) generates two kernels' sources.
    for (const auto& f : files) std::filesystem::remove(f);
    (void)(xs | kiln::filter(_1 > 0) | kiln::take(10) | kiln::to_vector());
    EXPECT_GE(kiln_files(dir).size(), 2u) << "filter | take runs two generated programs";
    for (const auto& f : kiln_files(dir)) std::filesystem::remove(f);
  }
  (void)(xs | kiln::transform(_1 - 1) | kiln::max());
  EXPECT_EQ(kiln_files(dir).size(), 0u) << "KILN_DUMP_KERNELS unset, yet files were written";
  std::filesystem::remove_all(dir);
}

// Host ranges piped through on(dev): the same results as device buffers, on dev.
TEST_P(FusionTest, HostInputs) {
  const std::uint64_t n = big();
  const auto h = data<float>(n, 7);
  const float s = h | kiln::on(dev()) | kiln::transform(_1 * 2.f) | kiln::sum();
  double want = 0, m = 0;
  for (float v : h) want += 2.0 * v, m = std::max(m, std::fabs(2.0 * v));
  EXPECT_NEAR(s, want, sum_tolerance<float>(n, m, want));
  kiln::query_stats st = stats();
  EXPECT_EQ(st.device, dev().id());
  if (is_gpu()) {
    EXPECT_GE(st.host_to_device_bytes, n * sizeof(float)) << "the input is streamed";
  }

  EXPECT_TRUE(elements_equal(h | kiln::on(dev()) | kiln::filter(_1 > 0.f) | kiln::to_vector(),
                             kept_if<float>(h, [](float v) { return v > 0.f; })));
  const std::array<std::int32_t, 7> a = {5, -3, 9, 9, -8, 2, 0};
  EXPECT_EQ(a | kiln::on(dev()) | kiln::max(), std::optional<std::int32_t>(9));
  EXPECT_EQ(a | kiln::on(dev()) | kiln::argmax(), std::optional<std::uint64_t>(2));
  const std::vector<double> d = {1.5, -2.0, 8.25, 3.0, 8.25, -7.0};
  const std::span<const double> tail(d.data() + 1, 4);
  EXPECT_EQ(tail | kiln::on(dev()) | kiln::argmax(), std::optional<std::uint64_t>(1));
  std::unique_ptr<bool[]> flags(new bool[1001]);
  for (int i = 0; i < 1001; ++i) flags[i] = i % 7 == 0;
  EXPECT_EQ(
      std::span<const bool>(flags.get(), 1001) | kiln::on(dev()) | kiln::filter(_1) | kiln::count(),
      143u);
  const kiln::buffer<float> b = h | kiln::on(dev()) | kiln::transform(_1 + 1.f) | kiln::to_buffer();
  ASSERT_EQ(b.size(), n);
  EXPECT_TRUE(b.get_device() == dev()) << "to_buffer keeps the result on the device it ran on";
}

// An empty host range is an empty input (like an allocated empty buffer), not an error.
TEST_P(FusionTest, EmptyHostInput) {
  const std::vector<std::int32_t> none;
  try {
    EXPECT_EQ(none | kiln::on(dev()) | kiln::sum(), 0);
    EXPECT_FALSE((none | kiln::on(dev()) | kiln::max()).has_value());
    EXPECT_TRUE((none | kiln::on(dev()) | kiln::filter(_1 > 0) | kiln::to_vector()).empty());
  } catch (const kiln::error& e) {
    ADD_FAILURE() << "an empty host range threw (" << kiln::to_string(e.category())
                  << "): " << e.what();
  }
}

// on(automatic): small inputs run on the CPU; any size gives the right result somewhere.
TEST_P(FusionTest, AutomaticPlacement) {
  if (dev().id() != conformance::device_ids().front())
    GTEST_SKIP() << "on(automatic) chooses its own device: checked once, under "
                 << conformance::device_ids().front();
  const std::vector<std::int64_t> small = {4, -1, 7, 3};
  EXPECT_EQ(small | kiln::on(kiln::automatic) | kiln::transform(_1 * 2) | kiln::sum(), 26);
  EXPECT_EQ(stats().device, "cpu:0") << "a 4-element input belongs on the CPU";
  const auto large = data<std::int64_t>(size_for(100003, 1u << 24), 8);
  EXPECT_EQ(large | kiln::on(kiln::automatic) | kiln::sum(), ref_sum(large));
  const auto ids = conformance::device_ids();
  EXPECT_NE(std::find(ids.begin(), ids.end(), stats().device), ids.end()) << stats().device;
}

TEST_P(FusionTest, Errors) {
  kiln::buffer<float> a(dev(), 10), b(dev(), 11);
  a.fill(1.f);
  b.fill(2.f);
  try {
    (void)(kiln::zip(a, b) | kiln::count());
    ADD_FAILURE() << "zip of 10 and 11 elements did not throw";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::AllOf(HasSubstr("10"), HasSubstr("11")));
  }
  // Moved-from buffers have no device: an error, not an empty result.
  kiln::buffer<float> moved_to = std::move(a);
  EXPECT_THROW((void)(a | kiln::sum()), kiln::invalid_argument);
  EXPECT_THROW((void)(a | kiln::to_vector()), kiln::invalid_argument);
  EXPECT_THROW((void)(kiln::zip(a, b)), kiln::invalid_argument);
  EXPECT_THROW((void)(kiln::zip(moved_to, a)), kiln::invalid_argument);
  // An allocated empty buffer is just empty.
  const kiln::buffer<float> empty(dev(), 0);
  EXPECT_EQ(empty | kiln::sum(), 0.f);
  EXPECT_FALSE((empty | kiln::max()).has_value());
  EXPECT_TRUE((empty | kiln::filter(_1 > 0.f) | kiln::to_vector()).empty());
  // Combine operations of scans and reductions cannot use positions.
  EXPECT_THROW((void)(moved_to | kiln::inclusive_scan(_1 + _2 + _i)), kiln::invalid_argument);
  EXPECT_THROW((void)(moved_to | kiln::reduce(0.f, _1 + _2 * _i)), kiln::invalid_argument);
}

TEST_P(FusionTest, ZipAcrossDevicesIsAnError) {
  std::optional<kiln::device> other;
  for (const kiln::device& d : kiln::device::all())
    if (!(d == dev())) other = d;
  if (!other)
    GTEST_SKIP() << "only " << dev().id() << " is present: a zip across devices needs two";
  const kiln::buffer<float> a(dev(), 8), b(*other, 8);
  try {
    (void)kiln::zip(a, b);
    ADD_FAILURE() << "zip of buffers on " << dev().id() << " and " << other->id()
                  << " did not throw";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_THAT(e.what(), HasSubstr(other->id()));
  }
}

}  // namespace
// Filters are branch-free only when nothing after them divides: an integer division by zero on
// a dropped element would trap (SIGFPE on x86). Here every dropped element is a zero divisor.
TEST_P(FusionTest, DivisionAfterAFilterRunsOnlyOnSurvivors) {
  const std::uint64_t n = 10007;
  std::vector<std::int32_t> x(n);
  for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<std::int32_t>(i % 5);  // 0 every 5th
  const kiln::buffer<std::int32_t> xs = upload(dev(), x);
  std::vector<std::int32_t> want;
  std::int64_t want_sum = 0;
  for (auto v : x)
    if (v != 0) want.push_back(100 / v), want_sum += 100 % v;
  EXPECT_EQ(xs | kiln::filter(_1 != 0) | kiln::transform(100 / _1) | kiln::to_vector(), want);
  EXPECT_EQ(xs | kiln::filter(_1 != 0) | kiln::transform(100 % _1) | kiln::sum(), want_sum);
}

// Queries from several host threads on one device share its scratch memory and kernel cache:
// every thread gets its own right answers (and TSan sees the locking: "Concurrent").
TEST_P(FusionTest, ConcurrentQueriesFromSeveralThreads) {
  const std::uint64_t n = is_gpu() ? (1u << 20) + 3 : 20011;
  std::vector<std::thread> threads;
  std::array<int, 4> bad{};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      std::vector<std::int32_t> x(n);
      for (std::uint64_t i = 0; i < n; ++i) x[i] = static_cast<std::int32_t>((i * 7 + t) % 101);
      const kiln::buffer<std::int32_t> xs = upload(dev(), x);
      std::int64_t want_sum = 0;
      std::uint64_t want_count = 0;
      for (auto v : x) want_sum += v, want_count += v > 50 + t;
      for (int r = 0; r < 5; ++r) {
        const std::int64_t s = xs | kiln::transform(_1 + t) | kiln::sum();
        const std::vector<std::int32_t> kept = xs | kiln::filter(_1 > 50 + t) | kiln::to_vector();
        bad[t] += s != want_sum + std::int64_t(t) * std::int64_t(n);
        bad[t] += kept.size() != want_count;
      }
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

}  // namespace query_test
