// DAG semantics on every device: results of a fork/join pipeline against a host reference,
// ordering across queues, concurrency of independent stages, replays and argument updates.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>

#include "graph/graph_fixture.hpp"

namespace graph_test {
namespace {

class DagTest : public GraphTest {};
KILN_INSTANTIATE_GRAPH_PER_DEVICE(DagTest);

// upload -> (twice, thrice) -> merge -> download, replayed on new input data.
TEST_P(DagTest, ForkJoinPipelineMatchesTheHostReferenceOnEveryReplay) {
  const std::size_t n = size_for(4096, 1 << 20);
  std::vector<float> in_host = random(n, 1), out_host(n, conformance::poison<float>());
  kiln::buffer<float> in = poisoned<float>(n), a = poisoned<float>(n), b = poisoned<float>(n),
                      out = poisoned<float>(n);
  kiln::graph g(dev(), {.name = "fork_join"});
  g.copy("upload", {}, in_host, in)
      .launch("twice", {"upload"}, k("scale"), kiln::range(n), a, in, 2.0f)
      .launch("thrice", {"upload"}, k("scale"), kiln::range(n), b, in, 3.0f)
      .launch("merge", {"twice", "thrice"}, k("add"), kiln::range(n), out, a, b)
      .copy("download", {"merge"}, out, out_host);
  for (std::uint64_t seed : {2u, 3u}) {
    const auto fresh = random(n, seed);
    std::copy(fresh.begin(), fresh.end(), in_host.begin());  // in place: the graph reads it there
    std::fill(out_host.begin(), out_host.end(), conformance::poison<float>());
    g.run();
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = in_host[i] * 2.0f + in_host[i] * 3.0f;
    EXPECT_TRUE(conformance::elements_equal(out_host, want)) << "seed " << seed;
  }
  EXPECT_EQ(g.summary().replays, 2u);
  EXPECT_EQ(g.summary().count(kiln::stage_state::ran), 5u);
}

// The slow producer and the consumer sit on different queues: the consumer reads poison
// unless the dependency became a wait on the producer's event.
TEST_P(DagTest, ADependencyOnAnotherQueueIsWaitedFor) {
  const std::size_t n = size_for(1024, 1 << 20);
  const std::uint32_t rounds = is_gpu() ? 20000 : 2000;
  kiln::buffer<std::uint32_t> slow = poisoned<std::uint32_t>(n), fast = poisoned<std::uint32_t>(n),
                              out = poisoned<std::uint32_t>(n);
  kiln::graph g(dev());
  g.launch("slow", {}, k("produce"), kiln::range(n), slow, 7u, rounds)
      .launch("fast", {}, k("produce"), kiln::range(n), fast, 9u, 1u)
      .launch("mix", {"fast", "slow"}, k("blend"), kiln::range(n), out, slow, fast);
  g.run();
  const auto s = produced(n, 7, rounds), f = produced(n, 9, 1);
  std::vector<std::uint32_t> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = s[i] ^ (f[i] * 3u);
  EXPECT_TRUE(conformance::elements_equal(out.to_vector(), want));
}

// Two host stages without dependencies wait for each other: the run finishes only if both
// are running at once. The timeout turns a serialised run into a failure, not a hang.
TEST_P(DagTest, IndependentStagesRunAtTheSameTime) {
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  bool timed_out = false;
  auto rendezvous = [&] {
    std::unique_lock lock(mu);
    ++arrived;
    cv.notify_all();
    if (!cv.wait_for(lock, std::chrono::seconds(10), [&] { return arrived >= 2; }))
      timed_out = true;
  };
  std::atomic<int> after_both{0};
  kiln::graph g(dev(), {.name = "rendezvous"});
  g.host("left", {}, rendezvous).host("right", {}, rendezvous).host("join", {"left", "right"}, [&] {
    std::lock_guard lock(mu);
    after_both = arrived;
  });
  g.run();
  EXPECT_FALSE(timed_out) << "the two independent stages did not run concurrently";
  EXPECT_EQ(after_both.load(), 2) << "the join ran before both of its dependencies";
}

// A host stage runs after the device work it depends on has finished, not merely queued.
TEST_P(DagTest, AHostStageSeesTheResultsOfItsDependencies) {
  const std::size_t n = size_for(2048, 1 << 20);
  const auto x = random(n, 4);
  kiln::buffer<float> in(dev(), x), out = poisoned<float>(n);
  std::vector<float> back(n, conformance::poison<float>());
  std::vector<float> seen;
  kiln::graph g(dev());
  g.launch("scale", {}, k("scale"), kiln::range(n), out, in, -1.5f)
      .copy("download", {"scale"}, out, back)
      .host("check", {"download"}, [&] { seen = back; });
  g.run();
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = x[i] * -1.5f;
  EXPECT_TRUE(conformance::elements_equal(seen, want));
}

TEST_P(DagTest, SetChangesScalarsAndBuffersFromTheNextReplay) {
  const std::size_t n = size_for(1024, 1 << 18);
  const auto x = random(n, 5), y = random(n, 6);
  kiln::buffer<float> in(dev(), x), other_in(dev(), y), out = poisoned<float>(n);
  kiln::graph g(dev());
  g.launch("scale", {}, k("scale"), kiln::range(n), out, in, 2.0f);
  g.run();
  auto expect = [&](const std::vector<float>& src, float a) {
    std::vector<float> want(n);
    for (std::size_t i = 0; i < n; ++i) want[i] = src[i] * a;
    return conformance::elements_equal(out.to_vector(), want);
  };
  EXPECT_TRUE(expect(x, 2.0f));
  g.set("scale", 2, 0.5f);
  g.run();
  EXPECT_TRUE(expect(x, 0.5f));
  g.set("scale", 1, other_in);
  g.run();
  EXPECT_TRUE(expect(y, 0.5f));
}

TEST_P(DagTest, ATaskRunsItsWorkOnTheQueueItIsGivenAndEveryReplayRunsEveryStage) {
  const std::size_t n = size_for(1024, 1 << 18);
  const auto x = random(n, 8);
  kiln::buffer<float> buf(dev(), x);
  int host_runs = 0;
  kiln::graph g(dev());
  g.task("two_plus", {}, [&](kiln::queue& q) {
     EXPECT_TRUE(q.get_device() == dev());
     k("plus").launch(q, kiln::range(n), buf, 1.0f);
     k("plus").launch(q, kiln::range(n), buf, 2.0f);
   }).host("count", {"two_plus"}, [&] { ++host_runs; });
  for (int r = 0; r < 3; ++r) g.run();
  EXPECT_EQ(host_runs, 3);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = ((x[i] + 1.0f + 2.0f) + 1.0f + 2.0f) + 1.0f + 2.0f;
  EXPECT_TRUE(conformance::elements_equal(buf.to_vector(), want));
  EXPECT_EQ(g.summary().find("two_plus")->launches, 2u);
  EXPECT_EQ(g.summary().find("two_plus")->runs, 3u);
}

// Stages may name dependencies added after them; the order of addition does not matter.
TEST_P(DagTest, ForwardReferencesAreResolvedAtInstantiation) {
  const std::size_t n = 512;
  const auto x = random(n, 9);
  kiln::buffer<float> in(dev(), x), out = poisoned<float>(n);
  kiln::graph g(dev());
  g.launch("second", {"first"}, k("plus"), kiln::range(n), out, 1.0f)
      .launch("first", {}, k("scale"), kiln::range(n), out, in, 4.0f);
  g.run();
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = x[i] * 4.0f + 1.0f;
  EXPECT_TRUE(conformance::elements_equal(out.to_vector(), want));
}

// A long chain of small dependent stages (the benchmark's shape) stays correct.
TEST_P(DagTest, AHundredDependentStagesRunInOrder) {
  const std::size_t n = 256;
  const auto x = random(n, 10);
  kiln::buffer<float> buf(dev(), x);
  kiln::graph g(dev());
  std::string prev;
  for (int s = 0; s < 100; ++s) {
    std::string name = "s";  // not "s" + to_string(s): GCC 12 -O3 warns falsely (-Wrestrict)
    name += std::to_string(s);
    // x -> x + s, then alternately x * 0.5: order matters (addition and halving do not commute)
    if (s % 2)
      g.launch(name, {prev}, k("scale"), kiln::range(n), buf, buf, 0.5f);
    else
      g.launch(name, prev.empty() ? std::vector<std::string>{} : std::vector{prev}, k("plus"),
               kiln::range(n), buf, float(s));
    prev = name;
  }
  g.run();
  std::vector<float> want = x;
  for (int s = 0; s < 100; ++s)
    for (float& v : want) v = s % 2 ? v * 0.5f : v + float(s);
  EXPECT_TRUE(conformance::elements_equal(buf.to_vector(), want));
}

TEST_P(DagTest, TheSummaryHasStatesBytesLaunchesAndTimes) {
  const std::size_t n = 1000;
  std::vector<float> host = random(n, 11), back(n);
  kiln::buffer<float> in = poisoned<float>(n), out = poisoned<float>(n);
  kiln::graph g(dev(), {.name = "metrics"});
  g.copy("up", {}, host, in)
      .launch("scale", {"up"}, k("scale"), kiln::range(n), out, in, 2.0f)
      .copy("down", {"scale"}, out, back)
      .fill("clear", {"down"}, in, 1.0f)
      .host("note", {"clear"}, [] {});
  const kiln::graph_summary& s = g.run();
  EXPECT_EQ(s.graph, "metrics");
  EXPECT_EQ(s.kind, kiln::replay_kind::queues);  // a host stage: never captured
  if (dev().backend() == "cuda") {
    EXPECT_NE(s.kind_reason.find("note"), std::string::npos) << s.kind_reason;
  }
  ASSERT_EQ(s.stages.size(), 5u);
  EXPECT_EQ(s.find("up")->bytes, n * sizeof(float));
  EXPECT_EQ(s.find("down")->bytes, n * sizeof(float));
  EXPECT_EQ(s.find("clear")->bytes, n * sizeof(float));
  EXPECT_EQ(s.find("scale")->launches, 1u);
  EXPECT_EQ(s.find("up")->launches, 0u);
  for (const auto& st : s.stages) {
    EXPECT_EQ(st.state, kiln::stage_state::ran) << st.name;
    EXPECT_GE(st.last_ms, 0.0) << st.name;
    EXPECT_EQ(st.device, dev().id());
  }
  const std::string table = s.table();
  for (const char* name : {"up", "scale", "down", "clear", "note", "launches", "bytes"})
    EXPECT_NE(table.find(name), std::string::npos) << name << " missing from\n" << table;
  const std::string json = s.json();
  EXPECT_NE(json.find("\"name\":\"scale\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"bytes\":4000"), std::string::npos) << json;
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '}');
}

}  // namespace
}  // namespace graph_test
