// Query sources: zip of several buffers (components _1.._4), buffer views (offsets into an
// allocation, views of const), and 64-bit sizes (more than 2^31 elements, GPUs only).
#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

class SourcesTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(SourcesTest);

TEST_P(SourcesTest, ZipComponents) {
  for (std::uint64_t n : sizes()) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto a = data<std::int8_t>(n, n + 1);
    const auto b = data<float>(n, n + 2);
    const auto c = conformance::random_values<std::int32_t>(n, n + 3, -1000000, 1000000);
    const auto d = data<double>(n, n + 4);
    const auto e = data<std::uint8_t>(n, n + 5);
    const auto ab = upload(dev(), a);
    const auto bb = upload(dev(), b);
    const auto cb = upload(dev(), c);
    const auto db = upload(dev(), d);
    const auto eb = upload(dev(), e);

    std::vector<float> prod(n);
    for (std::uint64_t i = 0; i < n; ++i) prod[i] = a[i] * b[i];
    EXPECT_TRUE(
        elements_equal(kiln::zip(ab, bb) | kiln::transform(_1 * _2) | kiln::to_vector(), prod));

    // Four components, in order.
    std::vector<double> four(n);
    for (std::uint64_t i = 0; i < n; ++i) four[i] = e[i] > 100 ? double(c[i]) - a[i] : d[i];
    auto q4 = kiln::zip(cb, ab, db, eb) |
              kiln::transform(kiln::select(_4 > 100, kiln::cast<double>(_1) - _2, _3));
    static_assert(std::is_same_v<decltype(q4), kiln::query<double>>);
    EXPECT_TRUE(elements_equal(std::move(q4) | kiln::to_vector(), four));

    // A filter on one component, a result from another.
    std::vector<std::int32_t> kept;
    for (std::uint64_t i = 0; i < n; ++i)
      if (b[i] > 0) kept.push_back(c[i]);
    EXPECT_TRUE(elements_equal(
        kiln::zip(cb, bb) | kiln::filter(_2 > 0.f) | kiln::transform(_1) | kiln::to_vector(),
        kept));
    std::uint64_t greater = 0;
    double dot = 0, max_term = 0;
    for (std::uint64_t i = 0; i < n; ++i) {
      greater += c[i] > 1000 * a[i];
      dot += double(b[i]) * double(b[i] * 0.5f);
      max_term = std::max(max_term, std::fabs(double(b[i]) * double(b[i] * 0.5f)));
    }
    EXPECT_EQ(kiln::zip(cb, ab) | kiln::filter(_1 > 1000 * _2) | kiln::count(), greater);
    const float got_dot = kiln::zip(bb, bb) | kiln::transform(_1 * (_2 * 0.5f)) | kiln::sum();
    EXPECT_NEAR(got_dot, dot, sum_tolerance<float>(n, max_term, dot));
  }
}

// Views start at their offset; zip of views with different offsets pairs elements by position
// within each view; a view of const elements reads like any other.
TEST_P(SourcesTest, ViewsAndOffsets) {
  for (std::uint64_t n : sizes()) {
    if (n < 8) continue;
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = data<std::int64_t>(n, n + 6);
    const auto y = data<std::int64_t>(n, n + 7);
    const auto xs = upload(dev(), x);
    const auto ys = upload(dev(), y);
    const std::uint64_t m = n - 5;
    const kiln::buffer_view<std::int64_t> xv = xs.subview(3, m);
    const kiln::buffer_view<const std::int64_t> yv = ys.subview(5, m);
    std::vector<std::int64_t> diff(m), sub(x.begin() + 3, x.begin() + 3 + m);
    for (std::uint64_t i = 0; i < m; ++i) diff[i] = x[i + 3] - y[i + 5];
    EXPECT_TRUE(elements_equal(xv | kiln::to_vector(), sub));
    EXPECT_TRUE(
        elements_equal(kiln::zip(xv, yv) | kiln::transform(_1 - _2) | kiln::to_vector(), diff));
    EXPECT_EQ(yv | kiln::sum(), ref_sum(std::vector<std::int64_t>(y.begin() + 5, y.end())));
    const auto lo = std::min_element(sub.begin(), sub.end());
    EXPECT_EQ(xv | kiln::argmin(), std::optional<std::uint64_t>(lo - sub.begin()))
        << "argmin positions count from the view's start";
    EXPECT_EQ(xs.subview(n / 2, 0) | kiln::count(), 0u);
  }
}

// n = 2^31 + 123 one-byte elements: sizes, positions and counts past 32 bits. GPUs only (on
// the CPU device each pass would take many seconds of a 2-core test budget), and only with
// room for the inputs.
TEST_P(SourcesTest, SizesBeyond32Bits) {
  if (!is_gpu())
    GTEST_SKIP() << dev().id() << " is not a GPU: the 2^31 + 123-element (64-bit size) case "
                 << "runs on GPUs only, where it takes milliseconds";
  constexpr std::uint64_t two31 = std::uint64_t{1} << 31, n = two31 + 123;
  if (dev().info().global_mem_bytes < 3 * n)
    GTEST_SKIP() << dev().id() << " has " << dev().info().global_mem_bytes
                 << " bytes of memory; this case needs about " << 3 * n;
  try {
    kiln::buffer<std::uint8_t> b(dev(), n);
    b.fill(1);
    b.subview(two31 + 100, 3).copy_from(std::vector<std::uint8_t>{7, 0, 2});
    EXPECT_EQ(b | kiln::count(), n);
    EXPECT_EQ(b | kiln::filter(_1 != 0) | kiln::count(), n - 1);
    EXPECT_EQ(b | kiln::sum(), (n - 3) + 7 + 2);
    EXPECT_EQ(b | kiln::filter(_i >= std::int64_t(two31)) | kiln::count(), 123u);
    EXPECT_EQ(b | kiln::max(), std::optional<std::uint8_t>(7));
    EXPECT_EQ(b | kiln::argmax(), std::optional<std::uint64_t>(two31 + 100));
    EXPECT_EQ(b | kiln::argmin(), std::optional<std::uint64_t>(two31 + 101));
    EXPECT_TRUE(elements_equal(b | kiln::skip(two31 + 100) | kiln::take(3) | kiln::to_vector(),
                               std::vector<std::uint8_t>{7, 0, 2}));
    EXPECT_TRUE(elements_equal(
        b | kiln::enumerate() | kiln::filter(_2 == 7) | kiln::transform(_1) | kiln::to_vector(),
        std::vector<std::int64_t>{std::int64_t(two31 + 100)}));
  } catch (const kiln::out_of_memory& e) {
    GTEST_SKIP() << "not enough device memory for 2^31 + 123 bytes: " << e.what();
  }
  try {
    kiln::buffer<bool> c(dev(), n);
    c.fill(true);
    c.subview(n - 1, 1).fill(false);
    EXPECT_EQ(c | kiln::filter(_1) | kiln::count(), n - 1);
    EXPECT_EQ(c | kiln::sum(), std::int64_t(n - 1));
    EXPECT_FALSE(c | kiln::all());
    EXPECT_EQ(c | kiln::argmin(), std::optional<std::uint64_t>(n - 1));
  } catch (const kiln::out_of_memory& e) {
    GTEST_SKIP() << "not enough device memory for 2^31 + 123 bools: " << e.what();
  }
}

}  // namespace
}  // namespace query_test
