// Fusion: one evaluation is one kernel launch whatever the expression; structure, not values
// or sizes, decides whether a kernel compiles; the CUDA form of generated kernels compiles.
#include "tensor/generate.hpp"
#include "tensor/kernel.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class FusionTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(FusionTest);

TEST_P(FusionTest, ReluOfBroadcastExpressionIsOneLaunch) {
  const host<float> ha = random_host<float>({4, 5}, 1), hb = random_host<float>({5}, 2),
                    hc = random_host<float>({4, 1}, 3);
  const kiln::tensor a = upload(dev(), ha), b = upload(dev(), hb), c = upload(dev(), hc);
  const kiln::tensor r = kiln::relu(a * b + c);
  EXPECT_TRUE(r.is_lazy());
  r.eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_FALSE(r.is_lazy());
  host<float> want{{4, 5}, {}};
  for (std::int64_t i = 0; i < 20; ++i) {
    const float v = ha.v[std::size_t(i)] * hb.v[std::size_t(i % 5)] + hc.v[std::size_t(i / 5)];
    want.v.push_back(v > 0 ? v : 0);
  }
  EXPECT_TRUE(matches(r, want));
  EXPECT_EQ(stats().kernel_launches, 0u);  // already evaluated: read back only
  // The same structure with a new scalar and new sizes compiles nothing.
  const kiln::tensor a2 = upload(dev(), random_host<float>({7, 3}, 4));
  const kiln::tensor b2 = upload(dev(), random_host<float>({3}, 5));
  const kiln::tensor c2 = upload(dev(), random_host<float>({7, 1}, 6));
  kiln::relu(a * b + c).eval();
  kiln::relu(a2 * b2 + c2).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_EQ(stats().programs_compiled, 0u);
  (kiln::relu(a * b + c) * 3.f).eval();
  (kiln::relu(a * b + c) * -7.f).eval();
  EXPECT_EQ(stats().programs_compiled, 0u);
}

TEST_P(FusionTest, SharedSubexpressionsAndChainsAreOneLaunch) {
  const host<double> h = random_host<double>({33}, 7);
  const kiln::tensor x = upload(dev(), h);
  kiln::tensor y = x;
  for (int k = 0; k < 40; ++k) y = y * 0.5 + kiln::sin(y);  // y used twice per step
  std::vector<double> want = h.v;
  for (int k = 0; k < 40; ++k)
    for (double& v : want) v = v * 0.5 + std::sin(v);
  EXPECT_TRUE(matches(y, host<double>{{33}, want}, 1e-10));
  EXPECT_EQ(stats().kernel_launches, 1u);
}

TEST_P(FusionTest, EvaluatedIntermediatesBecomeInputs) {
  const kiln::tensor x = upload(dev(), random_host<float>({8}, 8));
  const kiln::tensor y = x * 2.f;
  y.eval();
  const kiln::tensor z = y + y * x;
  const std::vector<float> yv = y.to_vector<float>(), xv = x.to_vector<float>();
  host<float> want{{8}, {}};
  for (std::size_t i = 0; i < 8; ++i) want.v.push_back(yv[i] + yv[i] * xv[i]);
  EXPECT_TRUE(matches(z, want));
  EXPECT_EQ(stats().kernel_launches, 1u);
}

TEST_P(FusionTest, EmptyResultsLaunchNothing) {
  const kiln::tensor e = upload(dev(), random_host<float>({0, 3}, 9));
  EXPECT_TRUE((e * 2.f + 1.f).to_vector<float>().empty());
  EXPECT_EQ(stats().kernel_launches, 0u);
}

// Outputs of a million elements or more take several elements per work-item on devices with
// work-groups of threads: every element, the last partial share and the index leaf included.
TEST_P(FusionTest, LargeOutputsAreEvaluatedWhole) {
  const shape_t shape{1031, 1021};  // 1052651 elements: not a multiple of 4
  const host<float> ha = random_host<float>({1021, 1031}, 41), hb = random_host<float>({1021}, 42),
                    hc = random_host<float>({1031, 1}, 43);
  const kiln::tensor a = upload(dev(), ha).t(), b = upload(dev(), hb), c = upload(dev(), hc);
  const std::vector<float> got = kiln::relu(a * b + c).to_vector<float>();
  EXPECT_EQ(stats().kernel_launches, 1u);
  ASSERT_EQ(got.size(), std::size_t(numel(shape)));
  std::size_t bad = 0;
  for (std::int64_t i = 0; i < 1031; ++i)
    for (std::int64_t j = 0; j < 1021; ++j) {
      // A multiply-add may be contracted into an FMA on the device: compare within a rounding.
      const double p = double(ha.v[std::size_t(j * 1031 + i)]) * hb.v[std::size_t(j)];
      const double v = p + hc.v[std::size_t(i)];
      const double want = v > 0 ? v : 0;
      bad += std::fabs(got[std::size_t(i * 1021 + j)] - want) >
             4e-7 * (std::fabs(p) + std::fabs(hc.v[std::size_t(i)]));
    }
  EXPECT_EQ(bad, 0u);
  const std::int64_t n = (std::int64_t(1) << 20) + 3;
  const std::vector<double> r =
      kiln::tensor::arange(dev(), 0, double(n), 1, kiln::scalar_type::f64).to_vector<double>();
  ASSERT_EQ(r.size(), std::size_t(n));
  for (std::size_t i = 0; i < r.size(); ++i)
    if (r[i] != double(i)) ++bad;
  EXPECT_EQ(bad, 0u);
  // 16- and 8-bit chains take 8 and 16 elements per item on GPUs (16 bytes in flight): each
  // element exactly once, the tail included (small integers: exact in bf16 and int8).
  std::vector<float> hf(std::size_t(n + 2));
  std::vector<std::int8_t> hi(hf.size());
  for (std::size_t i = 0; i < hf.size(); ++i) {
    hf[i] = float(int(i % 251) - 125);
    hi[i] = std::int8_t(int(i % 201) - 100);
  }
  const auto xb = kiln::tensor::from(dev(), hf, {n + 2}).to(kiln::scalar_type::bf16).eval();
  const auto xi = kiln::tensor::from(dev(), hi, {n + 2});
  const std::vector<float> gb =
      kiln::relu(xb * 2.f - 3.f).to(kiln::scalar_type::f32).to_vector<float>();
  const std::vector<std::int8_t> gi = (-xi).to(kiln::scalar_type::i8).to_vector<std::int8_t>();
  for (std::size_t i = 0; i < hf.size(); ++i) {
    bad += gb[i] != std::max(hf[i] * 2.f - 3.f, 0.f);
    bad += gi[i] != -hi[i];
  }
  EXPECT_EQ(bad, 0u);
}

