// Ring-kernel semantics on every device that hosts rings: order, loss, duplication, boundaries,
// lifecycle, state, batches, callbacks, several producers, several units and a pipeline.
#include <gmock/gmock.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <thread>

#include "ring/ring_fixture.hpp"

struct stage_mid {
  std::uint64_t key;
  double acc;
  std::uint32_t seq;
};
KILN_RING_MESSAGE(stage_mid, key, acc, seq);

namespace ring_test {
namespace {

// Sends n messages from one thread while receiving on this one; checks each response.
void round_trip(kiln::ring<ping, pong>& r, std::uint64_t n, std::uint64_t first_id) {
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < n; ++i) {
      auto id = r.send(make_ping(i * 7 + 3, 0, static_cast<std::uint32_t>(i)), 30s);
      ASSERT_TRUE(id.has_value()) << "send " << i << " timed out";
      ASSERT_EQ(*id, first_id + i);
    }
  });
  for (std::uint64_t i = 0; i < n; ++i) {
    auto resp = r.receive(30s);
    ASSERT_TRUE(resp.has_value()) << "no response " << i;
    ASSERT_EQ(resp->id, first_id + i);
    expect_echo(*resp, i * 7 + 3, 0, static_cast<std::uint32_t>(i));
  }
  producer.join();
}

TEST_P(RingTest, OneMessageRoundTrip) {
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  EXPECT_EQ(r.status().state, kiln::ring_state::launched);
  r.activate();
  EXPECT_EQ(r.status().state, kiln::ring_state::active);
  auto id = r.send(make_ping(42, 1, 9));
  ASSERT_TRUE(id);
  EXPECT_EQ(*id, 0u);
  auto resp = r.receive(30s);
  ASSERT_TRUE(resp);
  expect_echo(*resp, 42, 1, 9);
  kiln::ring_report rep = r.terminate();
  EXPECT_EQ(rep.processed, 1u);
  EXPECT_TRUE(rep.dropped.empty());
  EXPECT_EQ(r.status().state, kiln::ring_state::terminated);
  EXPECT_EQ(r.status().sent, 1u);
  EXPECT_EQ(r.status().received, 1u);
}

// Capacities of 2, 3 and 4 slots: the producer runs into the full queue over and over.
TEST_P(RingTest, SmallCapacitiesLoseNothing) {
  for (std::uint32_t cap : {1u, 2u, 3u, 4u}) {
    kiln::ring_options o;
    o.capacity = cap;
    kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
    r.activate();
    round_trip(r, 2000, 0);
    EXPECT_EQ(r.terminate().processed, 2000u) << "capacity " << cap;
  }
}

// Ids start just below 2^64 so positions, slot indices and seq words wrap during the test.
TEST_P(RingTest, IndexWrapAround) {
  for (std::uint32_t cap : {3u, 4u}) {
    kiln::ring_options o;
    o.capacity = cap;
    o.start_id = ~std::uint64_t(0) - 40;
    kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
    r.activate();
    round_trip(r, 200, o.start_id);
    r.terminate();
  }
}

TEST_P(RingTest, FullAndEmptyBoundaries) {
  kiln::ring_options o;
  o.capacity = 2;
  kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
  EXPECT_FALSE(r.try_receive()) << "a response out of an empty ring";
  // Inactive: messages queue up, the third finds the queue full.
  ASSERT_TRUE(r.try_send(make_ping(1, 0, 0)));
  ASSERT_TRUE(r.try_send(make_ping(2, 0, 1)));
  EXPECT_FALSE(r.try_send(make_ping(3, 0, 2)));
  EXPECT_FALSE(r.send(make_ping(3, 0, 2), 20ms)) << "send past capacity must time out";
  EXPECT_EQ(r.status().queued, 2u);
  EXPECT_FALSE(r.receive(50ms)) << "an inactive ring answered";
  r.activate();
  auto a = r.receive(30s), b = r.receive(30s);
  ASSERT_TRUE(a && b);
  expect_echo(*a, 1, 0, 0);
  expect_echo(*b, 2, 0, 1);
  EXPECT_FALSE(r.try_receive());
  ASSERT_TRUE(r.try_send(make_ping(3, 0, 2)));
  auto c = r.receive(30s);
  ASSERT_TRUE(c);
  expect_echo(*c, 3, 0, 2);
}

