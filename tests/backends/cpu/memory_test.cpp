// CPU backend copies and fills: large ones are split over the thread pool (pieces of at least
// 1 MiB per thread), so every size here that is a few MiB is split on any machine with two or
// more cores. Each result is compared byte for byte with the same operation done by std::.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "kiln/kiln.hpp"

namespace {

std::vector<std::uint8_t> random_bytes(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::vector<std::uint8_t> v(n);
  for (auto& b : v) b = static_cast<std::uint8_t>(gen());
  return v;
}

// Sizes around the split threshold and odd ones well above it (split into uneven pieces).
const std::size_t sizes[] = {
    1, 63, 4096 + 7, (1u << 20) - 1, (2u << 20) + 1, (5u << 20) + 333, (9u << 20) + 13};

// Device memory straight from the backend's ABI, released at scope end.
struct raw {
  void* p = nullptr;
  explicit raw(std::uint64_t bytes) {
    EXPECT_EQ(kiln::cpu::abi::mem_alloc(nullptr, bytes, nullptr, &p), KILN_OK);
  }
  ~raw() { kiln::cpu::abi::mem_free(nullptr, p, nullptr); }
  char* c() const { return static_cast<char*>(p); }
};

struct raw_queue {
  kiln_queue_h q = nullptr;
  raw_queue() { EXPECT_EQ(kiln::cpu::abi::queue_create(nullptr, &q), KILN_OK); }
  ~raw_queue() { kiln::cpu::abi::queue_destroy(q); }
  void finish() { kiln::cpu::abi::queue_finish(q); }
};

}  // namespace

// Host -> device -> device (sub-ranges at odd offsets) -> host through the public API.
TEST(CpuMemory, CopiesRoundTripByteForByte) {
  kiln::device cpu = kiln::device::get("cpu");
  kiln::queue q(cpu);
  unsigned seed = 1;
  for (std::size_t n : sizes) {
    const std::vector<std::uint8_t> host = random_bytes(n + 200, seed++);
    kiln::buffer<std::uint8_t> a(cpu, host), b(cpu, n + 200);
    b.fill(0xA5);
    const std::size_t off_a = n > 100 ? 37 : 0, off_b = n > 100 ? 101 : 0;
    const std::size_t len = n > 100 ? n - 50 : n;
    q.copy(a.subview(off_a, len), b.subview(off_b, len));
    std::vector<std::uint8_t> got(n + 200);
    q.copy(b, got);
    q.finish();
    std::vector<std::uint8_t> want(n + 200, 0xA5);
    std::memcpy(want.data() + off_b, host.data() + off_a, len);
    ASSERT_EQ(got, want) << "n=" << n;
  }
}

// Byte offsets that no element type would give, and overlapping ranges (one memmove).
TEST(CpuMemory, RawCopiesAtOddOffsetsAndOverlaps) {
  raw_queue rq;
  const std::uint64_t n = (6u << 20) + 77;
  const std::vector<std::uint8_t> src = random_bytes(n, 42);
  raw a(n + 128), b(n + 128);
  std::vector<std::uint8_t> ref_b(n + 128, 0);
  std::memset(b.p, 0, n + 128);
  namespace abi = kiln::cpu::abi;
  ASSERT_EQ(abi::copy_h2d(rq.q, {a.p, 3}, src.data(), n), KILN_OK);
  ASSERT_EQ(abi::copy_d2d(rq.q, {b.p, 61}, {a.p, 3}, n - 5), KILN_OK);
  std::memcpy(ref_b.data() + 61, src.data(), n - 5);
  // Overlapping, forwards and backwards within b.
  ASSERT_EQ(abi::copy_d2d(rq.q, {b.p, 1000}, {b.p, 61}, n - 2000), KILN_OK);
  std::memmove(ref_b.data() + 1000, ref_b.data() + 61, n - 2000);
  ASSERT_EQ(abi::copy_d2d(rq.q, {b.p, 5}, {b.p, 3000}, n - 4000), KILN_OK);
  std::memmove(ref_b.data() + 5, ref_b.data() + 3000, n - 4000);
  std::vector<std::uint8_t> got(n + 128);
  ASSERT_EQ(abi::copy_d2h(rq.q, got.data(), {b.p, 0}, n + 128), KILN_OK);
  rq.finish();
  ASSERT_EQ(got, ref_b);
  std::vector<std::uint8_t> part(n - 9);
  ASSERT_EQ(abi::copy_d2h(rq.q, part.data(), {a.p, 7}, n - 9), KILN_OK);
  rq.finish();
  ASSERT_TRUE(std::equal(part.begin(), part.end(), src.begin() + 4));
}

