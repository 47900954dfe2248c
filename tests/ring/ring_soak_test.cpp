// A bounded soak: two producers with random batch sizes, one receiver checking every message
// (id, order, payload) for KILN_RING_SOAK_SECONDS (default 10, sized for CI; 0 skips it; the GPU
// run uses minutes).
#include <atomic>
#include <cstdlib>
#include <random>
#include <thread>

#include "ring/ring_fixture.hpp"

namespace ring_test {
namespace {

TEST_P(RingTest, BoundedSoak) {
  const char* env = std::getenv("KILN_RING_SOAK_SECONDS");
  const int seconds = env ? std::atoi(env) : 10;
  if (seconds <= 0) GTEST_SKIP() << "KILN_RING_SOAK_SECONDS=0";
  kiln::ring_options o;
  o.capacity = 512;
  o.units = 2;
  kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
  r.activate();
  std::atomic<bool> stop{false};
  std::vector<std::thread> producers;
  for (std::uint32_t p = 0; p < 2; ++p)
    producers.emplace_back([&, p] {
      std::mt19937 rng(100 + p);
      std::vector<ping> buf;
      for (std::uint32_t s = 0; !stop.load();) {
        buf.clear();
        const std::uint32_t k = rng() % 64 + 1;
        for (std::uint32_t j = 0; j < k; ++j, ++s)
          buf.push_back(make_ping((std::uint64_t(p) << 32) | s, p, s));
        ASSERT_EQ(r.send_batch(buf, 30s), k);
      }
    });
  std::uint32_t next[2] = {0, 0};
  std::uint64_t id = 0;
  std::vector<kiln::ring_response<pong>> out(256);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  bool ok = true;
  while (ok) {
    if (std::chrono::steady_clock::now() >= until) stop = true;
    const std::size_t n = r.receive_batch(out, stop ? 200ms : 30s);
    if (n == 0 && stop) {
      bool all = true;
      for (auto& t : producers) all &= !t.joinable() || true;
      if (r.status().in_flight == 0 && all) break;
      continue;
    }
    if (n == 0) {
      const kiln::ring_status st = r.status();
      ADD_FAILURE() << "no response for 30 s after " << id << ": sent " << st.sent << ", received "
                    << st.received << ", processed " << st.processed << ", queued " << st.queued;
      stop = true;
      r.terminate(kiln::ring_stop::drop);
      for (auto& t : producers) t.join();
      return;
    }
    for (std::size_t i = 0; i < n; ++i) {
      const auto& m = out[i];
      ASSERT_EQ(m.id, id++);
      const std::uint32_t p = m.value.producer;
      ASSERT_LT(p, 2u);
      ASSERT_EQ(m.value.seq, next[p]) << "lost, duplicated or reordered";
      expect_echo(m, (std::uint64_t(p) << 32) | next[p], p, next[p]);
      ++next[p];
    }
    if (stop && r.status().in_flight == 0) break;
  }
  for (auto& t : producers) t.join();
  // Producers may have sent a last batch after the loop saw nothing in flight: take it all.
  while (r.status().in_flight > 0) {
    auto m = r.receive(30s);
    ASSERT_TRUE(m) << "a response lost at the end of the soak";
    ASSERT_EQ(m->id, id++);
    ASSERT_EQ(m->value.seq, next[m->value.producer]++);
  }
  EXPECT_EQ(r.status().in_flight, 0u);
  EXPECT_EQ(r.terminate().processed, id);
  std::printf("soak on %s: %llu messages in %d s, none lost, duplicated or reordered\n",
              GetParam().c_str(), static_cast<unsigned long long>(id), seconds);
}

}  // namespace
}  // namespace ring_test
