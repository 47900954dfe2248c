// Gradient checks: backward() of a function of tensors against central finite differences,
// in double precision on random inputs (never zeros), on the fixture's device. The function's
// output is reduced with fixed random weights (loss = sum(out * R)), so every output element's
// gradient is checked, not only the sum's.
#pragma once

#include <functional>
#include <kiln/tensor.hpp>

#include "tensor/tensor_fixture.hpp"

namespace autograd_test {

using kiln::shape_t;
using kiln::tensor;
using fn_t = std::function<tensor(const std::vector<tensor>&)>;

struct input {
  shape_t shape;
  std::vector<double> v;
};

// Seeded uniform values in [lo, hi], away from 0 by at least `gap` (kinks of abs, relu, max).
inline input random_input(const shape_t& shape, std::uint64_t seed, double lo = -2, double hi = 2,
                          double gap = 0.05) {
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  input in{shape, {}};
  in.v.resize(std::size_t(tensor_test::numel(shape)));
  for (auto& x : in.v) {
    do {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      x = lo + (hi - lo) * double(s >> 11) / double(1ull << 53);
    } while (std::abs(x) < gap);
  }
  return in;
}

inline std::vector<tensor> make(const kiln::device& dev, const std::vector<input>& ins, bool grad) {
  std::vector<tensor> t;
  for (const input& in : ins) {
    t.push_back(tensor::from(dev, in.v, in.shape));
    if (grad) t.back().requires_grad_();
  }
  return t;
}

// sum(f(ins) * weights) evaluated on the device without recording.
inline double weighted(const kiln::device& dev, const fn_t& f, const std::vector<input>& ins,
                       const std::vector<double>& w) {
  kiln::no_grad off;
  const std::vector<double> y = f(make(dev, ins, false)).contiguous().to_vector<double>();
  double s = 0;
  for (std::size_t k = 0; k < y.size(); ++k) s += y[k] * w[k];
  return s;
}

// Checks d sum(f * R) / d input against central differences for every input in `check`
// (all when empty); tol is relative to max(1, |numeric|).
inline ::testing::AssertionResult gradcheck(const kiln::device& dev, const fn_t& f,
                                            std::vector<input> ins, double tol = 1e-6,
                                            std::vector<std::size_t> check = {}) {
  std::vector<tensor> xs = make(dev, ins, true);
  const tensor out = f(xs);
  const input r = random_input(out.shape(), 977, -1, 1, 0.1);
  const tensor weights = tensor::from(dev, r.v, out.shape());
  (out * weights).sum().backward();
  if (check.empty())
    for (std::size_t i = 0; i < ins.size(); ++i) check.push_back(i);
  const double h = 1e-6;
  for (std::size_t i : check) {
    const tensor g = xs[i].grad();
    if (!g.defined()) return ::testing::AssertionFailure() << "input " << i << " has no grad()";
    if (g.shape() != ins[i].shape)
      return ::testing::AssertionFailure()
             << "input " << i << ": grad shape " << kiln::to_string(g.shape());
    const std::vector<double> got = g.contiguous().to_vector<double>();
    for (std::size_t k = 0; k < ins[i].v.size(); ++k) {
      const double keep = ins[i].v[k];
      ins[i].v[k] = keep + h;
      const double up = weighted(dev, f, ins, r.v);
      ins[i].v[k] = keep - h;
      const double down = weighted(dev, f, ins, r.v);
      ins[i].v[k] = keep;
      const double numeric = (up - down) / (2 * h);
      if (!(std::abs(got[k] - numeric) <= tol * std::max(1.0, std::abs(numeric))))
        return ::testing::AssertionFailure() << "input " << i << " element " << k << ": backward "
                                             << got[k] << ", numeric " << numeric;
    }
  }
  return ::testing::AssertionSuccess();
}

class AutogradTest : public tensor_test::TensorTest {
 protected:
  // Double-precision checks need fp64 on the device.
  bool skip_without_f64() {
    if (dev().supports(kiln::feature::fp64)) return false;
    return true;
  }
};

#define KILN_NEED_F64()                                                     \
  do {                                                                      \
    if (skip_without_f64()) GTEST_SKIP() << "the device has no fp64 (f64)"; \
  } while (0)

}  // namespace autograd_test
