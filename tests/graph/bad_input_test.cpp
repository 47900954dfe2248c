// Bad graphs get a kiln::invalid_argument naming the stage, never a crash: cycles, unknown and
// duplicate names, foreign devices, wrong argument types, empty graphs and handles.
#include "graph/graph_fixture.hpp"

namespace graph_test {
namespace {

using ::testing::HasSubstr;

class BadInputTest : public GraphTest {
 protected:
  // Runs f, expecting kiln::invalid_argument whose message holds every piece of `parts`.
  template <class F>
  void expect_invalid(F f, std::initializer_list<std::string> parts) {
    try {
      f();
      ADD_FAILURE() << "no exception";
    } catch (const kiln::invalid_argument& e) {
      for (const std::string& p : parts) EXPECT_THAT(e.what(), HasSubstr(p));
    }
  }
};
KILN_INSTANTIATE_GRAPH_PER_DEVICE(BadInputTest);

TEST_P(BadInputTest, ACycleIsRefusedNamingItsStages) {
  kiln::graph g(dev(), {.name = "loop"});
  g.host("a", {"c"}, [] {}).host("b", {"a"}, [] {}).host("c", {"b"}, [] {}).host("x", {}, [] {});
  expect_invalid([&] { g.instantiate(); }, {"graph 'loop'", "cycle", "'a'", "c <- b <- a"});
  expect_invalid([&] { g.run(); }, {"cycle"});
  expect_invalid([&] { g.host("self", {"self"}, [] {}); }, {"'self'", "waits for itself"});
}

TEST_P(BadInputTest, UnknownAndDuplicateNamesAreRefused) {
  kiln::graph g(dev());
  g.host("a", {}, [] {}).host("b", {"a", "nowhere"}, [] {});
  expect_invalid([&] { g.run(); }, {"stage 'b'", "'nowhere'", "not a stage"});
  expect_invalid([&] { g.host("a", {}, [] {}); }, {"stage 'a'", "exists already"});
  expect_invalid([&] { g.host("", {}, [] {}); }, {"needs a name"});
  EXPECT_EQ(g.size(), 2u);  // the refused stages were not added
}

TEST_P(BadInputTest, AnEmptyGraphAndEmptyHandlesAreRefused) {
  kiln::graph g(dev(), {.name = "nothing"});
  expect_invalid([&] { g.run(); }, {"'nothing'", "no stages"});
  expect_invalid([&] { g.instantiate(); }, {"no stages"});
  kiln::graph moved = std::move(g);
  expect_invalid([&] { g.run(); }, {"graph::run", "empty"});                  // NOLINT: moved from
  expect_invalid([&] { g.host("h", {}, [] {}); }, {"graph::host", "empty"});  // NOLINT
  expect_invalid([&] { moved.task("t", {}, nullptr); }, {"no work"});
  expect_invalid([&] { moved.host("h", {}, nullptr); }, {"no function"});
  expect_invalid([&] { kiln::graph(dev(), {.errors = kiln::on_error::retry_on_fallback}); },
                 {"needs graph_options::fallback"});
}

TEST_P(BadInputTest, KernelStagesAreCheckedWhenAdded) {
  kiln::buffer<float> f(dev(), 16);
  kiln::buffer<int> i(dev(), 16);
  kiln::graph g(dev());
  expect_invalid([&] { g.launch("few", {}, k("scale"), kiln::range(16), f, f); },
                 {"stage 'few'", "takes 3 arguments, 2 were given"});
  expect_invalid([&] { g.launch("type", {}, k("scale"), kiln::range(16), f, i, 2.0f); },
                 {"stage 'type'", "argument 1", "const float*", "a buffer of int32_t"});
  expect_invalid([&] { g.launch("scalar", {}, k("scale"), kiln::range(16), f, f, 2.0); },
                 {"stage 'scalar'", "argument 2", "a scalar of double"});
  EXPECT_EQ(g.size(), 0u);
}

TEST_P(BadInputTest, SetChecksTheStageTheIndexAndTheType) {
  kiln::buffer<float> f(dev(), 16);
  kiln::buffer<int> i(dev(), 16);
  kiln::graph g(dev());
  g.launch("scale", {}, k("scale"), kiln::range(16), f, f, 2.0f).host("h", {"scale"}, [] {});
  expect_invalid([&] { g.set("missing", 0, 1.0f); }, {"no stage 'missing'"});
  expect_invalid([&] { g.set("h", 0, 1.0f); }, {"stage 'h'", "host stage has no arguments"});
  expect_invalid([&] { g.set("scale", 3, 1.0f); }, {"stage 'scale'", "argument 3 is out of range"});
  expect_invalid([&] { g.set("scale", 2, 1); }, {"stage 'scale'", "argument 2", "int32_t"});
  expect_invalid([&] { g.set("scale", 2, f); }, {"stage 'scale'", "a buffer of"});
  expect_invalid([&] { g.set("scale", 0, i); }, {"stage 'scale'", "argument 0"});
  g.run();  // still intact
}

TEST_P(BadInputTest, StagesOnAForeignDeviceAreRefused) {
  auto to = other();
  if (!to) GTEST_SKIP() << "one device only: nothing is foreign";
  kiln::buffer<float> here(dev(), 16), there(*to, 16);
  kiln::kernel foreign = conformance::compile(*to, kernels).get_kernel("plus");
  kiln::graph g(dev());
  expect_invalid([&] { g.launch("k", {}, foreign, kiln::range(16), there, 1.0f); },
                 {"stage 'k'", "compiled for " + to->id(), "runs on " + dev().id()});
  expect_invalid([&] { g.launch("b", {}, k("plus"), kiln::range(16), there, 1.0f); },
                 {"stage 'b'", "lives on " + to->id()});
  expect_invalid([&] { g.copy("c", {}, here, there); }, {"stage 'c'", "lives on " + to->id()});
  g.launch("ok", {}, k("plus"), kiln::range(16), here, 1.0f);
  expect_invalid([&] { g.set("ok", 0, there); }, {"stage 'ok'", "lives on " + to->id()});
  EXPECT_EQ(g.size(), 1u);
}

}  // namespace
}  // namespace graph_test
