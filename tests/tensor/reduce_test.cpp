// Reductions along axes against a double-precision host fold: every dtype, axis sets with
// and without keepdim, non-contiguous and broadcast inputs, size-0 and size-1 dims, long rows
// and columns (the group and split strategies), NaN and ties.
#include <limits>

#include "tensor/reduce_fixture.hpp"

namespace tensor_test {
namespace {

class ReduceTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ReduceTest);

using all_types =
    type_list<bool, std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
              std::uint16_t, std::uint32_t, std::uint64_t, float, double>;

double max_of(const std::vector<double>& v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) m = std::isnan(x) || std::isnan(m) ? NAN : std::max(m, x);
  return m;
}
double min_of(const std::vector<double>& v) {
  double m = std::numeric_limits<double>::infinity();
  for (double x : v) m = std::isnan(x) || std::isnan(m) ? NAN : std::min(m, x);
  return m;
}
// First NaN, else first maximum (or minimum when sign is -1).
double arg_of(const std::vector<double>& v, double sign) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (std::isnan(v[i])) return double(i);
    if (sign * v[i] > sign * v[best]) best = i;
  }
  return double(best);
}

TEST_P(ReduceTest, SumAndExtremesOfEveryDtype) {
  for_each_type(all_types{}, [&]<class T>() {
    const host<T> h = random_host<T>({3, 4, 5}, 11);
    const kiln::tensor x = upload(dev(), h);
    const rows_of r1 = split_rows(doubles(h), h.shape, {1}, false);
    const kiln::tensor s = x.sum(1);
    EXPECT_EQ(s.shape(), r1.shape);
    const kiln::scalar_type want_sum = std::is_floating_point_v<T> ? kiln::scalar_type_of<T>
                                       : std::is_unsigned_v<T> && !std::is_same_v<T, bool>
                                           ? kiln::scalar_type::u64
                                           : kiln::scalar_type::i64;
    EXPECT_EQ(s.dtype(), want_sum);
    EXPECT_TRUE(near_rows(read_doubles(s), fold_rows(r1, sum_of), fold_rows(r1, abs_sum_of),
                          std::is_same_v<T, float> ? 1e-6 : 1e-13));
    const rows_of r02 = split_rows(doubles(h), h.shape, {0, 2}, true);
    const kiln::tensor mx = x.max({0, -1}, true), mn = x.min({2, 0}, true);
    EXPECT_EQ(mx.dtype(), kiln::scalar_type_of<T>);
    EXPECT_EQ(mx.shape(), (shape_t{1, 4, 1}));
    EXPECT_EQ(read_doubles(mx), fold_rows(r02, max_of));
    EXPECT_EQ(read_doubles(mn), fold_rows(r02, min_of));
    const rows_of rl = split_rows(doubles(h), h.shape, {2}, false);
    const kiln::tensor am = x.argmax(-1), an = x.argmin(2, true);
    EXPECT_EQ(am.dtype(), kiln::scalar_type::i64);
    EXPECT_EQ(an.shape(), (shape_t{3, 4, 1}));
    EXPECT_EQ(read_doubles(am), fold_rows(rl, [](auto& v) { return arg_of(v, 1); }));
    EXPECT_EQ(read_doubles(an), fold_rows(rl, [](auto& v) { return arg_of(v, -1); }));
  });
}

TEST_P(ReduceTest, AxisSetsAndKeepdim) {
  const host<float> h = random_host<float>({4, 3, 6}, 12);
  const kiln::tensor x = upload(dev(), h);
  const std::vector<std::vector<int>> sets{{}, {0}, {1}, {2}, {-1, 0}, {0, 1}, {1, 2}, {0, 1, 2}};
  for (const auto& axes : sets)
    for (bool keep : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "axes " << axes.size() << " keepdim " << keep);
      const rows_of r = split_rows(doubles(h), h.shape, axes, keep);
      const kiln::tensor s = x.sum(axes, keep);
      EXPECT_EQ(s.shape(), r.shape);
      EXPECT_TRUE(near_rows(read_doubles(s), fold_rows(r, sum_of), fold_rows(r, abs_sum_of), 1e-6));
      const kiln::tensor m = x.mean(axes, keep);
      EXPECT_TRUE(near_rows(
          read_doubles(m), fold_rows(r, [](auto& v) { return sum_of(v) / double(v.size()); }),
          fold_rows(r, [](auto& v) { return abs_sum_of(v) / double(v.size()); }), 1e-6));
    }
  // Every axis of a rank-0 tensor: itself.
  const kiln::tensor s0 = kiln::tensor::full(dev(), {}, kiln::scalar_type::i32, 7);
  EXPECT_EQ(s0.sum().item<std::int64_t>(), 7);
  EXPECT_EQ(s0.max().item<std::int32_t>(), 7);
}