TEST_P(RingTest, PauseKeepsStateAndQueue) {
  kiln::ring_options o;
  o.with_state(std::uint64_t(1000));
  kiln::ring<ping, pong> r(dev(), handlers, "count", o);
  r.activate();
  round_trip(r, 50, 0);
  r.deactivate();
  EXPECT_EQ(r.status().state, kiln::ring_state::paused);
  ASSERT_TRUE(r.send(make_ping(5, 0, 0)));
  EXPECT_FALSE(r.receive(50ms)) << "a paused ring answered";
  EXPECT_EQ(r.state<std::uint64_t>(), 1050u);
  r.activate();
  auto resp = r.receive(30s);
  ASSERT_TRUE(resp);
  expect_echo(*resp, 5, 0, 0);
  r.terminate();
  EXPECT_EQ(r.state<std::uint64_t>(), 1051u);
}

TEST_P(RingTest, TerminateDrainsOrDropsWhatIsQueued) {
  {
    kiln::ring<ping, pong> r(dev(), handlers, "echo");
    for (std::uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(r.send(make_ping(i, 0, i)));
    kiln::ring_report rep = r.terminate(kiln::ring_stop::drain);  // never activated: drains
    EXPECT_EQ(rep.processed, 5u);
    EXPECT_TRUE(rep.dropped.empty());
    for (std::uint32_t i = 0; i < 5; ++i) {
      auto resp = r.receive(1s);
      ASSERT_TRUE(resp) << "response " << i << " lost by terminate(drain)";
      expect_echo(*resp, i, 0, i);
    }
    EXPECT_FALSE(r.receive(10ms));
    EXPECT_THROW((void)r.send(make_ping(9, 0, 9)), kiln::invalid_argument);
  }
  {
    kiln::ring_options o;
    o.start_id = 100;
    kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
    for (std::uint32_t i = 0; i < 5; ++i) ASSERT_TRUE(r.send(make_ping(i, 0, i)));
    kiln::ring_report rep = r.terminate(kiln::ring_stop::drop);
    EXPECT_EQ(rep.processed, 0u);
    EXPECT_EQ(rep.dropped, (std::vector<std::uint64_t>{100, 101, 102, 103, 104}));
    EXPECT_EQ(r.status().dropped, 5u);
    EXPECT_FALSE(r.receive(10ms));
  }
}

TEST_P(RingTest, HandlerStatusAndTelemetry) {
  kiln::ring<ping, pong> r(dev(), handlers, "flaky");
  r.activate();
  for (std::uint32_t i = 0; i < 10; ++i) ASSERT_TRUE(r.send(make_ping(i, 0, i)));
  for (std::uint32_t i = 0; i < 10; ++i) {
    auto resp = r.receive(30s);
    ASSERT_TRUE(resp);
    EXPECT_EQ(resp->status, i % 2 ? 7 : 0);
    EXPECT_EQ(resp->value.key, i);
  }
  // The device publishes its processed count after the batch's responses: wait for it (under
  // compute-sanitizer the gap is long enough to see).
  kiln::ring_status s = r.status();
  for (auto until = std::chrono::steady_clock::now() + 10s;
       s.processed < 10 && std::chrono::steady_clock::now() < until; s = r.status())
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(s.handler_faults, 5u);
  EXPECT_EQ(s.sent, 10u);
  EXPECT_EQ(s.received, 10u);
  EXPECT_EQ(s.processed, 10u);
  EXPECT_EQ(s.in_flight, 0u);
  std::uint64_t hist = 0;
  for (auto n : s.latency_ns) hist += n;
  EXPECT_EQ(hist, 10u);
  EXPECT_GT(s.latency_percentile_us(50), 0.0);
}

TEST_P(RingTest, BatchesOfEverySize) {
  kiln::ring_options o;
  o.capacity = 256;
  kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
  r.activate();
  std::mt19937_64 rng(11);
  std::uint64_t next_key = 0, expect_key = 0;
  for (std::size_t batch : {1u, 2u, 31u, 32u, 33u, 100u, 256u}) {
    std::vector<ping> msgs;
    for (std::size_t i = 0; i < batch; ++i) msgs.push_back(make_ping(next_key++, 0, 0));
    std::uint64_t first = 0;
    ASSERT_EQ(r.send_batch(msgs, 30s, &first), batch);
    EXPECT_EQ(first, expect_key);
    std::vector<kiln::ring_response<pong>> out(rng() % 64 + 1);
    for (std::size_t got = 0; got < batch;) {
      const std::size_t want = std::min(out.size(), batch - got);
      std::size_t n = r.receive_batch(std::span(out.data(), want), 30s);
      ASSERT_GT(n, 0u);
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(out[i].id, expect_key);
        expect_echo(out[i], expect_key, 0, 0);
        ++expect_key;
      }
      got += n;
    }
  }
  // try_send_batch takes what fits.
  r.deactivate();
  std::vector<ping> many(300, make_ping(1, 0, 0));
  EXPECT_EQ(r.try_send_batch(many), 256u);
}

