// grad_scaler with its state on the device, per device: a clean step equals the plain step on
// unscaled gradients (f32 and bf16 groups in one optimizer), an overflowing step changes
// nothing (parameters, state, step count) and backs off, growth after growth_interval, and the
// steady state reads nothing back to the host.
#include <kiln/optim/clip.hpp>
#include <kiln/optim/grad_scaler.hpp>

#include "optim/optim_fixture.hpp"
#include "optim/scaler_state.hpp"

namespace optim_test {
namespace {

using kiln::scalar_type;
using kiln::optim::grad_scaler;

class GradScalerTest : public conformance::DeviceTest {
 protected:
  // An f32 and a bf16 parameter (two groups) with the same seeded values in two copies.
  std::vector<kiln::tensor> params() const {
    auto a = make_param<float>(dev(), {5, 3}, 1);
    auto b = kiln::tensor::from(dev(), values<float>({7}, 2), {7}).to(scalar_type::bf16);
    b.requires_grad_();
    return {a, b};
  }
  // Gradients g * factor (factor a power of two: unscaling is exact), inf at element 2 of the
  // first when poisoned.
  void give(const std::vector<kiln::tensor>& ps, int seed, float factor, bool poison) const {
    kiln::no_grad off;
    for (std::size_t k = 0; k < ps.size(); ++k) {
      std::vector<float> g = values<float>(ps[k].shape(), 100 * seed + k, -1.f, 1.f);
      for (float& v : g) v *= factor;
      if (poison && k == 0) g[2] = INFINITY;
      kiln::copy_(ps[k].grad(), kiln::tensor::from(dev(), g, ps[k].shape()).to(ps[k].dtype()));
    }
  }
};

std::vector<float> as_floats(const kiln::tensor& t) {
  return t.to(scalar_type::f32).to_vector<float>();
}

std::vector<std::vector<float>> snapshot(const kiln::optim::optimizer& opt) {
  std::vector<std::vector<float>> out;
  for (const auto& p : opt.parameters()) out.push_back(as_floats(p));
  for (const auto& [name, t] : opt.state_dict()) out.push_back(as_floats(t));
  return out;
}

TEST_P(GradScalerTest, OverflowSkipsTheStepAndBacksOff) {
  auto scaled = params(), plain = params();
  auto opt = kiln::optim::adam(scaled, {.lr = 0.1});
  auto ref = kiln::optim::adam(plain, {.lr = 0.1});
  grad_scaler scaler({.init_scale = 1024, .growth_interval = 100});
  // A clean step: the same as the plain step on the unscaled gradients.
  give(scaled, 1, 1024, false);
  give(plain, 1, 1, false);
  EXPECT_TRUE(scaler.step(opt));
  ref.step();
  scaler.update();
  EXPECT_FALSE(scaler.last_step_skipped());
  EXPECT_EQ(snapshot(opt), snapshot(ref));
  EXPECT_EQ(as_floats(scaled[0].grad()), as_floats(plain[0].grad())) << "unscaled in place";
  // inf in one gradient: nothing changes, the step count included; the scale halves.
  const auto before = snapshot(opt);
  give(scaled, 2, 1024, true);
  const grad_scaler::step_result r = scaler.step(opt);
  scaler.update();
  EXPECT_FALSE(r);
  EXPECT_TRUE(scaler.last_step_skipped());
  EXPECT_EQ(snapshot(opt), before);
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_EQ(scaler.get_scale(), 512);
  // The next clean step is Adam's second (bias corrections of t = 2): the plain run's second.
  give(scaled, 3, 512, false);
  give(plain, 3, 1, false);
  EXPECT_TRUE(scaler.step(opt));
  ref.step();
  scaler.update();
  EXPECT_EQ(opt.step_count(), 2);
  EXPECT_EQ(snapshot(opt), snapshot(ref));
  EXPECT_THROW((void)bool(r), kiln::invalid_argument) << "a result read after a later step";
  // NaN skips too.
  give(scaled, 4, 512, false);
  {
    kiln::no_grad off;
    kiln::copy_(scaled[1].grad(), kiln::tensor::full(dev(), {7}, scalar_type::bf16, NAN));
  }
  EXPECT_FALSE(scaler.step(opt));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 256);
}

// One scaler over two optimizers (PyTorch's usage): an overflow in the first one's gradients
// skips that step only, and the update backs off even though the last step was clean.
TEST_P(GradScalerTest, AnOverflowInAnyOptimizerBacksOffAtTheUpdate) {
  auto first = params(), second = params();
  auto a = kiln::optim::sgd(first, {.lr = 0.1});
  auto b = kiln::optim::sgd(second, {.lr = 0.1});
  grad_scaler scaler({.init_scale = 8, .growth_interval = 1});
  give(first, 1, 8, true);
  give(second, 2, 8, false);
  EXPECT_FALSE(scaler.step(a));
  EXPECT_TRUE(scaler.step(b));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 4) << "the first optimizer's overflow was forgotten";
  // Clean steps of both: growth (interval 1) and the flag cleared by the update.
  give(first, 3, 4, false);
  give(second, 4, 4, false);
  EXPECT_TRUE(scaler.step(a));
  EXPECT_TRUE(scaler.step(b));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 8);
}

