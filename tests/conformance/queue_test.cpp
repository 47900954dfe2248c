// Queues and events: ordering within a queue, cross-queue dependencies through events,
// overlapping work on two queues, event timing, device-wide synchronisation.
#include "conformance/backends.hpp"
#include "kiln/native_handle.hpp"
#include "kiln/queue_poll.hpp"

namespace conformance {
namespace {

// `produce` is deliberately slow (a chain of LCG steps per item), so a consumer that does not
// wait for it reads the poisoned buffer instead of its results.
constexpr const char* queue_source = R"(
KILN_KERNEL void produce(KILN_GLOBAL uint32_t* out, uint32_t seed, uint32_t rounds) {
  const uint64_t i = kiln_global_id(0);
  uint32_t v = (uint32_t)i ^ seed;
  for (uint32_t r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
  out[i] = v;
}
KILN_KERNEL void consume(KILN_GLOBAL uint32_t* out, KILN_GLOBAL const uint32_t* in, uint32_t salt) {
  const uint64_t i = kiln_global_id(0);
  out[i] = in[i] ^ salt;
})";

// The host's `produce`: `rounds` LCG steps collapse into one affine map v -> mul * v + add
// (mod 2^32), found by squaring, so checking 2^22 items of 20000 rounds costs no time.
std::vector<std::uint32_t> produced(std::uint64_t n, std::uint32_t seed, std::uint32_t rounds,
                                    std::uint32_t salt = 0) {
  std::uint32_t mul = 1, add = 0, step_mul = 1664525u, step_add = 1013904223u;
  for (std::uint32_t r = rounds; r; r >>= 1) {
    if (r & 1) {  // (mul, add) := step after (mul, add)
      add = step_mul * add + step_add;
      mul = step_mul * mul;
    }
    step_add = step_mul * step_add + step_add;  // step := step after step
    step_mul = step_mul * step_mul;
  }
  std::vector<std::uint32_t> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = (mul * (std::uint32_t(i) ^ seed) + add) ^ salt;
  return v;
}

class QueueTest : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    prog_.emplace(compile(queue_source));
  }
  kiln::kernel produce() const { return prog_->get_kernel("produce"); }
  kiln::kernel consume() const { return prog_->get_kernel("consume"); }
  std::uint64_t n() const { return size_for(1 << 14, 1 << 22); }
  std::uint32_t rounds() const { return is_gpu() ? 20000 : 2000; }

 private:
  std::optional<kiln::program> prog_;
};
KILN_INSTANTIATE_PER_DEVICE(QueueTest);

TEST_P(QueueTest, WorkOnOneQueueRunsInOrder) {
  kiln::queue q(dev());
  kiln::buffer<std::uint32_t> a(dev(), n()), b(dev(), n());
  std::vector<std::uint32_t> host(n(), poison<std::uint32_t>());
  // fill -> kernel -> kernel -> copy, no host synchronisation in between.
  q.fill(a, poison<std::uint32_t>());
  q.fill(b, poison<std::uint32_t>());
  produce().launch(q, kiln::range(n()), a, 7u, rounds());
  consume().launch(q, kiln::range(n()), b, a, 0x5bd1e995u);
  q.copy(b, host);
  q.finish();
  EXPECT_TRUE(elements_equal(host, produced(n(), 7u, rounds(), 0x5bd1e995u)));
}

TEST_P(QueueTest, EventOrdersConsumerQueueAfterProducerQueue) {
  kiln::queue producer(dev()), consumer(dev());
  kiln::buffer<std::uint32_t> mid(dev(), n()), out(dev(), n());
  for (std::uint32_t round = 1; round <= 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    mid.fill(poison<std::uint32_t>());
    out.fill(poison<std::uint32_t>());
    produce().launch(producer, kiln::range(n()), mid, round, rounds());
    const kiln::event ready = producer.record();
    consumer.wait(ready);  // the device waits; the host does not
    consume().launch(consumer, kiln::range(n()), out, mid, 0xffffffffu);
    const kiln::event consumed = consumer.record();
    producer.wait(consumed);  // the next round's producer must not overwrite `mid` early
    std::vector<std::uint32_t> host(n(), poison<std::uint32_t>());
    consumer.copy(out, host);
    consumer.finish();
    EXPECT_TRUE(elements_equal(host, produced(n(), round, rounds(), 0xffffffffu)));
  }
}