// Four producer threads; every response comes back once, and each producer's in its order.
TEST_P(RingTest, SeveralProducersKeepTheirOrder) {
  for (std::uint32_t units : {1u, 3u}) {
    kiln::ring_options o;
    o.capacity = 64;
    o.units = units;
    o.batch = 8;
    kiln::ring<ping, pong> r(dev(), handlers, "echo", o);
    r.activate();
    const std::uint32_t producers = 4, per = is_gpu() ? 20000 : 3000;
    std::vector<std::thread> ts;
    for (std::uint32_t p = 0; p < producers; ++p)
      ts.emplace_back([&, p] {
        std::mt19937 rng(p);
        std::vector<ping> buf;
        for (std::uint32_t s = 0; s < per;) {
          buf.clear();
          const std::uint32_t k = std::min<std::uint32_t>(rng() % 8 + 1, per - s);
          for (std::uint32_t j = 0; j < k; ++j, ++s)
            buf.push_back(make_ping(p * 1000003ull + s, p, s));
          ASSERT_EQ(r.send_batch(buf, 30s), k);
        }
      });
    std::vector<std::uint32_t> next(producers, 0);
    std::uint64_t expect_id = 0;
    for (std::uint64_t i = 0; i < std::uint64_t(producers) * per; ++i) {
      auto resp = r.receive(30s);
      ASSERT_TRUE(resp) << "lost after " << i << " responses";
      ASSERT_EQ(resp->id, expect_id++);
      const std::uint32_t p = resp->value.producer;
      ASSERT_LT(p, producers);
      ASSERT_EQ(resp->value.seq, next[p]) << "producer " << p << " out of order or duplicated";
      expect_echo(*resp, p * 1000003ull + next[p], p, next[p]);
      ++next[p];
    }
    for (auto& t : ts) t.join();
    EXPECT_FALSE(r.try_receive()) << "a duplicate response";
    EXPECT_EQ(r.terminate().processed, std::uint64_t(producers) * per);
  }
}

TEST_P(RingTest, CallbackReceivesEverything) {
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  std::mutex mu;
  std::vector<kiln::ring_response<pong>> got;
  r.on_response([&](const kiln::ring_response<pong>& resp) {
    std::lock_guard lock(mu);
    got.push_back(resp);
  });
  EXPECT_THROW(r.receive(1ms), kiln::invalid_argument);
  r.activate();
  for (std::uint32_t i = 0; i < 500; ++i) ASSERT_TRUE(r.send(make_ping(i, 2, i), 30s));
  for (int spin = 0; spin < 3000; ++spin) {
    {
      std::lock_guard lock(mu);
      if (got.size() == 500) break;
    }
    std::this_thread::sleep_for(10ms);
  }
  r.on_response(nullptr);
  ASSERT_EQ(got.size(), 500u);
  for (std::uint32_t i = 0; i < 500; ++i) {
    EXPECT_EQ(got[i].id, i);
    expect_echo(got[i], i, 2, i);
  }
  EXPECT_FALSE(r.try_receive());
}

constexpr const char* pipeline_src = R"(
KILN_FUNC void first(const ping* in, stage_mid* out, kiln_ring_ctx* ctx) {
  out->key = in->key;
  out->acc = (double)in->x * 3.0;
  out->seq = in->seq;
}
KILN_FUNC void second(const stage_mid* in, pong* out, kiln_ring_ctx* ctx) {
  out->key = in->key;
  out->y = (float)(in->acc + 0.5);
  out->producer = 77;
  out->seq = in->seq;
  out->id = kiln_ring_message_id(ctx);
}
)";

TEST_P(RingTest, TwoStagePipeline) {
  kiln::ring_options o;
  o.capacity = 16;
  o.units = 2;
  kiln::ring_pipeline<ping, stage_mid, pong> p(dev(), pipeline_src, "first", "second", o);
  p.activate();
  const std::uint32_t n = 3000;
  std::thread producer([&] {
    for (std::uint32_t i = 0; i < n; ++i) ASSERT_TRUE(p.send(make_ping(i, 0, i), 30s));
  });
  for (std::uint32_t i = 0; i < n; ++i) {
    auto resp = p.receive(30s);
    ASSERT_TRUE(resp) << "pipeline lost message " << i;
    EXPECT_EQ(resp->id, i);
    EXPECT_EQ(resp->value.key, i);
    EXPECT_EQ(resp->value.seq, i);
    EXPECT_EQ(resp->value.producer, 77u);
    EXPECT_EQ(resp->value.y,
              static_cast<float>(static_cast<double>(make_ping(i, 0, i).x) * 3.0 + 0.5));
  }
  producer.join();
  EXPECT_EQ(p.terminate().processed, 2u * n);  // each message, once per stage
}