TEST_P(GradScalerTest, GrowsAfterGrowthInterval) {
  auto ps = params();
  auto opt = kiln::optim::sgd(ps, {.lr = 0.01, .momentum = 0.9});
  grad_scaler scaler({.init_scale = 8, .growth_factor = 4, .growth_interval = 3});
  std::vector<double> scales;
  for (int i = 0; i < 7; ++i) {
    give(ps, i, 1, i == 4);  // step 5 overflows
    scaler.step(opt);
    scaler.update();
    scales.push_back(scaler.get_scale());
  }
  EXPECT_EQ(scales, (std::vector<double>{8, 8, 32, 32, 16, 16, 16}));
  EXPECT_EQ(opt.step_count(), 6);
  // A scale that would overflow f32 does not grow.
  grad_scaler top({.init_scale = 3e38, .growth_interval = 1});
  give(ps, 9, 1, false);
  top.step(opt);
  top.update();
  EXPECT_EQ(top.get_scale(), double(3e38f));
}

// Steady state: scale(loss), backward, step, update read nothing back (every read of the
// scaler goes through one counted function; the optimizer's step reads nothing either).
TEST_P(GradScalerTest, SteadyStateReadsNothingBack) {
  auto ps = params();
  auto opt = kiln::optim::adamw(ps, {.lr = 1e-3});
  grad_scaler scaler;
  const std::uint64_t reads = kiln::optim::detail::scaler_host_reads();
  for (int i = 0; i < 5; ++i) {
    opt.zero_grad();
    kiln::tensor loss = (ps[0] * ps[0]).sum() + (ps[1] * ps[1]).to(scalar_type::f32).sum();
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  }
  EXPECT_EQ(kiln::optim::detail::scaler_host_reads(), reads);
  EXPECT_EQ(scaler.get_scale(), 65536);  // reads back once
  EXPECT_EQ(kiln::optim::detail::scaler_host_reads(), reads + 1);
  EXPECT_EQ(opt.step_count(), 5);
  // The gradients were unscaled: 2 p for the f32 parameter.
  const auto p = as_floats(ps[0]), g = as_floats(ps[0].grad());
  for (std::size_t i = 0; i < p.size(); ++i) EXPECT_NEAR(g[i], 2 * p[i], 5e-3);
}

// unscale_ then clip (PyTorch's recipe): the gradients are the unscaled ones when read, the
// clip sees their true norm, and step() does not unscale again; an overflow found by unscale_
// skips the step and backs off at the update.
TEST_P(GradScalerTest, UnscaleThenClipMatchesClippingUnscaledGradients) {
  auto scaled = params(), plain = params();
  auto opt = kiln::optim::adam(scaled, {.lr = 0.1});
  auto ref = kiln::optim::adam(plain, {.lr = 0.1});
  grad_scaler scaler({.init_scale = 1024, .growth_interval = 100});
  for (int step = 1; step <= 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    give(scaled, step, 1024, false);
    give(plain, step, 1, false);
    scaler.unscale_(opt);
    for (std::size_t k = 0; k < scaled.size(); ++k)
      EXPECT_EQ(as_floats(scaled[k].grad()), as_floats(plain[k].grad())) << k;
    const float n1 = kiln::optim::clip_grad_norm_(opt, 0.5).item<float>();
    const float n2 = kiln::optim::clip_grad_norm_(ref, 0.5).item<float>();
    EXPECT_EQ(n1, n2);
    EXPECT_GT(n1, 0.5f);  // the clip scaled something
    EXPECT_TRUE(scaler.step(opt));
    ref.step();
    scaler.update();
    EXPECT_EQ(snapshot(opt), snapshot(ref));
  }
  // An overflow found by unscale_: the step is skipped and the update backs off.
  const auto before = snapshot(opt);
  give(scaled, 3, 1024, true);
  scaler.unscale_(opt);
  EXPECT_FALSE(scaler.step(opt));
  EXPECT_EQ(snapshot(opt), before);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 512.0);
}