TEST_P(QueueTest, AsyncCopyOnOneQueueWhileKernelRunsOnAnother) {
  kiln::queue copier(dev()), computer(dev());
  const std::uint64_t m = size_for(1 << 20, 1 << 26);
  kiln::pinned_buffer<float> up(dev(), m), down(dev(), m);
  const auto values = random_values<float>(m, 5);
  std::copy(values.begin(), values.end(), up.begin());
  std::fill(down.begin(), down.end(), poison<float>());
  kiln::buffer<float> staging(dev(), m);
  kiln::buffer<std::uint32_t> out(dev(), n());
  out.fill(poison<std::uint32_t>());

  produce().launch(computer, kiln::range(n()), out, 99u, rounds());
  copier.copy(up, staging);
  copier.copy(staging, down);
  copier.finish();
  computer.finish();
  EXPECT_TRUE(elements_equal(std::vector<float>(down.begin(), down.end()), values));
  EXPECT_TRUE(elements_equal(out.to_vector(), produced(n(), 99u, rounds())));
}

TEST_P(QueueTest, EventElapsedTimeIsPositiveFiniteAndOrdered) {
  kiln::queue q(dev());
  kiln::buffer<std::uint32_t> out(dev(), n());
  const kiln::event start = q.record();
  produce().launch(q, kiln::range(n()), out, 3u, rounds());
  const kiln::event middle = q.record();
  produce().launch(q, kiln::range(n()), out, 4u, rounds());
  const kiln::event stop = q.record();
  stop.wait();
  const float first = kiln::elapsed_ms(start, middle), second = kiln::elapsed_ms(middle, stop);
  const float total = kiln::elapsed_ms(start, stop);
  for (float ms : {first, second, total}) {
    EXPECT_TRUE(std::isfinite(ms)) << ms;
    EXPECT_GT(ms, 0.0f);
  }
  EXPECT_LT(kiln::elapsed_ms(stop, start), 0.0f) << "stop was recorded after start";
  // The parts add up to the whole (event resolution is about a microsecond).
  EXPECT_NEAR(first + second, total, 0.01 + total * 1e-3);
}

// Timing an event that has not completed is the caller's mistake (invalid_argument) on every
// backend. Skips when the kernel happens to finish before the query.
TEST_P(QueueTest, ElapsedTimeOfPendingEventIsInvalidArgument) {
  kiln::queue q(dev());
  kiln::buffer<std::uint32_t> out(dev(), n());
  const kiln::event start = q.record();
  produce().launch(q, kiln::range(n()), out, 3u, rounds() * 5);
  const kiln::event stop = q.record();
  try {
    const float ms = kiln::elapsed_ms(start, stop);
    q.finish();
    GTEST_SKIP() << "the kernel finished before the query (" << ms << " ms)";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("not completed"));
  } catch (const kiln::error& e) {
    ADD_FAILURE() << "expected kiln::invalid_argument, got kiln::" << kiln::to_string(e.category())
                  << ": " << e.what();
  }
  q.finish();
}

TEST_P(QueueTest, EventDoneAfterWait) {
  kiln::queue q(dev());
  kiln::buffer<std::uint32_t> out(dev(), n());
  produce().launch(q, kiln::range(n()), out, 5u, rounds());
  const kiln::event e = q.record();
  e.wait();
  EXPECT_TRUE(e.done());
  // An event recorded on a queue that has finished everything completes too.
  q.finish();
  const kiln::event idle = q.record();
  q.finish();
  EXPECT_TRUE(idle.done());
}

