// Buffers, views, fills, copies and pinned memory on every device.
#include <array>
#include <span>

#include "conformance/backends.hpp"

namespace conformance {
namespace {

using ::testing::HasSubstr;

class MemoryTest : public DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(MemoryTest);

TEST_P(MemoryTest, RoundTripSizes0And1And1000003) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), std::size_t(1000003)}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto host = random_values<std::uint32_t>(n, 100 + n);
    kiln::buffer<std::uint32_t> buf(dev(), host);
    EXPECT_EQ(buf.size(), n);
    EXPECT_EQ(buf.bytes(), n * sizeof(std::uint32_t));
    EXPECT_EQ(buf.empty(), n == 0);
    EXPECT_TRUE(buf.get_device() == dev());
    EXPECT_TRUE(elements_equal(buf.to_vector(), host));

    // copy_from over different contents, then copy_to into a poisoned vector.
    const auto other = random_values<std::uint32_t>(n, 200 + n);
    buf.copy_from(other);
    std::vector<std::uint32_t> back(n, poison<std::uint32_t>());
    buf.copy_to(back);
    EXPECT_TRUE(elements_equal(back, other));
  }
}

TEST_P(MemoryTest, MemoryUsageCountsLiveAllocationsAndThePeak) {
  dev().reset_peak_memory();
  const auto before = dev().memory_usage();
  {
    kiln::buffer<float> a(dev(), 1000), b(dev(), 3000);
    const auto during = dev().memory_usage();
    EXPECT_EQ(during.in_use, before.in_use + 16000);
    EXPECT_GE(during.peak, during.in_use);
  }
  const auto after = dev().memory_usage();
  EXPECT_EQ(after.in_use, before.in_use);
  EXPECT_GE(after.peak, before.in_use + 16000);
  dev().reset_peak_memory();
  EXPECT_EQ(dev().memory_usage().peak, after.in_use);
}

TEST_P(MemoryTest, SubviewCopiesAndOffsets) {
  const std::size_t n = 1000;
  kiln::buffer<std::int32_t> buf(dev(), n);
  buf.fill(poison<std::int32_t>());
  const auto data = random_values<std::int32_t>(200, 7);

  kiln::buffer_view<std::int32_t> mid = buf.subview(100, 200);
  EXPECT_EQ(mid.offset(), 100u);
  EXPECT_EQ(mid.size(), 200u);
  mid.copy_from(data);
  std::vector<std::int32_t> want(n, poison<std::int32_t>());
  std::copy(data.begin(), data.end(), want.begin() + 100);
  EXPECT_TRUE(elements_equal(buf.to_vector(), want));

  // A view of a view: offsets add up, reads see the parent's data.
  kiln::buffer_view<std::int32_t> inner = mid.subview(50, 10);
  EXPECT_EQ(inner.offset(), 150u);
  EXPECT_TRUE(elements_equal(inner.to_vector(),
                             std::vector<std::int32_t>(data.begin() + 50, data.begin() + 60)));
  inner.fill(-7);
  std::fill(want.begin() + 150, want.begin() + 160, -7);
  EXPECT_TRUE(elements_equal(buf.to_vector(), want));

  // Views of const elements read; empty views at the very end are valid.
  kiln::buffer_view<const std::int32_t> ro = mid;
  EXPECT_TRUE(elements_equal(ro.to_vector(), std::vector<std::int32_t>(want.begin() + 100, want.begin() + 300)));
  kiln::buffer_view<std::int32_t> end = buf.subview(n, 0);
  EXPECT_TRUE(end.empty());
  EXPECT_EQ(end.offset(), n);
  EXPECT_TRUE(end.to_vector().empty());

  // Device copy between views of two buffers at different offsets.
  kiln::buffer<std::int32_t> dst(dev(), 64);
  dst.fill(poison<std::int32_t>());
  kiln::queue& q = dev().default_queue();
  q.copy(buf.subview(150, 20), dst.subview(5, 20));
  q.finish();
  std::vector<std::int32_t> want_dst(64, poison<std::int32_t>());
  std::copy(want.begin() + 150, want.begin() + 170, want_dst.begin() + 5);
  EXPECT_TRUE(elements_equal(dst.to_vector(), want_dst));
}