TEST(TensorCodegen, GeneratedKernelCompilesForCuda) {
  KILN_SKIP_UNLESS_CUDA_COMPILE_ONLY();
  const kiln::device cpu = kiln::device::get("cpu");
  const kiln::tensor a = kiln::tensor::from(cpu, std::vector<float>(12, 1.f), {3, 4});
  const kiln::tensor b = kiln::tensor::from(cpu, std::vector<std::int8_t>(4, 2), {4});
  const kiln::tensor c = kiln::tensor::from(cpu, std::vector<bool>(3, true), {3, 1});
  const kiln::tensor e = kiln::where(c, kiln::relu(a.t().t() * b + 1.5f), kiln::clamp(-b, 0, 3));
  for (const kiln::tensor& x : {e, a.t() * 2.0, kiln::sigmoid(b) < kiln::abs(a)}) {
    const auto l = kiln::detail::lower(*x.impl());
    for (std::uint32_t items : {1u, 4u}) {
      const std::string src = kiln::detail::render_kernel(l, items);
      EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
    }
  }
}

// The 16-bit word forms (2, 4 and 8 lanes: uint32_t, uint2, uint4) compile for CUDA, with
// 16-bit, f32 and bool results.
TEST(TensorCodegen, WordLaneKernelsCompileForCuda) {
  KILN_SKIP_UNLESS_CUDA_COMPILE_ONLY();
  const kiln::device cpu = kiln::device::get("cpu");
  const kiln::tensor f = kiln::tensor::from(cpu, std::vector<float>(12, 0.5f), {3, 4});
  for (auto t : {kiln::scalar_type::bf16, kiln::scalar_type::f16}) {
    const kiln::tensor h = f.to(t).eval();
    // Strided forms too: a permuted view (head split), a bias row, a transposed input, a
    // column broadcast along the last dimension, f32 words.
    const kiln::tensor p = kiln::tensor::from(cpu, std::vector<float>(48, 0.5f), {2, 3, 8});
    const kiln::tensor hp = p.to(t).eval(), row = p.slice(0, 0, 1).slice(1, 0, 1).reshape({8});
    for (const kiln::tensor& x :
         {kiln::relu(h * h + h), h * f, h < h, f.to(t), hp.transpose(0, 1).contiguous(), hp + row,
          hp.transpose(0, 1) * 2.f, p.transpose(0, 1) + p.transpose(0, 1),
          hp.slice(2, 0, 3).transpose(1, 2) - hp.slice(2, 0, 3).transpose(1, 2),
          hp * hp.slice(2, 0, 1)}) {
      const auto l = kiln::detail::lower(*x.impl());
      for (std::uint32_t lanes : {2u, 4u, 8u}) {
        const std::string src = kiln::detail::render_kernel(l, 2, lanes);
        EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
      }
    }
  }
}

// Every operation added after the first slice, in each dtype it renders in, compiles for CUDA.
TEST(TensorCodegen, NewOperationsCompileForCuda) {
  KILN_SKIP_UNLESS_CUDA_COMPILE_ONLY();
  const kiln::device cpu = kiln::device::get("cpu");
  const kiln::tensor f = kiln::tensor::from(cpu, std::vector<float>(12, 0.5f), {3, 4});
  const kiln::tensor d = kiln::tensor::from(cpu, std::vector<double>(4, 0.25), {4});
  const kiln::tensor i = kiln::tensor::from(cpu, std::vector<std::int8_t>(4, 2), {4});
  std::vector<std::shared_ptr<kiln::detail::tensor_impl>> exprs;
  for (const kiln::tensor& x : {f, d, i}) {
    for (const kiln::tensor& e :
         {kiln::tan(x), kiln::rsqrt(x), kiln::square(x), kiln::floor(x), kiln::ceil(x),
          kiln::gelu(x), kiln::gelu(x, "tanh"), kiln::pow(x, x), kiln::pow(x, 2.f), kiln::pow(3, x),
          kiln::minimum(x, f.t().t()), kiln::maximum(x, 1)})
      exprs.push_back(e.impl());
  }
  for (auto t : {kiln::scalar_type::f32, kiln::scalar_type::f64}) {
    for (bool normal : {false, true})
      exprs.push_back(kiln::detail::random_expr(cpu, {2, 3}, 5, t, normal));
    exprs.push_back(kiln::detail::linspace_expr(cpu, -1, 1, 9, t));
  }
  for (const auto& x : exprs) {
    const std::string src = kiln::detail::render_kernel(kiln::detail::lower(*x));
    EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
  }
}

}  // namespace
}  // namespace tensor_test
