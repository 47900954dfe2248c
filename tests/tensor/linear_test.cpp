// kiln::linear on every device against an f64 host reference: every activation, f32 and the
// 16-bit types, batched and strided inputs, a transposed weight, a misaligned bias; the path
// taken (cuBLASLt's epilogue on CUDA, matmul + one fused kernel elsewhere); gradients equal to
// those of the separate ops; clear errors.
#include <cmath>
#include <kiln/kiln.hpp>
#include <kiln/tensor/linear.hpp>
#include <string>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::scalar_type;

class LinearTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(LinearTest);

double act_ref(double v, const std::string& a) {
  if (a == "relu") return v > 0 ? v : 0;
  if (a == "gelu") return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
  if (a == "gelu_tanh")
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  return v;
}

// Random values of dtype t as f32 (already rounded to t, so the reference sees what the device
// sees), and the device tensor holding them.
struct operand {
  std::vector<float> v;
  kiln::tensor t;
};
operand make(const kiln::device& dev, const shape_t& shape, std::uint64_t seed, scalar_type t) {
  operand o;
  o.v = values<float>(std::size_t(numel(shape)), seed);
  for (float& x : o.v) x *= 0.25f;
  o.t = kiln::tensor::from(dev, o.v, shape).to(t);
  o.v = o.t.to(scalar_type::f32).to_vector<float>();
  return o;
}

// y [rows, out] against act(x w^T + b) in f64; tol is relative to sum |x w| + |b| per element.
void expect_linear(const kiln::tensor& y, const operand& x, const operand& w, const operand* b,
                   std::int64_t rows, std::int64_t in, std::int64_t out, const std::string& a,
                   double tol) {
  ASSERT_EQ(y.numel(), rows * out);
  const auto got = y.to(scalar_type::f32).to_vector<float>();
  int bad = 0;
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < out; ++j) {
      double s = b ? b->v[std::size_t(j)] : 0, scale = b ? std::abs(s) : 0;
      for (std::int64_t k = 0; k < in; ++k) {
        const double p = double(x.v[std::size_t(i * in + k)]) * w.v[std::size_t(j * in + k)];
        s += p, scale += std::abs(p);
      }
      const double want = act_ref(s, a), have = got[std::size_t(i * out + j)];
      if (std::abs(have - want) > tol * (scale + 1e-3) && ++bad <= 5)
        ADD_FAILURE() << a << " y[" << i << "][" << j << "] = " << have << ", want " << want;
    }
  EXPECT_EQ(bad, 0);
}

bool is_cuda(const kiln::device& d) { return d.id().rfind("cuda", 0) == 0; }

TEST_P(LinearTest, EveryActivationMatchesTheReference) {
  const std::int64_t rows = 3 * 5, in = 37, out = 40;
  for (scalar_type t : {scalar_type::f32, scalar_type::bf16, scalar_type::f16}) {
    SCOPED_TRACE(kiln::type_name(t));
    const operand x = make(dev(), {3, 5, in}, 11, t), w = make(dev(), {out, in}, 12, t),
                  b = make(dev(), {out}, 13, t);
    const double tol = t == scalar_type::f32 ? 2e-5 : t == scalar_type::bf16 ? 1.6e-2 : 2e-3;
    for (const char* a : {"none", "relu", "gelu", "gelu_tanh"}) {
      const kiln::tensor y = kiln::linear(x.t, w.t, b.t, a);
      EXPECT_EQ(y.shape(), (shape_t{3, 5, out}));
      EXPECT_EQ(y.dtype(), t);
      const std::string path = kiln::last_linear_path();
      expect_linear(y, x, w, &b, rows, in, out, a, tol);
      // CUDA with cuBLASLt fuses; the erf GELU keeps the bias in the GEMM only.
      if (is_cuda(dev()))
        EXPECT_EQ(path, std::string(a) == "gelu" ? "bias epilogue" : "epilogue") << a;
      else
        EXPECT_EQ(path, "separate") << a;
    }
    const kiln::tensor nb = kiln::linear(x.t, w.t, {}, "relu");
    expect_linear(nb, x, w, nullptr, rows, in, out, "relu", tol);
  }
}

