// The fused design: one launch per (device, dtype) group for step() and zero_grad(), the
// parameters' own handles seeing the flat buffer, backward accumulating into it, and every
// step kernel variant compiling for CUDA too (NVRTC, compile-only here).
#include "optim/optim_fixture.hpp"
#include "optim/optim_impl.hpp"

namespace optim_test {
namespace {

class OptimFusionTest : public conformance::DeviceTest {
 protected:
  std::uint64_t launches() const { return kiln::last_tensor_stats().kernel_launches; }
};

// zero_grad: one fill per group; step: the update kernel and the step-count kernel per group.
TEST_P(OptimFusionTest, OneUpdateLaunchPerGroup) {
  std::vector<kiln::tensor> ps;
  for (std::size_t k = 0; k < test_shapes().size(); ++k)
    ps.push_back(make_param<float>(dev(), test_shapes()[k], 10 + k));
  auto opt = kiln::optim::adam(ps, {.lr = 0.1});
  for (int round = 0; round < 2; ++round) {
    opt.zero_grad();
    EXPECT_EQ(launches(), 1u);
    for (auto& p : ps) give_grad(p, values<float>(p.shape(), 20), true);
    opt.step();
    EXPECT_EQ(launches(), 2u);
    EXPECT_EQ(kiln::last_tensor_stats().programs_compiled, 0u);  // compiled at construction
  }
  if (!dev().supports(kiln::feature::fp64)) return;
  ps.push_back(make_param<double>(dev(), {7}, 30));  // a second group: f64
  auto two = kiln::optim::sgd(ps, {.lr = 0.1, .momentum = 0.9});
  two.zero_grad();
  EXPECT_EQ(launches(), 2u);
  two.step();
  EXPECT_EQ(launches(), 4u);
}

// Parameters on two devices are two groups, each one launch.
TEST(OptimDevicesTest, MixedDevicesAreSeparateGroups) {
  const std::vector<kiln::device> all = kiln::device::all();
  if (all.size() < 2) GTEST_SKIP() << "one device only";
  std::vector<kiln::tensor> ps{make_param<float>(all[0], {5}, 1), make_param<float>(all[1], {6}, 2),
                               make_param<float>(all[0], {3}, 3)};
  auto opt = kiln::optim::sgd(ps, {.lr = 1});
  for (auto& p : ps) give_grad(p, std::vector<float>(std::size_t(p.numel()), 1.f), true);
  std::vector<std::vector<float>> before;
  for (auto& p : ps) before.push_back(p.to_vector<float>());
  opt.step();
  // Per group: the step kernel and the one-item kernel that advances the step count.
  EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 4u);
  for (std::size_t k = 0; k < ps.size(); ++k) {
    std::vector<float> want = before[k];
    for (float& v : want) v -= 1.f;
    EXPECT_EQ(ps[k].to_vector<float>(), want);
    EXPECT_EQ(ps[k].get_device(), k == 1 ? all[1] : all[0]);
  }
}

// The user's handles (and views taken after construction) see the update; views taken before
// construction keep the old storage; a non-contiguous parameter becomes contiguous.
TEST_P(OptimFusionTest, ParametersKeepTheirHandles) {
  auto base = kiln::tensor::from(dev(), values<float>({3, 4}, 40), {3, 4});
  auto p = base.t();  // [4, 3] at strides [1, 4]: a leaf (base needs no gradient)
  p.requires_grad_();
  const kiln::tensor alias = p;
  const kiln::tensor early = p.slice(0, 0, 1);
  const std::vector<float> start = p.contiguous().to_vector<float>();
  auto opt = kiln::optim::sgd({p}, {.lr = 1});
  EXPECT_TRUE(p.is_contiguous());
  EXPECT_EQ(p.shape(), (shape_t{4, 3}));
  EXPECT_EQ(p.to_vector<float>(), start);
  const kiln::tensor late = p.slice(0, 0, 1);
  give_grad(p, std::vector<float>(12, 0.5f), true);
  opt.step();
  std::vector<float> want = start;
  for (float& v : want) v -= 0.5f;
  EXPECT_EQ(alias.to_vector<float>(), want);
  EXPECT_EQ(late.to_vector<float>(), std::vector<float>(want.begin(), want.begin() + 3));
  EXPECT_EQ(early.to_vector<float>(), std::vector<float>(start.begin(), start.begin() + 3));
  EXPECT_EQ(base.t().contiguous().to_vector<float>(), start);  // the old storage, unchanged
}

// backward after zero_grad accumulates into the flat gradient buffer: grad() stays the same
// tensor, and d/dp sum(p * p) = 2p each step.
TEST_P(OptimFusionTest, BackwardAccumulatesIntoTheSlot) {
  auto p = make_param<float>(dev(), {2, 3}, 50);
  auto q = make_param<float>(dev(), {4}, 51);
  auto opt = kiln::optim::sgd({p, q}, {.lr = 0.25});
  const kiln::tensor slot = p.grad();
  for (int round = 0; round < 3; ++round) {
    opt.zero_grad();
    EXPECT_EQ(p.grad().to_vector<float>(), std::vector<float>(6, 0.f));
    ((p * p).sum() + (q * 3.f).sum()).backward();
    EXPECT_EQ(p.grad().impl(), slot.impl());
    const std::vector<float> v = p.to_vector<float>();
    std::vector<float> two_p;
    for (float x : v) two_p.push_back(2 * x);
    EXPECT_EQ(p.grad().to_vector<float>(), two_p);
    EXPECT_EQ(q.grad().to_vector<float>(), std::vector<float>(4, 3.f));
    opt.step();
    EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 2u);  // the step and its count
    std::vector<float> want;
    for (float x : v) want.push_back(x - 0.25f * (2 * x));
    EXPECT_EQ(p.to_vector<float>(), want);
  }
  // Without zero_grad, a second backward adds to the first.
  opt.zero_grad();
  (p * p).sum().backward();
  (p * p).sum().backward();
  std::vector<float> four_p;
  for (float x : p.to_vector<float>()) four_p.push_back(4 * x);
  EXPECT_EQ(p.grad().to_vector<float>(), four_p);
}

