// Dtype promotion is C++'s: checked against decltype for every pair of element types.
#include "tensor/promote.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

namespace {

template <class... T>
struct types {};
using all = types<bool, std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
                  std::uint16_t, std::uint32_t, std::uint64_t, float, double>;

template <class A, class... B>
constexpr bool row(types<B...>) {
  return ((kiln::detail::promote(kiln::scalar_type_of<A>, kiln::scalar_type_of<B>) ==
           kiln::scalar_type_of<decltype(A() + B())>)&&...);
}
template <class... A>
constexpr bool table(types<A...>) {
  return (row<A>(all{}) && ...);
}
static_assert(table(all{}), "promote() differs from C++'s usual arithmetic conversions");

template <class... A>
constexpr bool unary(types<A...>) {
  return ((kiln::detail::integral_promote(kiln::scalar_type_of<A>) ==
           kiln::scalar_type_of<decltype(-A())>)&&...);
}
static_assert(unary(all{}), "integral_promote() differs from C++'s unary minus");

TEST(TensorPromote, MatchesCppForEveryPair) {
  using kiln::scalar_type;
  using kiln::detail::promote;
  EXPECT_TRUE(table(all{}));
  EXPECT_EQ(promote(scalar_type::i8, scalar_type::i8), scalar_type::i32);
  EXPECT_EQ(promote(scalar_type::i32, scalar_type::f32), scalar_type::f32);
  EXPECT_EQ(promote(scalar_type::i64, scalar_type::f64), scalar_type::f64);
  EXPECT_EQ(promote(scalar_type::boolean, scalar_type::boolean), scalar_type::i32);
  EXPECT_EQ(promote(scalar_type::u32, scalar_type::i64), scalar_type::i64);
  EXPECT_EQ(promote(scalar_type::u64, scalar_type::i64), scalar_type::u64);
  EXPECT_EQ(kiln::detail::math_type(scalar_type::i32),
            kiln::scalar_type_of<decltype(std::sqrt(1))>);
}

}  // namespace