// kiln::idle(q) polls without waiting: false while work queued on the queue cannot have run
// (it waits for an event that is still pending after the poll), true once the queue finished.
TEST_P(QueueTest, IdleIsFalseWhileWorkIsPendingAndTrueAfterFinish) {
  kiln::queue producer(dev()), q(dev());
  // OpenCL can tell only through a marker event, which PoCL completes after the call returns:
  // there false means "maybe busy" (include/kiln/queue_poll.hpp), and only false is checked.
  const bool exact = dev().backend() != "opencl";
  if (exact) {
    EXPECT_TRUE(kiln::idle(q)) << "a new queue has nothing queued";
  }
  kiln::buffer<std::uint32_t> a(dev(), n()), b(dev(), n());
  produce().launch(producer, kiln::range(n()), a, 6u, rounds() * 5);
  const kiln::event gate = producer.record();
  q.wait(gate);
  consume().launch(q, kiln::range(n()), b, a, 9u);
  const bool was_idle = kiln::idle(q);
  if (gate.done()) {
    q.finish();
    GTEST_SKIP() << "the producer finished before the poll could see q's work pending";
  }
  EXPECT_FALSE(was_idle) << "q's kernel waits for an event that was still pending after the poll";
  q.finish();
  if (exact) {
    EXPECT_TRUE(kiln::idle(q));
  }
  EXPECT_TRUE(elements_equal(b.to_vector(), produced(n(), 6u, rounds() * 5, 9u)));
  producer.finish();
  if (exact) {
    EXPECT_TRUE(kiln::idle(producer));
  }
}

// After device.synchronize(), everything queued on any of its queues has finished: events
// report done and pinned host memory written by async copies holds the results.
TEST_P(QueueTest, DeviceSynchronizeFinishesEveryQueue) {
  kiln::queue q1(dev()), q2(dev());
  kiln::buffer<std::uint32_t> a(dev(), n()), b(dev(), n());
  kiln::pinned_buffer<std::uint32_t> ha(dev(), n()), hb(dev(), n());
  std::fill(ha.begin(), ha.end(), poison<std::uint32_t>());
  std::fill(hb.begin(), hb.end(), poison<std::uint32_t>());
  produce().launch(q1, kiln::range(n()), a, 11u, rounds());
  q1.copy(a, ha);
  const kiln::event e1 = q1.record();
  produce().launch(q2, kiln::range(n()), b, 12u, rounds());
  q2.copy(b, hb);
  const kiln::event e2 = q2.record();
  dev().synchronize();
  EXPECT_TRUE(e1.done());
  EXPECT_TRUE(e2.done());
  EXPECT_TRUE(elements_equal(std::vector<std::uint32_t>(ha.begin(), ha.end()),
                             produced(n(), 11u, rounds())));
  EXPECT_TRUE(elements_equal(std::vector<std::uint32_t>(hb.begin(), hb.end()),
                             produced(n(), 12u, rounds())));
}

// Documented in buffer.hpp: synchronous reads first wait for every queue that used the buffer.
TEST_P(QueueTest, SynchronousReadWaitsForQueuesThatUsedTheBuffer) {
  kiln::queue q(dev());
  kiln::buffer<std::uint32_t> out(dev(), n());
  out.fill(poison<std::uint32_t>());
  produce().launch(q, kiln::range(n()), out, 13u, rounds());
  EXPECT_TRUE(elements_equal(out.to_vector(), produced(n(), 13u, rounds())));  // no q.finish()
}

TEST_P(QueueTest, NativeHandleIsTheQueuesOwnDriverObject) {
  kiln::queue a(dev()), b(dev());
  if (dev().backend() == "cpu") {
    EXPECT_THROW(kiln::native_handle(a), kiln::unsupported);
    return;
  }
  // A CUstream / cl_command_queue per queue: the same one each time, another for another queue.
  void* ha = kiln::native_handle(a);
  ASSERT_NE(ha, nullptr);
  EXPECT_EQ(kiln::native_handle(a), ha);
  EXPECT_NE(kiln::native_handle(b), ha);
  EXPECT_NE(kiln::native_handle(dev().default_queue()), nullptr);
  // Work on the queue still runs in order after the handle was taken.
  kiln::buffer<std::uint32_t> out(dev(), n());
  produce().launch(a, kiln::range(n()), out, 3u, 10u);
  std::vector<std::uint32_t> host(n(), poison<std::uint32_t>());
  a.copy(out, host);
  a.finish();
  EXPECT_TRUE(elements_equal(host, produced(n(), 3u, 10u)));
}

TEST(QueueNativeHandle, EmptyQueueIsInvalidArgument) {
  kiln::queue moved(kiln::device::host());
  kiln::queue taken(std::move(moved));
  EXPECT_THROW(kiln::native_handle(moved),
               kiln::invalid_argument);  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace conformance
