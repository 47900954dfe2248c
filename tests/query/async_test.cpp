// Asynchronous terminals (kiln::async, kiln::pending): results against std:: on random data,
// ordering with other work on the queue and across queues, errors at get()/wait(), many
// handles in flight, handles dropped without get(), and several threads at once.
#include <kiln/kiln.hpp>
#include <numeric>
#include <thread>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

class AsyncTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(AsyncTest);

// y[i] = x[i] * k, as user work queued beside the queries.
constexpr const char* scale_src = R"(
KILN_KERNEL void scale(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, float k, uint64_t n) {
  const uint64_t i = kiln_global_id(0);
  if (i < n) y[i] = x[i] * k;
})";

TEST_P(AsyncTest, ResultsMatchStd) {
  kiln::queue q(dev());
  for (std::uint64_t n : sizes()) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = data<float>(n, n + 11);
    const auto xi = data<std::int32_t>(n, n + 12);
    const auto xb = upload(dev(), x);
    const auto xib = upload(dev(), xi);
    // Everything is enqueued first, then read: several queries in flight on one queue.
    kiln::pending<float> sum = xb | kiln::transform(_1 * 2.f) | kiln::async(kiln::sum(), q);
    kiln::pending<std::uint64_t> count =
        xb | kiln::filter(_1 > 0.5f) | kiln::async(kiln::count(), q);
    kiln::pending<std::optional<std::int32_t>> mx = xib | kiln::async(kiln::max(), q);
    kiln::pending<std::int64_t> isum = xib | kiln::async(kiln::sum());  // default queue
    kiln::pending<std::vector<float>> kept = xb | kiln::filter(_1 > 0.5f) |
                                             kiln::transform(_1 + 1.f) |
                                             kiln::async(kiln::to_vector(), q);
    kiln::pending<kiln::buffer<std::int32_t>> doubled =
        xib | kiln::transform(_1 / 2) | kiln::async(kiln::to_buffer(), q);
    kiln::pending<std::optional<std::uint64_t>> amin = xib | kiln::async(kiln::argmin(), q);
    kiln::pending<std::int32_t> custom =
        xib | kiln::transform(_1 & 0xff) | kiln::async(kiln::reduce(std::int32_t{0}, _1 ^ _2), q);
    kiln::pending<std::vector<float>> taken =  // positions after a filter: two segments
        xb | kiln::filter(_1 < 0.f) | kiln::take(7) | kiln::async(kiln::to_vector(), q);

    double ref = 0, max_term = 0;
    std::uint64_t ref_count = 0;
    std::vector<float> ref_kept, ref_taken;
    for (float v : x) {
      ref += 2.0 * v;
      max_term = std::max(max_term, std::fabs(2.0 * v));
      if (v > 0.5f) ref_kept.push_back(v + 1.f), ++ref_count;
      if (v < 0.f && ref_taken.size() < 7) ref_taken.push_back(v);
    }
    std::vector<std::int32_t> ref_doubled(n);
    std::int32_t ref_xor = 0;
    for (std::uint64_t i = 0; i < n; ++i) ref_doubled[i] = xi[i] / 2, ref_xor ^= xi[i] & 0xff;

    EXPECT_NEAR(sum.get(), ref, sum_tolerance<float>(n, max_term, ref));
    EXPECT_FALSE(sum.valid());
    EXPECT_EQ(count.get(), ref_count);
    const auto got_max = mx.get();
    if (n == 0) {
      EXPECT_FALSE(got_max.has_value());
    } else {
      ASSERT_TRUE(got_max.has_value());
      EXPECT_EQ(*got_max, *std::max_element(xi.begin(), xi.end()));
    }
    EXPECT_EQ(isum.get(), ref_sum(xi));
    EXPECT_TRUE(elements_equal(kept.get(), ref_kept));
    kiln::buffer<std::int32_t> d = doubled.get();
    EXPECT_EQ(d.size(), n);
    EXPECT_TRUE(elements_equal(d.to_vector(), ref_doubled));
    const auto am = amin.get();
    if (n) {
      ASSERT_TRUE(am.has_value());
      EXPECT_EQ(*am,
                static_cast<std::uint64_t>(std::min_element(xi.begin(), xi.end()) - xi.begin()));
    }
    EXPECT_EQ(custom.get(), ref_xor);
    EXPECT_TRUE(elements_equal(taken.get(), ref_taken));
  }
}