TEST(CpuMemory, LargeFillsOfEveryPatternSize) {
  raw_queue rq;
  const std::uint64_t bytes = (5u << 20) + 40;
  raw m(bytes);
  for (std::uint32_t size : {1u, 2u, 4u, 8u}) {
    std::memset(m.p, 0x11, bytes);
    const std::uint64_t pattern = 0x0102030405060708ull;
    const std::uint64_t off = 3 * size, count = (bytes - 5 * size) / size;
    ASSERT_EQ(kiln::cpu::abi::fill(rq.q, {m.p, off}, &pattern, size, count), KILN_OK);
    rq.finish();
    std::vector<std::uint8_t> want(bytes, 0x11);
    for (std::uint64_t i = 0; i < count; ++i)
      std::memcpy(want.data() + off + i * size, &pattern, size);
    ASSERT_EQ(std::memcmp(m.p, want.data(), bytes), 0) << "pattern size " << size;
  }
}

// Several queues copying at once share the one pool; each result stays exact.
TEST(CpuMemory, ConcurrentQueuesCopyExactly) {
  kiln::device cpu = kiln::device::get("cpu");
  const std::size_t n = (3u << 20) + 5;
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      kiln::queue q(cpu);
      const std::vector<std::uint8_t> host = random_bytes(n, 100 + unsigned(t));
      kiln::buffer<std::uint8_t> a(cpu, n), b(cpu, n);
      std::vector<std::uint8_t> got(n);
      for (int round = 0; round < 3; ++round) {
        q.copy(host, a);
        q.copy(a, b);
        q.copy(b, got);
        q.finish();
        if (got != host) return;
      }
      ok[std::size_t(t)] = 1;
    });
  for (auto& th : threads) th.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(ok[std::size_t(t)], 1) << "queue " << t;
}

namespace {

// Pinned host memory on the CPU backend comes from the same block pool as device memory, and
// must go back to it (issue 23): freed straight to libc, the pool kept the block's size under an
// address libc handed out again, and a smaller buffer released there later was filed under the
// larger size class, so the next allocation of that class overran it (heap corruption in
// stress/QueueOrderingTest). Returned to the pool, the block is counted as cached and reused.
TEST(CpuMemory, PinnedBlocksGoBackToThePoolAndAreReused) {
  namespace abi = kiln::cpu::abi;
  abi::trim_pool();
  EXPECT_EQ(abi::pooled_bytes(), 0u) << "trim leaves no idle block";
  const std::uint64_t bytes = (2u << 20) + 1;  // a pooled size class
  void* pinned = nullptr;
  ASSERT_EQ(abi::host_alloc(nullptr, bytes, &pinned), KILN_OK);
  abi::host_free(nullptr, pinned);
  EXPECT_GE(abi::pooled_bytes(), bytes) << "the pinned block is not back in the pool";
  // The public statistics report the pool too (device::memory_stats' `cached`).
  EXPECT_GE(kiln::memory_stats(kiln::device::host()).cached, bytes);
  void* again = nullptr;
  ASSERT_EQ(abi::mem_alloc(nullptr, bytes, nullptr, &again), KILN_OK);
  EXPECT_EQ(again, pinned) << "an allocation of the same class takes the idle block";
  abi::mem_free(nullptr, again, nullptr);
  abi::trim_pool();
  EXPECT_EQ(abi::pooled_bytes(), 0u);
}

}  // namespace