TEST_P(ReduceTest, NonContiguousAndBroadcastInputs) {
  const host<double> h = random_host<double>({5, 6, 4}, 13);
  const kiln::tensor x = upload(dev(), h);
  // permute: [4, 5, 6] with strides [1, 24, 4]
  const host<double> hp = remap(h, {4, 5, 6}, [](shape_t c) { return shape_t{c[1], c[2], c[0]}; });
  const kiln::tensor p = x.permute({2, 0, 1});
  for (const std::vector<int>& axes : std::vector<std::vector<int>>{{0}, {2}, {0, 2}, {1}}) {
    const rows_of r = split_rows(doubles(hp), hp.shape, axes, false);
    EXPECT_TRUE(near_rows(read_doubles(p.sum(axes)), fold_rows(r, sum_of), fold_rows(r, abs_sum_of),
                          1e-13));
    EXPECT_EQ(read_doubles(p.argmax(axes.size() == 1 ? kiln::axes(axes[0]) : kiln::axes())),
              fold_rows(split_rows(doubles(hp), hp.shape,
                                   axes.size() == 1 ? axes : std::vector<int>{}, false),
                        [](auto& v) { return arg_of(v, 1); }));
  }
  // slice with a step, then a broadcast: [5, 3, 4] -> expand to [2, 5, 3, 4]
  const kiln::tensor s = x.slice(1, 1, 6, 2).unsqueeze(0).expand({2, 5, 3, 4});
  const host<double> hs = remap(h, {2, 5, 3, 4}, [](shape_t c) {
    return shape_t{c[1], 1 + 2 * c[2], c[3]};
  });
  for (const std::vector<int>& axes : std::vector<std::vector<int>>{{0}, {0, 3}, {1, 2}, {}}) {
    const rows_of r = split_rows(doubles(hs), hs.shape, axes, true);
    EXPECT_TRUE(near_rows(read_doubles(s.sum(axes, true)), fold_rows(r, sum_of),
                          fold_rows(r, abs_sum_of), 1e-13));
    EXPECT_EQ(read_doubles(s.min(axes, true)), fold_rows(r, min_of));
  }
}

TEST_P(ReduceTest, EmptyAndSizeOneDims) {
  const kiln::tensor e = upload(dev(), random_host<float>({3, 0, 2}, 14));
  EXPECT_EQ(e.sum(1).shape(), (shape_t{3, 2}));
  EXPECT_EQ(e.sum(1).to_vector<float>(), std::vector<float>(6, 0.f));
  for (float m : e.mean(1).to_vector<float>()) EXPECT_TRUE(std::isnan(m));
  EXPECT_TRUE(e.sum(0).to_vector<float>().empty());  // [0, 2]: no outputs
  EXPECT_EQ(e.max(0).shape(), (shape_t{0, 2}));      // nothing folded into nothing: fine
  EXPECT_THROW(e.max(1), kiln::shape_error);
  EXPECT_THROW(e.argmin(), kiln::shape_error);
  const host<std::int32_t> h = random_host<std::int32_t>({1, 7, 1}, 15);
  const kiln::tensor x = upload(dev(), h);
  EXPECT_EQ(x.sum({0, 2}).to_vector<std::int64_t>(),
            std::vector<std::int64_t>(h.v.begin(), h.v.end()));
  const rows_of r = split_rows(doubles(h), h.shape, {1}, true);
  EXPECT_EQ(read_doubles(x.max(1, true)), fold_rows(r, max_of));
}

// Long rows, long columns and few outputs: the group strategy and both split forms.
TEST_P(ReduceTest, LongRowsAndColumns) {
  struct c {
    shape_t shape;
    std::vector<int> axes;
  };
  // {9000, 3} and {4099, 387} over axis 0: split into chunks whose partials a group folds.
  for (const c& k : {c{{3, 3000}, {1}}, c{{20000}, {}}, c{{9000, 3}, {0}}, c{{2, 40000}, {1}},
                     c{{4099, 387}, {0}}}) {
    SCOPED_TRACE(kiln::to_string(k.shape));
    const host<float> h = random_host<float>(k.shape, 16);
    const kiln::tensor x = upload(dev(), h);
    const rows_of r = split_rows(doubles(h), h.shape, k.axes, false);
    EXPECT_TRUE(near_rows(read_doubles(x.sum(k.axes)), fold_rows(r, sum_of),
                          fold_rows(r, abs_sum_of), 1e-6));
    EXPECT_EQ(read_doubles(x.max(k.axes)), fold_rows(r, max_of));
    if (k.axes.size() <= 1) {
      EXPECT_EQ(read_doubles(x.argmin(k.axes.empty() ? kiln::axes() : kiln::axes(k.axes[0]))),
                fold_rows(r, [](auto& v) { return arg_of(v, -1); }));
    }
  }
}

TEST_P(ReduceTest, NanWinsAndTiesTakeTheFirstIndex) {
  std::vector<float> v(600);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = float(i % 7);  // ties: 6 at 6, 13, ...
  const kiln::tensor t = kiln::tensor::from(dev(), v, {2, 300});
  EXPECT_EQ(t.argmax(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{6, 0}));
  EXPECT_EQ(t.argmin(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 1}));
  v[250] = NAN;
  v[420] = NAN;
  v[520] = NAN;
  const kiln::tensor n = kiln::tensor::from(dev(), v, {2, 300});
  EXPECT_EQ(n.argmax(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{250, 120}));
  EXPECT_EQ(n.argmin(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{250, 120}));
  const std::vector<float> m = n.max(1).to_vector<float>();
  EXPECT_TRUE(std::isnan(m[0]) && std::isnan(m[1]));
  EXPECT_EQ(n.argmax().item<std::int64_t>(), 250);
  // Rows of the fold's starting values: the first index, as PyTorch.
  const kiln::tensor lo = kiln::tensor::from(dev(), std::vector<float>(300, -INFINITY), {2, 150});
  const kiln::tensor hi = kiln::tensor::from(dev(), std::vector<float>(300, INFINITY), {2, 150});
  EXPECT_EQ(lo.argmax(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 0}));
  EXPECT_EQ(hi.argmin(1).to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 0}));
}

TEST_P(ReduceTest, Errors) {
  const kiln::tensor x = upload(dev(), random_host<float>({2, 3}, 17));
  EXPECT_THROW(x.sum(2), kiln::axis_error);
  EXPECT_THROW(x.sum(-3), kiln::axis_error);
  EXPECT_THROW(x.sum({0, -2}), kiln::axis_error);  // the same axis twice
  EXPECT_THROW(x.softmax(5), kiln::axis_error);
  EXPECT_THROW(kiln::tensor().sum(), kiln::invalid_argument);
}

}  // namespace
}  // namespace tensor_test