// Fills the whole buffer and an interior subview (neighbours must stay untouched), through
// buffer::fill (synchronous) and queue::fill (asynchronous).
template <class T>
void check_fill(const kiln::device& dev, T whole_value, T part_value) {
  SCOPED_TRACE(kiln::type_name(kiln::scalar_type_of<T>));
  const std::size_t n = 1001;
  kiln::buffer<T> buf(dev, n);
  buf.fill(whole_value);
  std::vector<T> want(n, whole_value);
  EXPECT_TRUE(elements_equal(buf.to_vector(), want));

  kiln::queue q(dev);
  q.fill(buf.subview(3, 995), part_value);
  q.finish();
  std::fill(want.begin() + 3, want.begin() + 998, part_value);
  EXPECT_TRUE(elements_equal(buf.to_vector(), want));
}

TEST_P(MemoryTest, FillFor1And2And4And8ByteTypes) {
  check_fill<std::int8_t>(dev(), -91, 0x5b);
  check_fill<std::uint8_t>(dev(), 0xa5, 0x01);
  check_fill<std::int16_t>(dev(), -12345, 0x1234);
  check_fill<std::uint16_t>(dev(), 0xbeef, 0x00ff);
  check_fill<std::int32_t>(dev(), std::int32_t(0xdeadbeefu), 0x7fffffff);
  check_fill<std::uint32_t>(dev(), 0x01020304u, 0xffffffffu);
  check_fill<float>(dev(), -1.5f, 3.0e38f);
  // 8-byte patterns with different halves (no plain 32-bit memset can do them) and equal ones.
  check_fill<std::int64_t>(dev(), 0x0123456789abcdefll, -2);
  check_fill<std::uint64_t>(dev(), 0x5555555555555555ull, 0xfedcba9876543210ull);
  check_fill<double>(dev(), 3.25, -1.0e-300);
}

TEST_P(MemoryTest, DeviceToDeviceCopyViaQueueCopy) {
  const std::size_t n = size_for(100003, 10000019);
  const auto host = random_values<double>(n, 11);
  kiln::buffer<double> src(dev(), host), dst(dev(), n);
  dst.fill(poison<double>());
  kiln::queue q(dev());
  q.copy(src, dst);
  q.finish();
  EXPECT_TRUE(elements_equal(dst.to_vector(), host));

  // Views: the second half of src onto the first half of dst, on the device's default queue.
  kiln::queue& dq = dev().default_queue();
  dq.copy(src.subview(n / 2, n / 2), dst.subview(0, n / 2));
  dq.finish();
  std::vector<double> want = host;
  std::copy(host.begin() + n / 2, host.begin() + n / 2 * 2, want.begin());
  EXPECT_TRUE(elements_equal(dst.to_vector(), want));
}

TEST_P(MemoryTest, PinnedBufferAsyncCopiesBothWays) {
  const std::size_t n = size_for(65537, 1 << 24);
  kiln::pinned_buffer<float> up(dev(), n), down(dev(), n);
  EXPECT_EQ(up.size(), n);
  const auto values = random_values<float>(n, 21);
  std::copy(values.begin(), values.end(), up.begin());
  std::fill(down.begin(), down.end(), poison<float>());

  kiln::buffer<float> buf(dev(), n);
  buf.fill(poison<float>());
  kiln::queue q(dev());
  q.copy(up, buf);    // pinned host -> device, asynchronous
  q.copy(buf, down);  // device -> pinned host, ordered after it
  q.finish();
  EXPECT_TRUE(elements_equal(std::vector<float>(down.begin(), down.end()), values));

  // Spans of pinned memory work as either side too.
  std::fill(down.begin(), down.end(), poison<float>());
  q.copy(std::span<const float>(up.data(), n / 2), buf.subview(1, n / 2));
  q.copy(buf.subview(1, n / 2), down.span().subspan(0, n / 2));
  q.finish();
  EXPECT_TRUE(elements_equal(std::vector<float>(down.begin(), down.begin() + n / 2),
                             std::vector<float>(values.begin(), values.begin() + n / 2)));
}