// Every kernel variant of every rule, f32, f64 and the 16-bit master-weight forms, compiles
// through NVRTC as well.
TEST_P(OptimFusionTest, StepSourcesCompileEverywhere) {
  using kiln::scalar_type;
  for (const config& c : all_configs()) {
    auto opt = c.make({make_param<float>(dev(), {3}, 60)});
    for (const auto t : {scalar_type::f32, scalar_type::f64, scalar_type::bf16, scalar_type::f16})
      EXPECT_NO_THROW(
          conformance::compile_everywhere(kiln::optim::detail::step_source(opt.impl()->rule, t)))
          << c.name;
  }
}

// More elements than a GPU launch has items: the grid-stride loop covers the rest.
TEST_P(OptimFusionTest, LargeGroupOnGpu) {
  KILN_REQUIRE_GPU(dev());
  const shape_t shape{(1 << 21) + 3};
  auto p = make_param<float>(dev(), shape, 70);
  auto q = make_param<float>(dev(), {(1 << 20) + 1}, 71);
  const auto model = ref_adam(0.9, 0.999, 1e-8, 0, false, false);
  auto opt = kiln::optim::adam({p, q}, {.lr = 0.01});
  const std::vector<float> v = p.to_vector<float>();
  std::vector<double> want(v.begin(), v.end());
  std::vector<ref_state> s(v.size(), ref_state{});
  for (std::int64_t t = 1; t <= 2; ++t) {
    const std::vector<float> g = values<float>(shape, 80 + t);
    give_grad(p, g, true);
    give_grad(q, values<float>(q.shape(), 90 + t), true);
    for (std::size_t i = 0; i < g.size(); ++i) model(t, 0.01, want[i], g[i], s[i]);
    opt.step();
    EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 2u);  // the step and its count
  }
  EXPECT_TRUE(conformance::elements_near(p.to_vector<float>(), want, [&](std::uint64_t i) {
    return 2e-5 * std::max(1.0, std::fabs(want[i]));
  }));
}

KILN_INSTANTIATE_OPTIM_PER_DEVICE(OptimFusionTest);

}  // namespace
}  // namespace optim_test
