// Host references for reduction tests: a tensor read back as doubles whatever its dtype, and
// the rows a reduction folds (each output's elements in reduced-index order).
#pragma once

#include <cmath>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {

inline std::vector<double> read_doubles(const kiln::tensor& t) {
  using st = kiln::scalar_type;
  auto as = [&]<class T>(T) {
    const std::vector<T> v = t.to_vector<T>();
    return std::vector<double>(v.begin(), v.end());
  };
  switch (t.dtype()) {
    case st::boolean: return as(bool{});
    case st::i8: return as(std::int8_t{});
    case st::i16: return as(std::int16_t{});
    case st::i32: return as(std::int32_t{});
    case st::i64: return as(std::int64_t{});
    case st::u8: return as(std::uint8_t{});
    case st::u16: return as(std::uint16_t{});
    case st::u32: return as(std::uint32_t{});
    case st::u64: return as(std::uint64_t{});
    case st::f32: return as(float{});
    case st::f64: return as(double{});
    case st::f16: return as(kiln::half{});
    case st::bf16: return as(kiln::bfloat16{});
  }
  return {};
}

template <class T>
std::vector<double> doubles(const host<T>& h) {
  return std::vector<double>(h.v.begin(), h.v.end());
}

struct rows_of {
  shape_t shape;                          // the reduction's result shape
  std::vector<std::vector<double>> rows;  // per result element, in reduced-index order
};

// axes: normalised or negative; empty means every axis.
inline rows_of split_rows(const std::vector<double>& x, const shape_t& shape, std::vector<int> axes,
                          bool keepdim) {
  const int rank = static_cast<int>(shape.size());
  std::vector<bool> red(shape.size(), axes.empty());
  for (int a : axes) red[std::size_t(a < 0 ? a + rank : a)] = true;
  rows_of r;
  shape_t kept;
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (!red[k]) kept.push_back(shape[k]);
    if (!red[k] || keepdim) r.shape.push_back(red[k] ? 1 : shape[k]);
  }
  r.rows.resize(std::size_t(numel(kept)));
  for (std::int64_t i = 0; i < numel(shape); ++i) {
    const shape_t c = coords(shape, i);
    shape_t kc;
    for (std::size_t k = 0; k < shape.size(); ++k)
      if (!red[k]) kc.push_back(c[k]);
    r.rows[std::size_t(flat(kept, kc))].push_back(x[std::size_t(i)]);
  }
  return r;
}

// Each row folded by f (a function of the row's values).
template <class F>
std::vector<double> fold_rows(const rows_of& r, F f) {
  std::vector<double> out;
  for (const auto& row : r.rows) out.push_back(f(row));
  return out;
}

inline double sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
inline double abs_sum_of(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::fabs(x);
  return s;
}

// |got - want| <= tol * scale for each element (scale: the row's sum of magnitudes, or 1).
inline ::testing::AssertionResult near_rows(const std::vector<double>& got,
                                            const std::vector<double>& want,
                                            const std::vector<double>& scale, double tol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << ", expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    if (!both_nan && !(std::fabs(got[i] - want[i]) <= tol * std::max(1.0, scale[i])))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << got[i] << ", expected " << want[i];
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tensor_test