TEST_P(GradScalerTest, UnscaleMisuseIsAnError) {
  auto pa = params(), pb = params();
  auto a = kiln::optim::sgd(pa, {.lr = 0.1});
  auto b = kiln::optim::sgd(pb, {.lr = 0.1});
  grad_scaler scaler({.init_scale = 8});
  give(pa, 1, 8, false);
  give(pb, 1, 8, false);
  scaler.unscale_(a);
  EXPECT_THROW(scaler.unscale_(a), kiln::invalid_argument);  // twice before update()
  EXPECT_THROW(scaler.step(b), kiln::invalid_argument);      // a is unscaled, not stepped
  EXPECT_THROW(scaler.unscale_(b), kiln::invalid_argument);
  EXPECT_TRUE(scaler.step(a));
  EXPECT_TRUE(scaler.step(b));                               // unscales b itself
  EXPECT_THROW(scaler.unscale_(a), kiln::invalid_argument);  // still before update()
  scaler.update();
  give(pa, 2, 8, false);
  scaler.unscale_(a);  // allowed again after update()
  EXPECT_TRUE(scaler.step(a));
  // Disabled: unscale_ does nothing, step steps.
  grad_scaler off({.enabled = false});
  off.unscale_(a);
  off.unscale_(a);
  EXPECT_TRUE(off.step(a));
}

// An optimizer unscale_()d and then dropped unstepped leaves nothing behind: one made next
// (likely at the dropped one's address) is not mistaken for it, so its step() unscales its own
// gradients and matches the plain step.
TEST_P(GradScalerTest, ADroppedUnscaledOptimizerIsNotMistakenForANewOne) {
  grad_scaler scaler({.init_scale = 1024, .growth_interval = 100});
  {
    auto pa = params();
    auto a = kiln::optim::sgd(pa, {.lr = 0.1});
    give(pa, 1, 1024, false);
    scaler.unscale_(a);
  }
  auto scaled = params(), plain = params();
  auto opt = kiln::optim::sgd(scaled, {.lr = 0.1});
  auto ref = kiln::optim::sgd(plain, {.lr = 0.1});
  give(scaled, 2, 1024, false);
  give(plain, 2, 1, false);
  EXPECT_TRUE(scaler.step(opt));
  ref.step();
  EXPECT_EQ(snapshot(opt), snapshot(ref));
}

TEST_P(GradScalerTest, BadInput) {
  EXPECT_THROW(grad_scaler({.init_scale = 1e39}), kiln::invalid_argument);  // inf in f32
  EXPECT_THROW(grad_scaler({.growth_interval = 0}), kiln::invalid_argument);
  grad_scaler scaler;
  EXPECT_THROW(scaler.scale({}), kiln::invalid_argument);
  EXPECT_FALSE(scaler.last_step_skipped());
  EXPECT_EQ(scaler.get_scale(), 65536);  // before any state: the option
  // Disabled: passes through, steps.
  auto ps = params();
  auto opt = kiln::optim::sgd(ps, {.lr = 0.1});
  grad_scaler off({.enabled = false});
  give(ps, 1, 1, true);
  EXPECT_TRUE(off.step(opt));
  EXPECT_EQ(opt.step_count(), 1);
}

// The scaler's kernels compile through NVRTC as well (compile-only here).
TEST_P(GradScalerTest, SourcesCompileEverywhere) {
  for (const auto t : {scalar_type::f32, scalar_type::f64, scalar_type::bf16, scalar_type::f16})
    EXPECT_NO_THROW(conformance::compile_everywhere(kiln::optim::detail::unscale_source(t)));
  EXPECT_NO_THROW(conformance::compile_everywhere(kiln::optim::detail::update_source));
}

KILN_INSTANTIATE_OPTIM_PER_DEVICE(GradScalerTest);

}  // namespace
}  // namespace optim_test
