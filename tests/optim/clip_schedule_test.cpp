// What a transformer's training loop adds to the optimizers: clip_grad_norm_ (the global norm
// over every group, bf16 gradients included, scaling only when above max_norm, nothing read
// back), AdamW without weight decay on chosen parameters (decay_split: biases and norms), and
// the per-step warm-up + cosine schedule; bad input.
#include <cmath>
#include <kiln/half.hpp>
#include <kiln/optim/clip.hpp>
#include <numbers>

#include "optim/optim_fixture.hpp"

namespace optim_test {
namespace {

using kiln::scalar_type;

class OptimClipTest : public conformance::DeviceTest {};
KILN_INSTANTIATE_OPTIM_PER_DEVICE(OptimClipTest);

std::vector<double> grads_of(const kiln::tensor& p) {
  const std::vector<float> f = p.grad().to(scalar_type::f32).to_vector<float>();
  return {f.begin(), f.end()};
}

TEST_P(OptimClipTest, ClipGradNormScalesEveryGroupByTheGlobalNorm) {
  for (double ratio : {0.25, 4.0}) {  // clipped, and left alone
    SCOPED_TRACE("max_norm = " + std::to_string(ratio) + " x norm");
    auto a = make_param<float>(dev(), {5, 3}, 11), b = make_param<float>(dev(), {4}, 12);
    auto h = kiln::tensor::from(dev(), values<float>({7}, 13), {7}).to(scalar_type::bf16);
    h.requires_grad_();
    kiln::optim::optimizer opt = kiln::optim::sgd({a, b, h}, {.lr = 0.1});
    give_grad<float>(a, values<float>({5, 3}, 21), true);
    give_grad<float>(b, values<float>({4}, 22), false);  // replaced: reclaimed first
    {
      kiln::no_grad off;
      kiln::copy_(h.grad(), kiln::tensor::from(dev(), values<float>({7}, 23), {7}));
    }
    std::vector<std::vector<double>> before{grads_of(a), grads_of(b), grads_of(h)};
    double sq = 0;
    for (const auto& g : before)
      for (double v : g) sq += v * v;
    const double norm = std::sqrt(sq), max_norm = ratio * norm;
    const kiln::tensor got = kiln::optim::clip_grad_norm_(opt, max_norm);
    EXPECT_EQ(got.dim(), 0);
    EXPECT_EQ(got.dtype(), scalar_type::f32);
    EXPECT_NEAR(got.item<float>(), norm, 1e-5 * norm);
    const double factor = std::min(1.0, max_norm / (norm + 1e-6));
    const kiln::tensor* ps[] = {&a, &b, &h};
    for (int k = 0; k < 3; ++k) {
      const std::vector<double> after = grads_of(*ps[k]);
      const double tol = k == 2 ? 1.0 / 128 : 1e-6;  // bf16 rounds the scaled value
      for (std::size_t i = 0; i < after.size(); ++i)
        EXPECT_NEAR(after[i], before[k][i] * factor, tol * (std::abs(before[k][i]) + 1e-3))
            << "parameter " << k << " element " << i;
    }
  }
}

TEST_P(OptimClipTest, AdamwExemptsChosenParametersFromWeightDecay) {
  auto w = make_param<float>(dev(), {3, 4}, 31), b = make_param<float>(dev(), {4}, 32);
  const std::vector<float> w0 = w.to_vector<float>(), b0 = b.to_vector<float>();
  const std::vector<kiln::tensor> exempt = kiln::optim::decay_split({w, b});
  ASSERT_EQ(exempt.size(), 1u);
  EXPECT_TRUE(exempt[0].impl() == b.impl());
  const double lr = 0.1, wd = 0.5;
  kiln::optim::optimizer opt =
      kiln::optim::adamw({w, b}, {.lr = lr, .weight_decay = wd, .no_weight_decay = exempt});
  for (int s = 0; s < 3; ++s) {  // zero gradients: only weight decay moves anything
    opt.zero_grad();
    opt.step();
  }
  const std::vector<float> w3 = w.to_vector<float>(), b3 = b.to_vector<float>();
  const double shrink = std::pow(1 - lr * wd, 3);
  for (std::size_t i = 0; i < w0.size(); ++i) EXPECT_NEAR(w3[i], w0[i] * shrink, 1e-5);
  for (std::size_t i = 0; i < b0.size(); ++i) EXPECT_EQ(b3[i], b0[i]);
  // State survives a round trip with the exempt group in place.
  kiln::optim::optimizer again =
      kiln::optim::adamw({make_param<float>(dev(), {3, 4}, 31), make_param<float>(dev(), {4}, 32)},
                         {.lr = lr, .weight_decay = wd});
  again.load_state_dict(opt.state_dict());
  EXPECT_EQ(again.step_count(), 3);
}

TEST_P(OptimClipTest, BadInputGetsClearErrors) {
  auto w = make_param<float>(dev(), {3}, 41);
  kiln::optim::optimizer opt = kiln::optim::sgd({w});
  EXPECT_THROW(kiln::optim::clip_grad_norm_(opt, 0), kiln::invalid_argument);
  EXPECT_THROW(kiln::optim::clip_grad_norm_(opt, -1), kiln::invalid_argument);
  EXPECT_THROW(kiln::optim::clip_grad_norm_(opt, INFINITY), kiln::invalid_argument);
  kiln::optim::optimizer empty;
  EXPECT_THROW(kiln::optim::clip_grad_norm_(empty, 1), kiln::invalid_argument);
  auto stranger = make_param<float>(dev(), {2}, 42);
  try {
    kiln::optim::adamw({w}, {.no_weight_decay = {stranger}});
    ADD_FAILURE() << "a no_weight_decay tensor outside the parameters was accepted";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("no_weight_decay[0]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(kiln::optim::warmup_cosine_lr(opt, 10, 10), kiln::invalid_argument);
  EXPECT_THROW(kiln::optim::warmup_cosine_lr(opt, -1, 10), kiln::invalid_argument);
}

TEST(OptimSchedule, WarmupThenCosine) {
  auto w = kiln::tensor::zeros(kiln::device::host(), {2}).requires_grad_();
  kiln::optim::optimizer opt = kiln::optim::adamw({w}, {.lr = 6e-4});
  kiln::optim::warmup_cosine_lr sched(opt, 4, 14, 6e-5);
  std::vector<double> seen{opt.lr()};
  for (int s = 0; s < 16; ++s) {
    sched.step();
    seen.push_back(opt.lr());
  }
  for (int s = 0; s < 4; ++s) EXPECT_DOUBLE_EQ(seen[s], 6e-4 * (s + 1) / 4);  // warm-up
  EXPECT_DOUBLE_EQ(seen[4], 6e-4);                                            // the peak
  EXPECT_NEAR(seen[9], 6e-5 + (6e-4 - 6e-5) * (1 + std::cos(std::numbers::pi * 0.5)) / 2, 1e-15);
  for (int s = 14; s <= 16; ++s) EXPECT_DOUBLE_EQ(seen[s], 6e-5);  // eta_min after total
  for (int s = 5; s < 14; ++s) EXPECT_LT(seen[s], seen[s - 1]);    // decreasing
  EXPECT_EQ(sched.last_step(), 16);
}

}  // namespace
}  // namespace optim_test
