// IR -> kernel-language C: the text must stay exactly what the string renderer it replaced
// produced (expected strings below come from that renderer), so kernels and caches are stable.
#include <gtest/gtest.h>

#include <kiln/kiln.hpp>

#include "codegen/expr_render.hpp"
#include "ir/verify.hpp"

namespace {
using namespace kiln::placeholders;
namespace q = kiln::detail::q;

struct rendered {
  std::string text;
  std::vector<std::string> helpers;
};

// Lowers e over an element of types In whose components are values v0, v1.
template <class In, class E>
rendered render(const E& e) {
  q::query_desc d;
  d.vars = {0, 1};
  const kiln::ir::node_id r = q::lower_root<In>(d, e, q::element_leaves(d), nullptr);
  EXPECT_EQ(kiln::ir::verify(d.graph), "");
  rendered out{kiln::codegen::render_expr(d.graph, r), {}};
  for (const auto& h : kiln::codegen::helpers_of(d.graph, d.graph.roots))
    out.helpers.push_back(kiln::codegen::helper_name(h));
  return out;
}

TEST(IrRender, SelectNumbersCapturesAndHelpersLastOperandFirst) {
  const auto r = render<std::tuple<int>>(kiln::select(_1 > 0, kiln::min(_1, 2), kiln::max(_1, 3)));
  EXPECT_EQ(r.text,
            "((bool)(((int32_t)(v0)) > ((int32_t)(kq_c2))) ? "
            "((int32_t)(kq_min_int32_t(((int32_t)(v0)), ((int32_t)(kq_c1))))) : "
            "((int32_t)(kq_max_int32_t(((int32_t)(v0)), ((int32_t)(kq_c0))))))");
  EXPECT_EQ(r.helpers, (std::vector<std::string>{"kq_max_int32_t", "kq_min_int32_t"}));
}

TEST(IrRender, HelpersInPreOrder) {
  const auto r = render<std::tuple<int>>(kiln::min(kiln::abs(_1), kiln::max(_1, 4)));
  EXPECT_EQ(r.text,
            "kq_min_int32_t(((int32_t)(kq_abs_int32_t(((int32_t)(v0))))), "
            "((int32_t)(kq_max_int32_t(((int32_t)(v0)), ((int32_t)(kq_c0))))))");
  EXPECT_EQ(r.helpers,
            (std::vector<std::string>{"kq_min_int32_t", "kq_abs_int32_t", "kq_max_int32_t"}));
  const auto f = render<std::tuple<float>>(kiln::clamp(_1, 0.f, 1.f) + kiln::abs(_1));
  EXPECT_EQ(f.text,
            "(((float)(kq_clamp_float(((float)(v0)), ((float)(kq_c0)), ((float)(kq_c1))))) + "
            "((float)(kq_abs_float(((float)(v0))))))");
  EXPECT_EQ(f.helpers, (std::vector<std::string>{"kq_clamp_float", "kq_abs_float"}));
}

TEST(IrRender, ShiftsLogicUnaryAndIndex) {
  const auto r = render<std::tuple<int, unsigned char>>((_1 << _2) + ~_2 - (!_1 && _2 != 0) * _i);
  EXPECT_EQ(r.text,
            "(((int64_t)((((int32_t)((((int32_t)(v0)) << (v1)))) + "
            "((int32_t)(((int32_t)(~((int32_t)(v1))))))))) - "
            "((int64_t)((((int64_t)(((bool)(!(bool)v0) && (bool)(((int32_t)(v1)) != "
            "((int32_t)(kq_c0)))))) * ((int64_t)(((int64_t)kq_i)))))))");
}

TEST(IrRender, MathAndCasts) {
  const auto r = render<std::tuple<double, float>>(kiln::fma(_1, _2, 1) / kiln::pow(_2, 2.f) +
                                                   kiln::cast<float>(-_2));
  EXPECT_EQ(r.text,
            "(((double)((((double)(fma(((double)(v0)), ((double)(v1)), ((double)(kq_c0))))) / "
            "((double)(pow(((float)(v1)), ((float)(kq_c1)))))))) + "
            "((double)(((float)(((float)(-((float)(v1)))))))))");
}

TEST(IrRender, Combines) {
  q::query_desc d;
  const auto sum = q::lower_sum_combine(d.graph, kiln::scalar_type::i64);
  EXPECT_EQ(kiln::codegen::render_expr(d.graph, sum), "(((int64_t)(kq_a)) + ((int64_t)(kq_b)))");
  const auto mx = q::lower_combine<float>(d, kiln::max(_1, _2), "test");
  EXPECT_EQ(kiln::codegen::render_expr(d.graph, mx),
            "((float)(kq_max_float(((float)(kq_a)), ((float)(kq_b)))))");
  EXPECT_THROW(q::lower_combine<float>(d, _1 + 1.f, "test"), kiln::invalid_argument);
  EXPECT_THROW(q::lower_combine<float>(d, _1 + kiln::cast<float>(_i), "test"),
               kiln::invalid_argument);
}

TEST(IrRender, HelperDefinitions) {
  using kiln::codegen::helper_def;
  EXPECT_EQ(helper_def({kiln::ir::op::abs, kiln::scalar_type::i32}),
            "KILN_FUNC int32_t kq_abs_int32_t(int32_t x) { return x < (int32_t)0 ? "
            "(int32_t)(-x) : x; }\n");
  EXPECT_EQ(helper_def({kiln::ir::op::min, kiln::scalar_type::f32}),
            "KILN_FUNC float kq_min_float(float a, float b) { return b < a ? b : a; }\n");
}

}  // namespace