// Work enqueued before a query is seen by it; work enqueued after it does not change its
// result (the queue orders both ways), on one queue and across queues through event().
TEST_P(AsyncTest, OrderedWithOtherQueueWork) {
  const std::uint64_t n = size_for(100003, 3000017);
  const auto a = data<float>(n, 21), b = data<float>(n, 22);
  kiln::buffer<float> xb = upload(dev(), a);
  kiln::buffer<float> yb(dev(), n);
  const kiln::kernel scale = compile(scale_src).get_kernel("scale");
  const auto ref_sum_of = [](const std::vector<float>& v, float k) {
    double s = 0;
    for (float x : v) s += double(x) * k;
    return s;
  };
  const double tol = sum_tolerance<float>(n, 300, 0) * 10;

  kiln::queue q(dev());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // A copy, then a query on the same queue: the query sees the copied data.
    q.copy(b, xb);
    auto after_copy = xb | kiln::async(kiln::sum(), q);
    // A kernel overwriting the input after the query: the query still saw b.
    scale.launch(q, kiln::range(n), xb, xb, 3.0f, n);
    auto after_kernel = xb | kiln::async(kiln::sum(), q);  // sees 3b
    // The kernel's result read by a kernel enqueued after a collect of it.
    auto collected = xb | kiln::transform(_1 * 0.5f) | kiln::async(kiln::to_vector(), q);
    scale.launch(q, kiln::range(n), yb, xb, 2.0f, n);  // y = 6b
    auto y_sum = yb | kiln::async(kiln::sum(), q);
    EXPECT_NEAR(after_copy.get(), ref_sum_of(b, 1.f), tol);
    EXPECT_NEAR(after_kernel.get(), ref_sum_of(b, 3.f), 3 * tol);
    const std::vector<float> half = collected.get();
    ASSERT_EQ(half.size(), n);
    for (std::uint64_t i = 0; i < n; i += 997) EXPECT_FLOAT_EQ(half[i], b[i] * 3.f * 0.5f);
    EXPECT_NEAR(y_sum.get(), ref_sum_of(b, 6.f), 6 * tol);
    q.copy(a, xb);
  }

  // Across queues: q2 runs a kernel over x only after the query on q finished reading it.
  kiln::queue q2(dev());
  q.copy(a, xb);
  auto before = xb | kiln::filter(_1 > 0.f) | kiln::async(kiln::to_buffer(), q);
  q2.wait(before.event());
  scale.launch(q2, kiln::range(n), xb, xb, -1.0f, n);
  // And a query on q after q2's kernel, through an event: sees -a.
  q.wait(q2.record());
  auto negated = xb | kiln::filter(_1 > 0.f) | kiln::async(kiln::count(), q);
  std::vector<float> pos;
  std::uint64_t neg = 0;
  for (float v : a) {
    if (v > 0.f) pos.push_back(v);
    neg += -v > 0.f;
  }
  EXPECT_TRUE(elements_equal(before.get().to_vector(), pos));
  EXPECT_EQ(negated.get(), neg);
}

// Errors found while enqueuing or by the device surface at wait()/get(), not at the call.
TEST_P(AsyncTest, ErrorsSurfaceAtWait) {
  kiln::queue q(dev());
  kiln::buffer<float> xb = upload(dev(), data<float>(1000, 31));
  kiln::buffer<float> gone = std::move(xb);  // xb is now empty (moved from)
  kiln::pending<float> p;
  EXPECT_NO_THROW(p = xb | kiln::async(kiln::sum(), q));
  EXPECT_TRUE(p.ready());
  EXPECT_THROW(p.wait(), kiln::invalid_argument);
  EXPECT_THROW(p.event(), kiln::invalid_argument);  // nothing was recorded
  EXPECT_THROW(p.get(), kiln::invalid_argument);
  EXPECT_FALSE(p.valid());
  EXPECT_THROW(p.get(), kiln::invalid_argument);  // no query any more

  // A queue of another device: the query's data is not there.
  for (const std::string& id : conformance::device_ids()) {
    const kiln::device other = kiln::device::get(id);
    if (other == dev()) continue;
    kiln::queue oq(other);
    auto wrong = gone | kiln::transform(_1 + 1.f) | kiln::async(kiln::to_vector(), oq);
    try {
      wrong.get();
      ADD_FAILURE() << "a query on " << dev().id() << " ran on a queue of " << id;
    } catch (const kiln::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("queue belongs to"), std::string::npos) << e.what();
    }
  }
  // The queue is still good after the failures.
  EXPECT_EQ((gone | kiln::async(kiln::count(), q)).get(), 1000u);
}

