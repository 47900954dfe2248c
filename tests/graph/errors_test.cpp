// Error strategies on every device: stop, continue with independent stages, retry a task on a
// fallback device; failures injected at the plugin boundary and thrown by host functions. Each
// graph uses one queue, so which stages run after a failure does not depend on timing.
#include <stdexcept>

#include "graph/graph_fixture.hpp"

namespace graph_test {
namespace {

using kiln::stage_state;
using kiln::testing::fault;

class ErrorsTest : public GraphTest {
 protected:
  // a -> b (fails) -> c; a -> d; (c, d) -> e, all on one queue in that order.
  void build(kiln::graph& g, kiln::buffer<float>& buf, bool inject_in_b) {
    const std::size_t n = buf.size();
    g.launch("a", {}, k("plus"), kiln::range(n), buf, 1.0f);
    if (inject_in_b)
      g.launch("b", {"a"}, k("plus"), kiln::range(n), buf, 2.0f);
    else
      g.host("b", {"a"}, [] { throw std::runtime_error("b broke"); });
    g.launch("c", {"b"}, k("plus"), kiln::range(n), buf, 4.0f)
        .launch("d", {"a"}, k("plus"), kiln::range(n), buf, 8.0f)
        .launch("e", {"c", "d"}, k("plus"), kiln::range(n), buf, 16.0f);
  }
  static kiln::graph_options one_queue(kiln::on_error e) {
    return {.name = "strategies", .errors = e, .max_queues = 1};
  }
  // The graph_error a run raises, or nothing when it succeeds.
  static std::optional<kiln::graph_error> run_failing(kiln::graph& g) {
    try {
      g.run();
    } catch (const kiln::graph_error& e) {
      return e;
    }
    return std::nullopt;
  }
  static std::vector<float> plus(std::vector<float> v, float c) {
    for (float& x : v) x += c;
    return v;
  }
};
KILN_INSTANTIATE_GRAPH_PER_DEVICE(ErrorsTest);

TEST_P(ErrorsTest, StopRunsNothingAfterTheFirstFailureAndNamesTheStage) {
  const auto x = random(256, 1);
  kiln::buffer<float> buf(dev(), x);
  kiln::graph g(dev(), one_queue(kiln::on_error::stop));
  build(g, buf, false);
  {
    const auto e = run_failing(g);
    ASSERT_TRUE(e) << "the run succeeded";
    EXPECT_EQ(e->stage(), "b");
    EXPECT_THAT(e->what(), ::testing::HasSubstr("stage 'b'"));
    EXPECT_THAT(e->what(), ::testing::HasSubstr("b broke"));
    EXPECT_EQ(e->category(), kiln::error_category::backend_failure);
    EXPECT_THROW(std::rethrow_exception(e->cause()), std::runtime_error);
    const kiln::graph_summary& r = e->report();
    EXPECT_EQ(r.find("a")->state, stage_state::ran);
    EXPECT_EQ(r.find("b")->state, stage_state::failed);
    EXPECT_EQ(r.find("c")->state, stage_state::skipped);
    EXPECT_EQ(r.find("d")->state, stage_state::skipped);
    EXPECT_EQ(r.find("e")->state, stage_state::skipped);
  }
  EXPECT_TRUE(conformance::elements_equal(buf.to_vector(), plus(x, 1.0f)));
}

TEST_P(ErrorsTest, ContinueIndependentRunsWhatDoesNotDependOnTheFailure) {
  const auto x = random(256, 2);
  kiln::buffer<float> buf(dev(), x);
  kiln::graph g(dev(), one_queue(kiln::on_error::continue_independent));
  build(g, buf, false);
  {
    const auto e = run_failing(g);
    ASSERT_TRUE(e) << "the run succeeded";
    EXPECT_EQ(e->stage(), "b");
    EXPECT_THAT(e->what(), ::testing::HasSubstr("2 stage(s) skipped"));
    const kiln::graph_summary& r = e->report();
    EXPECT_EQ(r.find("d")->state, stage_state::ran);
    EXPECT_EQ(r.find("c")->state, stage_state::skipped);
    EXPECT_EQ(r.find("e")->state, stage_state::skipped);
    EXPECT_EQ(r.count(stage_state::failed), 1u);
  }
  EXPECT_TRUE(conformance::elements_equal(buf.to_vector(), plus(plus(x, 1.0f), 8.0f)));
  EXPECT_EQ(g.summary().find("b")->failures, 1u);
}

TEST_P(ErrorsTest, AnInjectedLaunchFailureNamesTheStageAndTheNextRunWorks) {
  const auto x = random(256, 3);
  kiln::buffer<float> buf(dev(), x);
  kiln::graph g(dev(), one_queue(kiln::on_error::stop));
  build(g, buf, true);
  kiln::testing::inject_fault(dev(), fault::launch, 2);  // "a" is the first launch: it fails
  {
    const auto e = run_failing(g);
    ASSERT_TRUE(e) << "the run succeeded";
    EXPECT_EQ(e->stage(), "a");
    EXPECT_EQ(e->category(), kiln::error_category::backend_failure);
    EXPECT_THAT(e->what(), ::testing::HasSubstr("injected"));
    EXPECT_EQ(e->report().count(stage_state::skipped), 4u);
  }
  kiln::testing::clear_faults();
  EXPECT_TRUE(conformance::elements_equal(buf.to_vector(), x));  // nothing ran
  g.run();
  const auto want = plus(plus(plus(plus(plus(x, 1.0f), 2.0f), 4.0f), 8.0f), 16.0f);
  EXPECT_TRUE(conformance::elements_equal(buf.to_vector(), want));
}

TEST_P(ErrorsTest, RetryOnFallbackRunsAFailedTaskOnTheNextDevice) {
  auto to = other();
  if (!to) GTEST_SKIP() << "one device only: no fallback device to move to";
  const std::size_t n = 300;
  const auto x = random(n, 4);
  std::vector<float> result(n, conformance::poison<float>());
  std::vector<std::string> ran_on;
  kiln::graph g(dev(), {.name = "retry",
                        .errors = kiln::on_error::retry_on_fallback,
                        .fallback = kiln::fallback{dev(), *to}});
  // Device-neutral work: everything it needs is made on the queue's device.
  g.task("triple", {}, [&](kiln::queue& q) {
    ran_on.push_back(q.get_device().id());
    kiln::buffer<float> in(q.get_device(), x), out(q.get_device(), n);
    conformance::compile(q.get_device(), kernels)
        .get_kernel("scale")
        .launch(q, kiln::range(n), out, in, 3.0f);
    q.copy(out, result);
    q.finish();
  });
  const auto moves = kiln::fallback::moves_made();
  kiln::testing::inject_fault(dev(), fault::launch, 1);
  const kiln::graph_summary& s = g.run();
  EXPECT_EQ(ran_on, (std::vector<std::string>{dev().id(), to->id()}));
  EXPECT_EQ(s.find("triple")->state, stage_state::ran);
  EXPECT_EQ(s.find("triple")->device, to->id());
  EXPECT_EQ(kiln::fallback::moves_made(), moves + 1);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = x[i] * 3.0f;
  EXPECT_TRUE(conformance::elements_equal(result, want));
}

TEST_P(ErrorsTest, RetryOnFallbackNeverMovesTheCallersMistakes) {
  auto to = other();
  if (!to) GTEST_SKIP() << "one device only: no fallback device to move to";
  int tries = 0;
  kiln::graph g(
      dev(), {.errors = kiln::on_error::retry_on_fallback, .fallback = kiln::fallback{dev(), *to}});
  g.task("wrong", {}, [&](kiln::queue&) {
    ++tries;
    throw kiln::invalid_argument("a bad size");
  });
  {
    const auto e = run_failing(g);
    ASSERT_TRUE(e) << "the run succeeded";
    EXPECT_EQ(e->category(), kiln::error_category::invalid_argument);
    EXPECT_THROW(std::rethrow_exception(e->cause()), kiln::invalid_argument);
  }
  EXPECT_EQ(tries, 1);
}

TEST_P(ErrorsTest, ALostDeviceFailsTheStageThenRefusesTheGraphUntilReset) {
  try {
    dev().reset();
  } catch (const kiln::unsupported& e) {
    GTEST_SKIP() << dev().id() << " cannot be reset: " << e.what();
  }
  const auto x = random(128, 5);
  kiln::buffer<float> buf(dev(), x);
  kiln::graph g(dev(), {.name = "lossy"});
  // The fixture's program predates the reset above: compile again.
  g.launch("bump", {}, conformance::compile(dev(), kernels).get_kernel("plus"),
           kiln::range(x.size()), buf, 1.0f);
  kiln::testing::inject_fault(dev(), fault::device_lost, 1);
  {
    const auto e = run_failing(g);
    ASSERT_TRUE(e) << "the run succeeded";
    EXPECT_EQ(e->category(), kiln::error_category::device_lost);
    EXPECT_EQ(e->stage(), "bump");
  }
  try {
    g.run();
    FAIL() << "a graph on a lost device ran";
  } catch (const kiln::device_lost& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("lossy"));
  }
  dev().reset();
  // The stage's buffer died with the reset: the stage says so, by name.
  {
    const auto e = run_failing(g);
    ASSERT_TRUE(e) << "a stage holding a buffer from before the reset ran";
    EXPECT_EQ(e->category(), kiln::error_category::device_lost);
    EXPECT_EQ(e->stage(), "bump");
  }
}

}  // namespace
}  // namespace graph_test
