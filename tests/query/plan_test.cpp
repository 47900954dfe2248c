// Planning: segments, where materialisation happens, how later segments refer to earlier
// ones, and the structural keys of their programs. Planning launches and compiles nothing.
#include "query/plan.hpp"

#include <gtest/gtest.h>

#include <kiln/kiln.hpp>

#include "runtime/generated_kernels.hpp"

namespace {
using namespace kiln::placeholders;
using namespace kiln::detail::q;

struct QueryPlan : ::testing::Test {
  kiln::device cpu = kiln::device::get("cpu");
  kiln::buffer<float> xs{cpu, 16};
};

TEST_F(QueryPlan, OneSegmentWithoutPositionsAfterAFilter) {
  auto q = xs | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1.f) | kiln::transform(_1 + 1.f);
  const auto before = kiln::detail::generated_stats();
  const std::vector<segment> p = plan(q.desc(), segment_end::reduce, false, true);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0].after, -1);
  EXPECT_EQ(p[0].end, segment_end::reduce);
  EXPECT_FALSE(p[0].materialise);
  EXPECT_EQ(p[0].stages.size(), 3u);
  const auto after = kiln::detail::generated_stats();
  EXPECT_EQ(before.hits + before.misses, after.hits + after.misses);  // nothing looked up
}

// A group stage cuts the query: the first segment writes the key and each distinct aggregated
// value once (sum and max of _2 share a column, so the sort carries one value), the next reads
// (key, aggregates...).
TEST_F(QueryPlan, GroupByWritesEachAggregatedValueOnce) {
  kiln::buffer<std::int32_t> ks{cpu, 16};
  auto q = kiln::zip(ks, xs) | kiln::group_by(_1) |
           kiln::aggregate(kiln::agg::sum(_2), kiln::agg::max(_2), kiln::agg::count(),
                           kiln::agg::mean(_2 * 2.f));
  const std::vector<segment> p = plan(q.desc(), segment_end::collect, false, false);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].materialise);
  EXPECT_EQ(p[0].out_vars.size(), 3u);  // key, _2, _2 * 2
  EXPECT_TRUE(p[1].sort.on);
  ASSERT_TRUE(p[1].group.on);
  ASSERT_EQ(p[1].group.columns.size(), 4u);
  EXPECT_EQ(p[1].group.columns[0].input, 1);
  EXPECT_EQ(p[1].group.columns[1].input, 1);
  EXPECT_EQ(p[1].group.columns[2].input, -1);
  EXPECT_EQ(p[1].group.columns[3].input, 2);
  EXPECT_EQ(p[1].inputs.size(), 5u);  // key and four aggregates
  // reduce_by_key takes runs as they come: no sort.
  auto r = kiln::zip(ks, xs) | kiln::reduce_by_key(_1, kiln::agg::sum(_2));
  const std::vector<segment> pr = plan(r.desc(), segment_end::collect, false, false);
  ASSERT_EQ(pr.size(), 2u);
  EXPECT_FALSE(pr[1].sort.on);
  EXPECT_TRUE(pr[1].group.on);
}

TEST_F(QueryPlan, PositionsAfterAFilterMaterialise) {
  auto q = xs | kiln::filter(_1 > 1.f) | kiln::take(3) | kiln::skip(1) | kiln::enumerate() |
           kiln::transform(kiln::cast<float>(_1) + _2);
  const std::vector<segment> p = plan(q.desc(), segment_end::collect, false, false);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_TRUE(p[0].materialise);
  EXPECT_TRUE(p[0].has_filter());
  EXPECT_EQ(p[0].end, segment_end::collect);
  // The second reads the first's outputs; its length is the survivor count, sliced at run time.
  EXPECT_EQ(p[1].after, 0);
  ASSERT_EQ(p[1].inputs.size(), 1u);
  EXPECT_EQ(p[1].inputs[0].component, 0);
  EXPECT_EQ(p[1].inputs[0].var, p[0].out_vars[0]);
  ASSERT_EQ(p[1].slices.size(), 2u);
  EXPECT_EQ(p[1].slices[0].kind, stage_kind::take);
  EXPECT_EQ(p[1].slices[0].count, 3u);
  EXPECT_EQ(p[1].slices[1].kind, stage_kind::skip);
  EXPECT_FALSE(p[1].materialise);
}

TEST_F(QueryPlan, ArgminAfterAFilterAndReductionsAfterAScan) {
  auto f = xs | kiln::filter(_1 > 1.f);
  EXPECT_EQ(plan(f.desc(), segment_end::reduce, true, true).size(), 2u);
  EXPECT_EQ(plan(f.desc(), segment_end::reduce, false, true).size(), 1u);
  auto s = xs | kiln::inclusive_scan();
  const auto p = plan(s.desc(), segment_end::reduce, false, true);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].end, segment_end::scan);
  EXPECT_EQ(p[1].end, segment_end::reduce);
}

TEST_F(QueryPlan, KeysIgnoreCaptureValues) {
  auto a = xs | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1.f);
  auto b = xs | kiln::transform(_1 * 5.f) | kiln::filter(_1 > -3.f);
  auto c = xs | kiln::transform(_1 * 2.f) | kiln::filter(_1 < 1.f);
  const reduce_spec sum{reduce_kind::sum, kiln::scalar_type::f32};
  const reduce_spec max{reduce_kind::max, kiln::scalar_type::f32};
  const auto key = [&](auto& q, const reduce_spec* r, bool gpu, const char* target = "cpp") {
    const auto p = plan(q.desc(), segment_end::reduce, false, true);
    return segment_key(p.back(), q.desc(), r, gpu, target);
  };
  EXPECT_EQ(key(a, &sum, false), key(b, &sum, false));
  EXPECT_NE(key(a, &sum, false), key(c, &sum, false));
  EXPECT_NE(key(a, &sum, false), key(a, &sum, true));
  EXPECT_NE(key(a, &sum, true, "cuda"), key(a, &sum, true, "opencl"));
  EXPECT_NE(key(a, &sum, false), key(a, &max, false));
}

TEST_F(QueryPlan, GeneratedKernelsAreCachedByKey) {
  int renders = 0;
  const auto render = [&] {
    ++renders;
    return kiln::detail::generated_program{
        "KILN_KERNEL void plan_test_k(KILN_GLOBAL float* x) { x[kiln_global_id(0)] = 1.f; }\n",
        {"plan_test_k"},
        {}};
  };
  const std::uint64_t key = 0x1234abcdULL;
  const auto first = kiln::detail::get_generated(cpu, "plan_test", key, render);
  const auto again = kiln::detail::get_generated(cpu, "plan_test", key, render);
  ASSERT_EQ(first.kernels.size(), 1u);
  ASSERT_EQ(again.kernels.size(), 1u);
  EXPECT_FALSE(again.compiled);
  if (!std::getenv("KILN_DUMP_KERNELS")) {
    EXPECT_EQ(renders, 1);
  }
  EXPECT_EQ(kiln::detail::generated_name("query", 0xabcULL), "query_0000000000000abc.kiln");
}

}  // namespace
