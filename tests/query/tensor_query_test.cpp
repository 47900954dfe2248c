// Run-time queries over tensors (kiln/query/tensor_query.hpp, the form Python's kiln.query
// uses): the same results as the typed kiln::query and a host loop, the filter compacted on
// the device, and expressions a query cannot run refused without changing the query.
#include "kiln/query/tensor_query.hpp"

#include <bit>
#include <cstring>
#include <optional>

#include "kiln/query/sort.hpp"
#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;
namespace q = kiln::detail::q;

class TensorQueryTest : public QueryTest {
 protected:
  kiln::tensor tensor_of(const std::vector<float>& v) const { return kiln::tensor::from(dev(), v); }
  template <class T>
  static T value_of(const q::reduce_result& r) {
    T v;
    std::memcpy(&v, &r.value_bits, sizeof v);
    return v;
  }
};
KILN_INSTANTIATE_QUERY_PER_DEVICE(TensorQueryTest);

TEST_P(TensorQueryTest, MapFilterReduceMatchesTypedQueryAndHost) {
  for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{257}, std::uint64_t{100003}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto a = data<float>(n, n + 11);
    const kiln::tensor x = tensor_of(a);
    q::tensor_query tq({x});
    const kiln::tensor v = x * 2.f + 1.f;  // lazy
    ASSERT_TRUE(tq.map(v));
    ASSERT_TRUE(tq.filter(v > 0.5f));
    double ref = 0;
    std::vector<float> kept;
    for (float e : a)
      if (float m = e * 2.f + 1.f; m > 0.5f) {
        ref += m;
        kept.push_back(m);
      }
    auto s = tq.reduce_async(q::reduce_kind::sum);
    EXPECT_NEAR(value_of<float>(q::async_reduce(*s)), ref, 1e-3 * (1 + std::abs(ref)));
    auto c = tq.reduce_async(q::reduce_kind::count);
    EXPECT_EQ(q::async_reduce(*c).count, kept.size());
    auto out = tq.collect_async();
    const kiln::tensor got = q::tensor_query::collected(*out, tq.type());
    EXPECT_EQ(got.get_device(), dev());
    ASSERT_EQ(got.numel(), static_cast<std::int64_t>(kept.size()));
    const auto typed = kiln::buffer<float>(dev(), a) | kiln::transform(_1 * 2.f + 1.f) |
                       kiln::filter(_1 > 0.5f) | kiln::to_vector();
    EXPECT_TRUE(elements_equal(got.to_vector<float>(), typed));
    // The waiting forms give the same.
    EXPECT_EQ(tq.reduce(q::reduce_kind::count).count, kept.size());
    EXPECT_TRUE(elements_equal(tq.collect().to_vector<float>(), typed));
  }
}

TEST_P(TensorQueryTest, ZipIndexAndIntegerAccumulators) {
  const std::uint64_t n = 4097;
  std::vector<std::int32_t> a(n);
  for (std::uint64_t i = 0; i < n; ++i) a[i] = static_cast<std::int32_t>(i * 7919 % 1000) - 500;
  const kiln::tensor x = kiln::tensor::from(dev(), a);
  const kiln::tensor y = kiln::tensor::from(dev(), std::vector<double>(n, 0.5));
  q::tensor_query tq({x, y});
  EXPECT_EQ(tq.arity(), 2u);
  ASSERT_TRUE(tq.filter(tq.index() < std::int64_t{1000}));
  ASSERT_TRUE(tq.map(x * tq.index() + y));  // int32 * int64 + double: double
  EXPECT_EQ(tq.type(), kiln::scalar_type::f64);
  double ref = 0;
  for (std::uint64_t i = 0; i < 1000; ++i) ref += double(a[i]) * double(i) + 0.5;
  auto s = tq.reduce_async(q::reduce_kind::sum);
  EXPECT_DOUBLE_EQ(value_of<double>(q::async_reduce(*s)), ref);
  // An integer sum accumulates in 64 bits.
  q::tensor_query ti({x});
  EXPECT_EQ(ti.accumulator_type(q::reduce_kind::sum), kiln::scalar_type::i64);
  EXPECT_EQ(ti.accumulator_type(q::reduce_kind::max), kiln::scalar_type::i32);
  auto m = ti.reduce_async(q::reduce_kind::max);
  EXPECT_EQ(value_of<std::int32_t>(q::async_reduce(*m)), *std::max_element(a.begin(), a.end()));
}

TEST_P(TensorQueryTest, ExpressionsAQueryCannotRunAreRefusedAndLeaveItUnchanged) {
  const auto a = data<float>(300, 5);
  const kiln::tensor x = tensor_of(a);
  const kiln::tensor other = tensor_of(a);  // stored memory that is not a component
  q::tensor_query tq({x});
  EXPECT_FALSE(tq.map(x + other));
  EXPECT_FALSE(tq.map(x - x.sum()));                 // a reduction inside
  EXPECT_FALSE(tq.filter(x.slice(0, 0, 10) > 0.f));  // another length
  EXPECT_FALSE(tq.map(x.to(kiln::scalar_type::bf16)));
  ASSERT_TRUE(tq.map(x * 3.f));
  EXPECT_FALSE(tq.map(x + 1.f));  // after a map the old element is gone
  auto s = tq.reduce_async(q::reduce_kind::sum);
  double ref = 0;
  for (float e : a) ref += 3.f * e;
  EXPECT_NEAR(value_of<float>(q::async_reduce(*s)), ref, 1e-3 * (1 + std::abs(ref)));
}