TEST_P(LinearTest, TransposedWeightStridedInputAndMisalignedBias) {
  const std::int64_t in = 24, out = 33;
  const operand wt = make(dev(), {in, out}, 21, scalar_type::f32);  // stored [in, out]
  operand w;  // the same weight as [out, in], for the reference
  w.v.resize(wt.v.size());
  for (std::int64_t i = 0; i < in; ++i)
    for (std::int64_t j = 0; j < out; ++j)
      w.v[std::size_t(j * in + i)] = wt.v[std::size_t(i * out + j)];
  // x: every other row of a [14, in] tensor (rows stride 2 * in).
  const operand xs = make(dev(), {14, in}, 22, scalar_type::f32);
  operand x;
  for (std::int64_t r = 0; r < 14; r += 2)
    x.v.insert(x.v.end(), xs.v.begin() + r * in, xs.v.begin() + (r + 1) * in);
  x.t = xs.t.slice(0, 0, 14, 2);
  // b: elements 1 .. out of a longer vector (4-byte offset: the epilogue needs 16).
  const operand bl = make(dev(), {out + 1}, 23, scalar_type::f32);
  operand b;
  b.v.assign(bl.v.begin() + 1, bl.v.end());
  b.t = bl.t.slice(0, 1, out + 1);
  const kiln::tensor y = kiln::linear(x.t, wt.t.t(), b.t, "gelu_tanh");
  expect_linear(y, x, w, &b, 7, in, out, "gelu_tanh", 2e-5);
  EXPECT_EQ(std::string(kiln::last_linear_path()), "separate");
  const operand ba = make(dev(), {out}, 24, scalar_type::f32);
  expect_linear(kiln::linear(x.t, wt.t.t(), ba.t, "relu"), x, w, &ba, 7, in, out, "relu", 2e-5);
  EXPECT_EQ(std::string(kiln::last_linear_path()), is_cuda(dev()) ? "epilogue" : "separate");
}

TEST_P(LinearTest, F64RunsSeparately) {
  const auto x = kiln::tensor::from(dev(), values<double>(6 * 5, 31), {6, 5});
  const auto w = kiln::tensor::from(dev(), values<double>(4 * 5, 32), {4, 5});
  const auto b = kiln::tensor::from(dev(), values<double>(4, 33), {4});
  const auto y = kiln::linear(x, w, b, "gelu").to_vector<double>();
  EXPECT_EQ(std::string(kiln::last_linear_path()), "separate");
  const auto want = kiln::gelu(kiln::matmul(x, w.t()) + b).to_vector<double>();
  ASSERT_EQ(y.size(), want.size());
  for (std::size_t i = 0; i < y.size(); ++i)
    EXPECT_NEAR(y[i], want[i], 1e-12 * (1 + std::abs(want[i])));
}

TEST_P(LinearTest, GradientsEqualThoseOfTheSeparateOps) {
  const std::int64_t in = 9, out = 7;
  auto leaf = [&](const shape_t& s, std::uint64_t seed) {
    return kiln::tensor::from(dev(), values<float>(std::size_t(numel(s)), seed), s)
        .requires_grad_(true);
  };
  const kiln::tensor x = leaf({5, in}, 41), w = leaf({out, in}, 42), b = leaf({out}, 43);
  const kiln::tensor g = kiln::tensor::from(dev(), values<float>(5 * out, 44), {5, out});
  (kiln::linear(x, w, b, "gelu_tanh") * g).sum().backward();
  const auto gx = x.grad().to_vector<float>(), gw = w.grad().to_vector<float>(),
             gb = b.grad().to_vector<float>();
  const kiln::tensor x2 = leaf({5, in}, 41), w2 = leaf({out, in}, 42), b2 = leaf({out}, 43);
  (kiln::gelu(kiln::matmul(x2, w2.t()) + b2, "tanh") * g).sum().backward();
  auto same = [](const std::vector<float>& a, const std::vector<float>& e) {
    ASSERT_EQ(a.size(), e.size());
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], e[i], 1e-4f * (1 + std::abs(e[i])));
  };
  same(gx, x2.grad().to_vector<float>());
  same(gw, w2.grad().to_vector<float>());
  same(gb, b2.grad().to_vector<float>());
}

TEST_P(LinearTest, BadInputGetsClearErrors) {
  const auto x = kiln::tensor::randn(dev(), {4, 6}, 51);
  const auto w = kiln::tensor::randn(dev(), {3, 6}, 52);
  const auto b = kiln::tensor::randn(dev(), {3}, 53);
  EXPECT_THROW(kiln::linear(x, w, b, "swish"), kiln::invalid_argument);
  EXPECT_THROW(kiln::linear(kiln::tensor{}, w, b), kiln::invalid_argument);
  EXPECT_THROW(kiln::linear(x, kiln::tensor{}, b), kiln::invalid_argument);
  EXPECT_THROW(kiln::linear(x, w.reshape({18}), b), kiln::shape_error);
  EXPECT_THROW(kiln::linear(x, w.t(), b), kiln::shape_error);  // [6, 3]: x needs 3
  EXPECT_THROW(kiln::linear(x, w, b.reshape({1, 3})), kiln::shape_error);
  EXPECT_THROW(kiln::linear(x, w, kiln::tensor::randn(dev(), {4}, 54)), kiln::shape_error);
  EXPECT_THROW(kiln::linear(x.to(scalar_type::f64), w, b), kiln::dtype_error);
  EXPECT_THROW(kiln::linear(x.to(scalar_type::i32), w.to(scalar_type::i32)), kiln::dtype_error);
  try {
    kiln::linear(x, w, b, "swish");
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("swish"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tensor_test
