// Replay kinds: on CUDA devices a graph of capturable stages becomes one CUDA graph, updated in
// place by set(); everywhere else, and for graphs with host stages, queues and events replay it
// and the summary says why.
#include "graph/graph_fixture.hpp"

namespace graph_test {
namespace {

class ReplayKindTest : public GraphTest {
 protected:
  bool graphs() const { return dev().backend() == "cuda"; }
};

// A macro: GTEST_SKIP returns from the function it is written in.
#define REQUIRE_CUDA_GRAPHS()                                                              \
  do {                                                                                     \
    if (!graphs())                                                                         \
      GTEST_SKIP() << dev().id() << " (" << dev().backend()                                \
                   << " backend) has no graph API: CUDA-graph replays are tested on CUDA"; \
  } while (0)
KILN_INSTANTIATE_GRAPH_PER_DEVICE(ReplayKindTest);

TEST_P(ReplayKindTest, TheSummarySaysHowTheGraphRanAndWhy) {
  kiln::buffer<float> b(dev(), random(64, 1));
  kiln::graph g(dev());
  g.launch("p", {}, k("plus"), kiln::range(64), b, 1.0f);
  g.run();
  if (graphs()) {
    EXPECT_EQ(g.kind(), kiln::replay_kind::cuda_graph) << g.summary().kind_reason;
  } else {
    EXPECT_EQ(g.kind(), kiln::replay_kind::queues);
    EXPECT_THAT(g.summary().kind_reason, ::testing::HasSubstr("no graph API"));
  }
  kiln::graph forced(dev(), {.mode = kiln::graph_mode::queues});
  forced.launch("p", {}, k("plus"), kiln::range(64), b, 1.0f);
  forced.run();
  EXPECT_EQ(forced.kind(), kiln::replay_kind::queues);
  EXPECT_THAT(forced.summary().kind_reason, ::testing::HasSubstr("graph_mode::queues"));
}

TEST_P(ReplayKindTest, ACudaGraphIsInstantiatedOnceAndUpdatedInPlaceBySet) {
  REQUIRE_CUDA_GRAPHS();
  const std::size_t n = 1 << 16;
  const auto x = random(n, 2);
  kiln::buffer<float> in(dev(), x), out = poisoned<float>(n), mid = poisoned<float>(n);
  kiln::graph g(dev());
  g.launch("scale", {}, k("scale"), kiln::range(n), mid, in, 2.0f)
      .launch("shift", {"scale"}, k("plus"), kiln::range(n), mid, 1.0f)
      .copy("out", {"shift"}, mid, out);
  for (int r = 0; r < 3; ++r) g.run();
  EXPECT_EQ(g.kind(), kiln::replay_kind::cuda_graph) << g.summary().kind_reason;
  EXPECT_EQ(g.summary().instantiations, 1u);
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = x[i] * 2.0f + 1.0f;
  EXPECT_TRUE(conformance::elements_equal(out.to_vector(), want));
  g.set("scale", 2, -3.0f);
  g.run();
  EXPECT_EQ(g.summary().updates, 1u);
  EXPECT_EQ(g.summary().instantiations, 1u);
  for (std::size_t i = 0; i < n; ++i) want[i] = x[i] * -3.0f + 1.0f;
  EXPECT_TRUE(conformance::elements_equal(out.to_vector(), want));
  EXPECT_EQ(g.summary().find("scale")->launches, 1u);
  EXPECT_EQ(g.summary().find("scale")->runs, 4u);
}

TEST_P(ReplayKindTest, AGraphWithAHostStageIsReplayedThroughQueuesOnCuda) {
  REQUIRE_CUDA_GRAPHS();
  kiln::buffer<float> b(dev(), random(64, 3));
  int calls = 0;
  kiln::graph g(dev());
  g.launch("p", {}, k("plus"), kiln::range(64), b, 1.0f).host("h", {"p"}, [&] { ++calls; });
  g.run();
  EXPECT_EQ(g.kind(), kiln::replay_kind::queues);
  EXPECT_THAT(g.summary().kind_reason, ::testing::HasSubstr("stage 'h' (host)"));
  EXPECT_EQ(calls, 1);
}

TEST_P(ReplayKindTest, ACapturableTaskIsCapturedWithTheKernels) {
  REQUIRE_CUDA_GRAPHS();
  const std::size_t n = 4096;
  const auto x = random(n, 4);
  kiln::buffer<float> a(dev(), x), b(dev(), x), out = poisoned<float>(n);
  kiln::graph g(dev(), {.max_queues = 2});
  g.launch("left", {}, k("plus"), kiln::range(n), a, 1.0f)
      .task("right", {}, [&](kiln::queue& q) { k("scale").launch(q, kiln::range(n), b, b, 2.0f); },
            {.capturable = true})
      .launch("join", {"left", "right"}, k("add"), kiln::range(n), out, a, b);
  g.run();
  EXPECT_EQ(g.kind(), kiln::replay_kind::cuda_graph) << g.summary().kind_reason;
  std::vector<float> want(n);
  for (std::size_t i = 0; i < n; ++i) want[i] = (x[i] + 1.0f) + x[i] * 2.0f;
  EXPECT_TRUE(conformance::elements_equal(out.to_vector(), want));
}

}  // namespace
}  // namespace graph_test