TEST_P(TensorQueryTest, SortAndOrderByMatchTheTypedQuery) {
  const auto a = data<float>(5003, 21);
  const kiln::tensor x = tensor_of(a);
  q::tensor_query s({x});
  ASSERT_TRUE(s.map(x * 3.f));
  s.sort(true);
  const auto typed = kiln::buffer<float>(dev(), a) | kiln::transform(_1 * 3.f) |
                     kiln::sort(kiln::descending) | kiln::to_vector();
  EXPECT_TRUE(elements_equal(s.collect().to_vector<float>(), typed));
  // order_by keeps the element: a zip sorted by a computed key, its first component collected.
  const kiln::tensor y = kiln::tensor::from(dev(), std::vector<std::int32_t>(a.size(), 1));
  q::tensor_query o({x, y});
  ASSERT_TRUE(o.order_by(kiln::abs(x)));
  ASSERT_TRUE(o.map(x * y));
  const auto by =
      kiln::zip(kiln::buffer<float>(dev(), a),
                kiln::buffer<std::int32_t>(dev(), std::vector<std::int32_t>(a.size(), 1))) |
      kiln::order_by(kiln::abs(_1)) | kiln::transform(_1 * _2) | kiln::to_vector();
  EXPECT_TRUE(elements_equal(o.collect().to_vector<float>(), by));
  EXPECT_THROW(q::tensor_query({x, y}).sort(), kiln::invalid_argument);
}

TEST_P(TensorQueryTest, UnboundStagesRunOverOtherInputsAsIfLoweredAgain) {
  const auto a = data<float>(1000, 31), b = data<float>(70001, 32);
  const kiln::tensor x = tensor_of(a);
  const kiln::tensor i = kiln::tensor::from(dev(), std::vector<std::int32_t>(a.size(), 3));
  q::tensor_query tq({x, i});
  ASSERT_TRUE(tq.filter(tq.index() >= std::int64_t{10}));
  ASSERT_TRUE(tq.map(x * i + 1.f));
  ASSERT_TRUE(tq.filter(tq.components()[0] > 0.5f));
  const q::tensor_query kept = tq.unbound();
  // Unbound: no inputs, no stages.
  EXPECT_THROW(kept.unbound().reduce(q::reduce_kind::sum), kiln::invalid_argument);
  q::tensor_query no_stages = kept;
  EXPECT_THROW(no_stages.map(x), kiln::invalid_argument);
  EXPECT_THROW(no_stages.sort(), kiln::invalid_argument);
  // Over other inputs of another length (a strided one is read through its contiguous form).
  const kiln::tensor y2 = kiln::tensor::from(dev(), b);
  const kiln::tensor j2 = kiln::tensor::from(dev(), std::vector<std::int32_t>(2 * b.size(), 5))
                              .slice(0, 0, 2 * b.size(), 2);
  for (auto* in : {&x, &y2}) {
    const bool second = in == &y2;
    const auto& v = second ? b : a;
    const std::int32_t m = second ? 5 : 3;
    std::optional<q::tensor_query> run = kept.over({*in, second ? j2 : i});
    ASSERT_TRUE(run.has_value());
    double ref = 0;
    std::uint64_t count = 0;
    for (std::size_t k = 0; k < v.size(); ++k)
      if (const float e = v[k] * float(m) + 1.f; k >= 10 && e > 0.5f) {
        ref += e;
        ++count;
      }
    EXPECT_NEAR(value_of<float>(run->reduce(q::reduce_kind::sum)), ref, 1e-3 * (1 + std::abs(ref)));
    EXPECT_EQ(run->reduce(q::reduce_kind::count).count, count);
    EXPECT_EQ(run->collect().numel(), static_cast<std::int64_t>(count));
    EXPECT_THROW(run->filter(*in > 0.f), kiln::invalid_argument);
  }
  // Other types, another count of inputs, another device: not these stages.
  EXPECT_FALSE(kept.over({x, x}).has_value());
  EXPECT_FALSE(kept.over({x}).has_value());
  if (dev() != kiln::device::host()) {
    const auto h = kiln::device::host();
    EXPECT_FALSE(kept.over({kiln::tensor::from(h, a),
                            kiln::tensor::from(h, std::vector<std::int32_t>(a.size(), 3))})
                     .has_value());
  }
  EXPECT_THROW(kept.over({x, kiln::tensor::from(dev(), std::vector<std::int32_t>{1, 2})}),
               kiln::invalid_argument);  // lengths differ
}

TEST_P(TensorQueryTest, BadInputIsAClearError) {
  const kiln::tensor x = tensor_of({1, 2, 3});
  EXPECT_THROW(q::tensor_query({}), kiln::invalid_argument);
  EXPECT_THROW(q::tensor_query({x.view({1, 3})}), kiln::shape_error);
  EXPECT_THROW(q::tensor_query({x, tensor_of({1, 2})}), kiln::invalid_argument);
  EXPECT_THROW(q::tensor_query({x.to(kiln::scalar_type::f16)}), kiln::unsupported);
  EXPECT_THROW(q::tensor_query({kiln::tensor{}}), kiln::invalid_argument);
  q::tensor_query zip({x, x});
  EXPECT_THROW(zip.reduce_async(q::reduce_kind::sum), kiln::invalid_argument);
  EXPECT_THROW(zip.collect_async(), kiln::invalid_argument);
  if (dev() != kiln::device::host()) {
    EXPECT_THROW(
        q::tensor_query({x, kiln::tensor::from(kiln::device::host(), std::vector<float>{1, 2, 3})}),
        kiln::invalid_argument);
  }
}

}  // namespace
}  // namespace query_test