// A ring stays resident while other kernels, copies, queries and device synchronisation run on
// the device. Programs are loaded, and pinned memory allocated, before the ring starts: on CUDA
// a module load and cuMemHostAlloc/cuMemFreeHost wait for running kernels (measured on the
// H100: both block while a ring is resident), so docs/ring.md asks for them up front.
TEST_P(RingTest, OtherWorkRunsWhileResident) {
  // KILN_RING_TRACE=1 prints each step: a hang shows where the device waited.
  const bool tracing = std::getenv("KILN_RING_TRACE") != nullptr;
  auto trace = [&](const char* s) {
    if (tracing) std::fprintf(stderr, "other-work step %s\n", s);
  };
  const std::string src = R"(
KILN_KERNEL void add_one(KILN_GLOBAL int* v) { v[kiln_global_id(0)] += 1; }
)";
  kiln::program prog = kiln::program::compile(dev(), src);
  trace("1");
  kiln::buffer<int> v(dev(), std::vector<int>(4096, 41));
  trace("2");
  EXPECT_EQ(v | kiln::sum(), 41 * 4096);  // loads the query's program now
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  trace("3");
  r.activate();
  trace("4");
  round_trip(r, 10, 0);
  trace("5");
  kiln::queue q(dev());
  trace("6");
  prog.get_kernel("add_one").launch(q, kiln::range(4096), v);
  trace("7");
  q.finish();
  trace("8");
  dev().synchronize();  // does not wait for the resident queue
  trace("8b");
  EXPECT_EQ(v.to_vector(), std::vector<int>(4096, 42));
  trace("9");
  EXPECT_EQ(v | kiln::sum(), 42 * 4096);
  trace("10");
  round_trip(r, 10, 10);
  trace("11");
  r.terminate();
  trace("12");
}

// With a ring running, work that would have to wait for the resident grid (a new program, a new
// query shape, pinned memory, a host-range query) either runs (CPU) or is refused at once with
// kiln::unsupported saying why (CUDA) - never blocks. Under a fallback it moves to the host.
TEST_P(RingTest, NothingBlocksBehindARunningRing) {
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  r.activate();
  round_trip(r, 4, 0);
  using clock = std::chrono::steady_clock;
  auto bounded = [&](const char* what, auto&& work) {
    const auto t0 = clock::now();
    try {
      work();
    } catch (const kiln::unsupported& e) {
      EXPECT_THAT(std::string(e.what()), ::testing::HasSubstr("resident ring")) << what;
    }
    EXPECT_LT(clock::now() - t0, 30s) << what << " waited for the ring";
  };
  using namespace kiln::placeholders;
  const std::vector<float> host(100000, 0.5f);
  bounded("a new kernel", [&] {
    kiln::buffer<int> v(dev(), std::vector<int>(64, 1));
    kiln::queue q(dev());
    kiln::program::compile(
        dev(), "KILN_KERNEL void ring_nb_k(KILN_GLOBAL int* v) { v[kiln_global_id(0)] *= 3; }")
        .get_kernel("ring_nb_k")
        .launch(q, kiln::range(64), v);
    EXPECT_EQ(v.to_vector(), std::vector<int>(64, 3));
  });
  bounded("a new query shape", [&] {
    kiln::buffer<float> x(dev(), host);
    EXPECT_EQ(x | kiln::transform(_1 * 8.f - 3.f) | kiln::filter(_1 > 0.f) | kiln::count(),
              host.size());
  });
  bounded("a pinned buffer", [&] {
    kiln::pinned_buffer<float> p(dev(), 1 << 20);
    p.data()[0] = 1.f;
  });
  bounded("a host-range query", [&] {
    EXPECT_DOUBLE_EQ(host | kiln::on(dev()) | kiln::transform(_1 * 2.f) | kiln::sum(),
                     double(host.size()));
  });
  if (!(dev() == kiln::device::host())) {
    // Under a fallback, the same work completes on the host.
    kiln::fallback_scope scope(kiln::fallback{dev(), kiln::device::host()});
    EXPECT_DOUBLE_EQ(host | kiln::on(dev()) | kiln::transform(_1 * 4.f - 1.f) | kiln::sum(),
                     double(host.size()));
  }
  round_trip(r, 4, 4);  // the ring still serves
  r.terminate();
}

INSTANTIATE_TEST_SUITE_P(Ring, RingTest, ::testing::ValuesIn(ring_devices()), param_name);

}  // namespace
}  // namespace ring_test
