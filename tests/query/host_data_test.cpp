// Host data in and out of queries (src/query/host_input.cpp, host_output.cpp, host_staging.cpp):
// chunked transfers through the pinned staging pool with chunks small enough that small inputs
// cross many chunk boundaries (chunk sizes that divide neither the data nor an element), CPU
// devices forced onto the staged path so that PoCL and the CPU backend run it too, concurrent
// host queries on one device, and pinned memory in and out. Results are exact (std:: reference).
#include <thread>

#include "kiln/query/host_output.hpp"
#include "query/host_staging.hpp"
#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;
using kiln::detail::q::host_transfer_config;

class HostDataTest : public QueryTest {
 protected:
  void SetUp() override {
    QueryTest::SetUp();
    saved_ = kiln::detail::q::host_transfer();
  }
  void TearDown() override { kiln::detail::q::set_host_transfer(saved_); }
  // Small chunks, every device staged, memcpys split from 4 KiB on across 3 threads.
  static void small_chunks(std::uint64_t chunk) {
    host_transfer_config c;
    c.chunk_bytes = chunk;
    c.parallel_min_bytes = 4096;
    c.copy_threads = 3;
    c.stage_cpu_devices = true;
    kiln::detail::q::set_host_transfer(c);
  }

 private:
  host_transfer_config saved_;
};
KILN_INSTANTIATE_QUERY_PER_DEVICE(HostDataTest);

// x * 3 where x > lo, then + 7: in T, as the kernel computes it (C++ promotion, narrowed back).
template <class T>
std::vector<T> reference(const std::vector<T>& x, T lo) {
  std::vector<T> out;
  for (T v : x)
    if (static_cast<T>(v * T(3)) > lo)
      out.push_back(static_cast<T>(static_cast<T>(v * T(3)) + T(7)));
  return out;
}

template <class T>
std::vector<T> run_chain(const std::vector<T>& x, const kiln::device& dev, T lo) {
  return x | kiln::on(dev) | kiln::transform(kiln::cast<T>(_1 * T(3))) | kiln::filter(_1 > lo) |
         kiln::transform(kiln::cast<T>(_1 + T(7))) | kiln::to_vector();
}

template <class T>
std::int64_t int_sum(const std::vector<T>& x) {
  std::int64_t s = 0;
  for (T v : x) s += v;
  return s;
}

// Chunk sizes: one byte more than a page (divides nothing), odd (splits elements), a prime.
TEST_P(HostDataTest, ChunkBoundaries) {
  for (std::uint64_t chunk : {4097u, 1000u, 9973u}) {
    small_chunks(chunk);
    for (std::uint64_t n : {1u, 255u, 1023u, 4099u, 60013u}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " bytes, n = " + std::to_string(n));
      const auto x = conformance::random_values<std::int32_t>(n, n + chunk, -1000000, 1000000);
      const std::vector<std::int32_t> got = run_chain<std::int32_t>(x, dev(), -200000);
      EXPECT_EQ(got, reference<std::int32_t>(x, -200000));
      EXPECT_EQ(stats().host_to_device_bytes, n * 4);

      const auto b = conformance::random_values<std::int8_t>(n, n + 7);
      EXPECT_EQ(b | kiln::on(dev()) | kiln::sum(), int_sum(b));
      const auto w = conformance::random_values<std::uint64_t>(n, n + 9);
      EXPECT_EQ(
          w | kiln::on(dev()) | kiln::transform(_1 ^ std::uint64_t(0x5555)) | kiln::to_vector(),
          [&] {
            auto r = w;
            for (auto& v : r) v ^= 0x5555;
            return r;
          }());
    }
  }
}

TEST_P(HostDataTest, DefaultChunksAndEmptyInput) {
  const std::uint64_t n = size_for(3u << 20, 100000007);  // 12 MiB on CPUs: two 8 MiB chunks
  const auto x = conformance::random_values<float>(n, 11, -100.f, 100.f);
  std::vector<float> want;
  for (float v : x)
    if (v * 2.f > 1.f) want.push_back(v * 2.f + 0.5f);
  EXPECT_EQ(x | kiln::on(dev()) | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1.f) |
                kiln::transform(_1 + 0.5f) | kiln::to_vector(),
            want);
  const std::vector<float> none;
  EXPECT_TRUE((none | kiln::on(dev()) | kiln::to_vector()).empty());
}

// Eight threads, one device, small chunks (they contend for the pool's eight slots): every
// result matches its own input.
TEST_P(HostDataTest, ConcurrentHostQueries) {
  small_chunks(12289);  // three pages and a byte: each memcpy is split across the copy threads
  constexpr int threads = 8, rounds = 3;
  std::vector<int> bad(threads, 0);
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t)
    ts.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) {
        const std::uint64_t n = 20011 + std::uint64_t(t) * 1237 + std::uint64_t(r) * 17;
        const auto x = conformance::random_values<std::int32_t>(n, 100 * t + r, -50000, 50000);
        if (run_chain<std::int32_t>(x, dev(), 1000) != reference<std::int32_t>(x, 1000)) ++bad[t];
        if ((x | kiln::on(dev()) | kiln::sum()) != int_sum(x)) ++bad[t];
      }
    });
  for (auto& th : ts) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(bad[t], 0) << "thread " << t;
}

// Pinned memory takes one DMA each way: a pinned_buffer as the query's input, and
// copy_to_host into a pinned_buffer; both also through staging (pageable) for comparison.
TEST_P(HostDataTest, PinnedInAndOut) {
  small_chunks(4097);
  const std::uint64_t n = 30011;
  const auto x = conformance::random_values<std::int32_t>(n, 5, -1000000, 1000000);
  kiln::pinned_buffer<std::int32_t> in(dev(), n);
  std::copy(x.begin(), x.end(), in.begin());
  EXPECT_EQ(run_chain<std::int32_t>(std::vector<std::int32_t>(in.begin(), in.end()), dev(), 0),
            reference<std::int32_t>(x, 0));
  EXPECT_EQ(in.span() | kiln::on(dev()) | kiln::transform(kiln::cast<std::int32_t>(_1 * 3)) |
                kiln::filter(_1 > 0) | kiln::transform(kiln::cast<std::int32_t>(_1 + 7)) |
                kiln::to_vector(),
            reference<std::int32_t>(x, 0));

  const kiln::buffer<std::int32_t> d = upload(dev(), x);
  kiln::pinned_buffer<std::int32_t> out(dev(), n);
  std::vector<std::int32_t> pageable(n - 3);
  kiln::detail::q::copy_to_host(*d.view().memory(), 0, out.data(), n * 4);
  kiln::detail::q::copy_to_host(*d.view().memory(), 12, pageable.data(), (n - 3) * 4);
  EXPECT_TRUE(std::equal(x.begin(), x.end(), out.begin()));
  EXPECT_TRUE(std::equal(x.begin() + 3, x.end(), pageable.begin()));
}

}  // namespace
}  // namespace query_test
