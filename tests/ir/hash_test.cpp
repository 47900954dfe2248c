// Structural hashes: equal structure gives equal hashes whatever the captured values; any
// change of op, dtype, operand order, leaf or layout strides gives another.
#include "ir/hash.hpp"

#include <gtest/gtest.h>

#include <kiln/kiln.hpp>

#include "ir/print.hpp"
#include "ir/verify.hpp"

namespace {
using namespace kiln::placeholders;
using kiln::scalar_type;
using kiln::ir::op;
namespace q = kiln::detail::q;

// The graph of e lowered over an element of types In (values v0, v1).
template <class In, class E>
kiln::ir::graph lowered(const E& e) {
  q::query_desc d;
  d.vars = {0, 1};
  q::lower_root<In>(d, e, q::element_leaves(d), nullptr);
  EXPECT_EQ(kiln::ir::verify(d.graph), "") << kiln::ir::print(d.graph);
  return d.graph;
}
template <class In, class E>
std::uint64_t hash_of(const E& e) {
  return kiln::ir::structural_hash(lowered<In>(e));
}
using f1 = std::tuple<float>;
using f2 = std::tuple<float, float>;
using d2 = std::tuple<double, double>;

TEST(IrHash, EqualStructureEqualHash) {
  EXPECT_EQ(hash_of<f1>(_1 * 2.f + 1.f), hash_of<f1>(_1 * 2.f + 1.f));
  EXPECT_EQ(hash_of<f2>(kiln::select(_1 > _2, kiln::sqrt(_1), -_2)),
            hash_of<f2>(kiln::select(_1 > _2, kiln::sqrt(_1), -_2)));
}

TEST(IrHash, CaptureValuesAreNotStructure) {
  EXPECT_EQ(hash_of<f1>(_1 * 2.f + 1.f), hash_of<f1>(_1 * 3.f + 7.f));
  const auto a = lowered<f1>(_1 * 2.f), b = lowered<f1>(_1 * -5.f);
  EXPECT_NE(a.captures[0].bits, b.captures[0].bits);
  EXPECT_EQ(kiln::ir::structural_hash(a), kiln::ir::structural_hash(b));
}

TEST(IrHash, DifferentStructureDifferentHash) {
  const std::uint64_t base = hash_of<f2>(_1 - _2);
  EXPECT_NE(base, hash_of<f2>(_2 - _1));                           // operand order
  EXPECT_NE(base, hash_of<f2>(_1 + _2));                           // op
  EXPECT_NE(base, hash_of<d2>(_1 - _2));                           // dtype
  EXPECT_NE(hash_of<f1>(_1 * 2.f), hash_of<f1>(_1 * 2.0));         // capture type
  EXPECT_NE(hash_of<f1>(_1 * 2.f), hash_of<f1>(2.f * _1));         // leaf position
  EXPECT_NE(hash_of<f1>(kiln::cast<float>(_i)), hash_of<f1>(_1));  // index vs value
  EXPECT_NE(hash_of<f1>(kiln::min(_1, 1.f)), hash_of<f1>(kiln::max(_1, 1.f)));
}

TEST(IrHash, HandBuiltGraphs) {
  kiln::ir::graph g, h;
  const auto x = g.add(op::component, scalar_type::f32, {}, 0);
  g.roots.push_back(g.add(op::mul, scalar_type::f32, {x, g.add_capture(2.f)}));
  const auto y = h.add(op::component, scalar_type::f32, {}, 1);  // another value: v1
  h.roots.push_back(h.add(op::mul, scalar_type::f32, {y, h.add_capture(2.f)}));
  EXPECT_EQ(kiln::ir::verify(g), "");
  EXPECT_NE(kiln::ir::structural_hash(g), kiln::ir::structural_hash(h));
  kiln::ir::graph k = g;
  k.captures[0].bits = 12345;  // another value, same structure
  EXPECT_EQ(kiln::ir::structural_hash(g, g.roots[0]), kiln::ir::structural_hash(k, k.roots[0]));
  EXPECT_EQ(kiln::ir::structural_hash(g), kiln::ir::structural_hash(k));
}

TEST(IrHash, LayoutStridesNotDims) {
  kiln::ir::layout a, b, c;
  a.dims[0] = 10;
  b.dims[0] = 20;
  c.strides[0] = 0;  // broadcast
  EXPECT_EQ(kiln::ir::hasher().add(a).value(), kiln::ir::hasher().add(b).value());
  EXPECT_NE(kiln::ir::hasher().add(a).value(), kiln::ir::hasher().add(c).value());
}

TEST(IrVerify, CatchesBadGraphs) {
  kiln::ir::graph g;
  const auto x = g.add(op::component, scalar_type::f32, {}, 0);
  const auto i = g.add(op::component, scalar_type::i32, {}, 1);
  EXPECT_EQ(kiln::ir::verify(g), "");
  kiln::ir::graph mixed = g;
  mixed.add(op::add, scalar_type::f32, {x, i});  // no cast to the common type
  EXPECT_NE(kiln::ir::verify(mixed), "");
  kiln::ir::graph forward = g;
  forward.add(op::neg, scalar_type::f32, {5});
  EXPECT_NE(kiln::ir::verify(forward), "");
  kiln::ir::graph capture = g;
  capture.add(op::capture, scalar_type::f32, {}, 3);  // no such slot
  EXPECT_NE(kiln::ir::verify(capture), "");
}

TEST(IrPrint, OneLinePerNode) {
  const auto g = lowered<f1>(_1 * 2.f);
  EXPECT_EQ(kiln::ir::print(g),
            "%0 = component float #0\n%1 = capture float #0\n%2 = cast float %0\n"
            "%3 = cast float %1\n%4 = mul float %2, %3\ncapture #0: float\nroots: %4\n");
}

}  // namespace