TEST_P(MemoryTest, ToDeviceFromVectorAndArray) {
  const auto vec = random_values<std::int64_t>(1234, 31);
  auto from_vec = kiln::to_device(dev(), vec);
  static_assert(std::is_same_v<decltype(from_vec), kiln::buffer<std::int64_t>>);
  EXPECT_TRUE(elements_equal(from_vec.to_vector(), vec));

  const std::array<std::uint16_t, 7> arr = {1, 2, 3, 65535, 40000, 7, 9};
  auto from_arr = kiln::to_device(dev(), arr);
  static_assert(std::is_same_v<decltype(from_arr), kiln::buffer<std::uint16_t>>);
  EXPECT_TRUE(elements_equal(from_arr.to_vector(), std::vector<std::uint16_t>(arr.begin(), arr.end())));

  const std::vector<float> none;
  EXPECT_TRUE(kiln::to_device(dev(), none).empty());
}

TEST_P(MemoryTest, MovingBuffersTransfersOwnership) {
  const auto data = random_values<std::int32_t>(100, 41);
  kiln::buffer<std::int32_t> a(dev(), data);
  const kiln::detail::memory_impl* mem = a.view().memory().get();

  kiln::buffer<std::int32_t> b(std::move(a));
  EXPECT_EQ(b.view().memory().get(), mem) << "a move must not copy the allocation";
  EXPECT_TRUE(elements_equal(b.to_vector(), data));

  kiln::buffer<std::int32_t> c(dev(), 5);
  c = std::move(b);
  EXPECT_EQ(c.size(), data.size());
  EXPECT_TRUE(elements_equal(c.to_vector(), data));

  // A view keeps the allocation alive after its buffer is gone.
  kiln::buffer_view<std::int32_t> view = c.subview(10, 20);
  { kiln::buffer<std::int32_t> gone(std::move(c)); }
  EXPECT_TRUE(elements_equal(view.to_vector(),
                             std::vector<std::int32_t>(data.begin() + 10, data.begin() + 30)));

  kiln::pinned_buffer<std::int32_t> p(dev(), 10);
  p[0] = 42;
  kiln::pinned_buffer<std::int32_t> p2(std::move(p));
  EXPECT_EQ(p.data(), nullptr);
  EXPECT_EQ(p.size(), 0u);
  EXPECT_EQ(p2[0], 42);
}

// A moved-from buffer holds no memory; it must also say so (size() == 0, empty()), or code
// that checks before use dereferences a null allocation.
TEST_P(MemoryTest, MovedFromBufferIsEmpty) {
  kiln::buffer<float> a(dev(), 100);
  kiln::buffer<float> b(std::move(a));
  EXPECT_EQ(a.size(), 0u);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.view().memory(), nullptr);
  EXPECT_EQ(b.size(), 100u);
}

TEST_P(MemoryTest, LargeAllocationWithKernelOnGpu) {
  KILN_REQUIRE_GPU(dev());
  const std::uint64_t n = (std::uint64_t(1) << 28) + 3;  // > 1 GiB of floats
  kiln::buffer<float> big(dev(), n);
  big.fill(1.5f);
  const char* src = R"(
KILN_KERNEL void touch(KILN_GLOBAL float* y) {
  const uint64_t i = kiln_global_id(0);
  y[i] = y[i] * 2.0f + (float)(i & 1023u);
})";
  kiln::kernel k = compile(src).get_kernel("touch");
  k.launch(dev().default_queue(), kiln::range(n), big);
  const std::vector<float> got = big.to_vector();
  EXPECT_TRUE(all_indices(
      n, [&](std::uint64_t i) { return got[i] == 3.0f + float(i & 1023u); },
      [&](std::uint64_t i) { return std::to_string(got[i]); }));
}

}  // namespace
}  // namespace conformance