// Hundreds of handles in flight on one queue, read in reverse order; and handles dropped
// without get(): their queries still run, their result slots return, nothing leaks.
TEST_P(AsyncTest, ManyInFlightAndDroppedHandles) {
  kiln::queue q(dev());
  const std::uint64_t n = 4097;
  const auto x = data<std::int32_t>(n, 41);
  const auto xb = upload(dev(), x);
  std::vector<kiln::pending<std::int64_t>> hs;
  std::vector<std::int64_t> want;
  for (int k = 0; k < 300; ++k) {
    hs.push_back(xb | kiln::transform(_1 % (k + 2)) | kiln::async(kiln::sum(), q));
    std::int64_t s = 0;
    for (auto v : x) s += v % (k + 2);
    want.push_back(s);
    if (k % 3 == 0) {  // dropped at once, in flight
      auto dropped = xb | kiln::filter(_1 > k) | kiln::async(kiln::to_buffer(), q);
    }
  }
  for (std::size_t k = hs.size(); k-- > 0;) EXPECT_EQ(hs[k].get(), want[k]) << "k = " << k;
  for (int k = 0; k < 200; ++k) (void)(xb | kiln::async(kiln::count(), q));
  q.finish();
  EXPECT_EQ((xb | kiln::async(kiln::count())).get(), n);
  // ready() turns true without get(); wait() any number of times.
  auto h = xb | kiln::async(kiln::max(), q);
  h.wait();
  h.wait();
  EXPECT_TRUE(h.ready());
  EXPECT_EQ(h.get(), *std::max_element(x.begin(), x.end()));
}

// Several threads, each enqueuing asynchronous queries on its own queue and on the shared
// default queue, reading them in batches (run under ThreadSanitizer in CI: "Concurrent").
TEST_P(AsyncTest, ConcurrentThreads) {
  const std::uint64_t n = 2049;
  const auto x = data<float>(n, 51);
  const auto xb = upload(dev(), x);
  std::uint64_t ref_pos = 0;
  for (float v : x) ref_pos += v > 0.f;
  constexpr int threads = 4, rounds = 25;
  std::vector<std::thread> ts;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      kiln::queue q(dev());
      for (int r = 0; r < rounds; ++r) {
        const float k = static_cast<float>(t * rounds + r);
        auto c =
            xb | kiln::transform(_1 + k) | kiln::filter(_1 > k) | kiln::async(kiln::count(), q);
        auto b = xb | kiln::filter(_1 > 0.f) |
                 kiln::async(kiln::to_buffer(), r % 2 ? q : dev().default_queue());
        auto s = xb | kiln::transform(_1 * 0.f + k) | kiln::async(kiln::max());
        if (c.get() != ref_pos) failures[t]++;
        if (b.get().size() != ref_pos) failures[t]++;
        if (s.get() != std::optional<float>(k)) failures[t]++;
      }
    });
  }
  for (auto& th : ts) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

// The synchronous terminals are unchanged by plans cached per shape: a new captured value or
// take count reuses the plan and still gives its own answer.
TEST_P(AsyncTest, CachedPlansKeepCapturedValuesAndCounts) {
  const std::uint64_t n = 4097;
  const auto x = data<float>(n, 61);
  const auto xb = upload(dev(), x);
  for (int k = 0; k < 5; ++k) {
    const float t = -50.f + 20.f * static_cast<float>(k);
    const std::uint64_t take = 3 + 5 * static_cast<std::uint64_t>(k);
    std::vector<float> want;
    for (float v : x)
      if (v > t && want.size() < take) want.push_back(v * 2.f);
    EXPECT_TRUE(elements_equal(xb | kiln::filter(_1 > t) | kiln::take(take) |
                                   kiln::transform(_1 * 2.f) | kiln::to_vector(),
                               want));
    if (k > 0) {
      EXPECT_EQ(stats().programs_compiled, 0u);
    }
  }
}

}  // namespace
}  // namespace query_test
