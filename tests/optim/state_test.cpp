// Learning-rate schedules against their closed forms, state_dict round trips (an interrupted
// run resumed from the saved state equals the uninterrupted one, bit for bit), and errors.
#include <numbers>

#include "optim/optim_fixture.hpp"

namespace optim_test {
namespace {

class OptimStateTest : public conformance::DeviceTest {};

std::vector<kiln::tensor> fresh_params(const kiln::device& dev) {
  std::vector<kiln::tensor> ps;
  for (std::size_t k = 0; k < test_shapes().size(); ++k)
    ps.push_back(make_param<float>(dev, test_shapes()[k], 200 + k));
  return ps;
}

void step_with_grads(kiln::optim::optimizer& opt, std::int64_t t) {
  opt.zero_grad();
  for (std::size_t k = 0; k < opt.parameters().size(); ++k) {
    const kiln::tensor& p = opt.parameters()[k];
    give_grad(p, values<float>(p.shape(), 300 * t + k), true);
  }
  opt.step();
}

TEST_P(OptimStateTest, StepLrClosedForm) {
  auto opt = kiln::optim::sgd(fresh_params(dev()), {.lr = 0.2});
  kiln::optim::step_lr sched(opt, 3, 0.5);
  EXPECT_EQ(sched.last_lr(), 0.2);
  for (int e = 1; e <= 10; ++e) {
    sched.step();
    const double want = 0.2 * std::pow(0.5, e / 3);
    EXPECT_DOUBLE_EQ(sched.last_lr(), want) << "epoch " << e;
    EXPECT_EQ(opt.lr(), sched.last_lr());
    EXPECT_EQ(sched.last_epoch(), e);
  }
}

TEST_P(OptimStateTest, CosineAnnealingClosedForm) {
  auto opt = kiln::optim::adam(fresh_params(dev()), {.lr = 0.1});
  kiln::optim::cosine_annealing_lr sched(opt, 5, 0.001);
  for (int e = 1; e <= 12; ++e) {
    sched.step();
    const double want = 0.001 + (0.1 - 0.001) * (1 + std::cos(std::numbers::pi * e / 5)) / 2;
    EXPECT_NEAR(sched.last_lr(), want, 1e-15) << "epoch " << e;
    EXPECT_EQ(opt.lr(), sched.last_lr());
  }
  EXPECT_NEAR(opt.lr(), 0.001 + 0.099 * (1 + std::cos(std::numbers::pi * 12 / 5)) / 2, 1e-15);
}

// Three steps, save, three more; against: a new optimizer over parameters holding the saved
// values, loaded from the saved state (moved to the host and widened to double on the way, as
// a checkpoint file would), then the same three steps.
TEST_P(OptimStateTest, StateDictRoundTrip) {
  using namespace kiln::optim;
  const std::vector<std::pair<std::string, std::function<optimizer(std::vector<kiln::tensor>)>>>
      makers{
          {"sgd", [](auto ps) { return sgd(ps, {.lr = 0.1, .momentum = 0.9}); }},
          {"adam", [](auto ps) { return adam(ps, {.lr = 0.01, .amsgrad = true}); }},
          {"adamw", [](auto ps) { return adamw(ps, {.lr = 0.01}); }},
          {"rmsprop", [](auto ps) { return rmsprop(ps, {.momentum = 0.5, .centered = true}); }},
          {"adagrad", [](auto ps) { return adagrad(ps, {.lr_decay = 0.1}); }},
      };
  for (const auto& [name, make] : makers) {
    SCOPED_TRACE(name);
    optimizer a = make(fresh_params(dev()));
    step_lr sched(a, 2, 0.5);
    for (std::int64_t t = 1; t <= 3; ++t) step_with_grads(a, t), sched.step();
    const state_dict_t saved = a.state_dict();
    std::vector<std::vector<float>> at_save;
    for (const auto& p : a.parameters()) at_save.push_back(p.to_vector<float>());
    for (std::int64_t t = 4; t <= 6; ++t) step_with_grads(a, t);

    std::vector<kiln::tensor> ps;
    for (std::size_t k = 0; k < at_save.size(); ++k) {
      ps.push_back(kiln::tensor::from(dev(), at_save[k], test_shapes()[k]));
      ps.back().requires_grad_();
    }
    optimizer b = make(ps);
    state_dict_t moved;
    for (const auto& [key, t] : saved) {
      if (key == "step")
        moved.emplace_back(key, t);
      else
        moved.emplace_back(
            key, kiln::tensor::from(kiln::device::host(),
                                    t.to(kiln::scalar_type::f64).to_vector<double>(), t.shape()));
    }
    b.load_state_dict(moved);
    EXPECT_EQ(b.step_count(), 3);
    EXPECT_EQ(b.lr(), a.lr());
    for (std::int64_t t = 4; t <= 6; ++t) step_with_grads(b, t);
    for (std::size_t k = 0; k < ps.size(); ++k)
      EXPECT_EQ(ps[k].to_vector<float>(), a.parameters()[k].to_vector<float>()) << "param " << k;
  }
}

TEST_P(OptimStateTest, StateDictNames) {
  auto ps = fresh_params(dev());
  auto names = [](const kiln::optim::state_dict_t& s) {
    std::vector<std::string> n;
    for (const auto& e : s) n.push_back(e.first);
    return n;
  };
  auto opt = kiln::optim::adam({ps[0], ps[1]}, {.amsgrad = true});
  const auto s = opt.state_dict();
  EXPECT_EQ(names(s),
            (std::vector<std::string>{"step", "lr", "state.0.exp_avg", "state.0.exp_avg_sq",
                                      "state.0.max_exp_avg_sq", "state.1.exp_avg",
                                      "state.1.exp_avg_sq", "state.1.max_exp_avg_sq"}));
  EXPECT_EQ(s[0].second.dtype(), kiln::scalar_type::i64);
  EXPECT_EQ(s[0].second.dim(), 0);
  EXPECT_EQ(s[2].second.shape(), ps[0].shape());
  EXPECT_EQ(names(kiln::optim::sgd({ps[2]}).state_dict()),
            (std::vector<std::string>{"step", "lr"}));
  EXPECT_EQ(names(kiln::optim::rmsprop({ps[3]}, {.momentum = 0.1, .centered = true}).state_dict()),
            (std::vector<std::string>{"step", "lr", "state.0.square_avg", "state.0.grad_avg",
                                      "state.0.momentum_buffer"}));
  auto ag =
      kiln::optim::adagrad({make_param<float>(dev(), {2}, 1)}, {.initial_accumulator_value = 0.25});
  EXPECT_EQ(ag.state_dict()[2].second.to_vector<float>(), std::vector<float>(2, 0.25f));
}

TEST_P(OptimStateTest, Errors) {
  using namespace kiln::optim;
  EXPECT_THROW(adam({}), kiln::invalid_argument);
  const auto plain = kiln::tensor::from(dev(), std::vector<float>{1, 2});
  EXPECT_THROW(sgd({plain}), kiln::invalid_argument);  // no requires_grad
  EXPECT_THROW(sgd({kiln::tensor()}), kiln::invalid_argument);
  auto p = make_param<float>(dev(), {3}, 5);
  EXPECT_THROW(sgd({p * 2.f}), kiln::invalid_argument);  // not a leaf
  EXPECT_THROW(sgd({p, p}), kiln::invalid_argument);
  EXPECT_THROW(sgd({p}, {.lr = -1}), kiln::invalid_argument);
  EXPECT_THROW(sgd({p}, {.momentum = -0.1}), kiln::invalid_argument);
  EXPECT_THROW(sgd({p}, {.nesterov = true}), kiln::invalid_argument);
  EXPECT_THROW(sgd({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               kiln::invalid_argument);
  EXPECT_THROW(adam({p}, {.beta1 = 1}), kiln::invalid_argument);
  EXPECT_THROW(adam({p}, {.beta2 = -0.1}), kiln::invalid_argument);
  EXPECT_THROW(adamw({p}, {.eps = -1}), kiln::invalid_argument);
  EXPECT_THROW(adamw({p}, {.weight_decay = -1}), kiln::invalid_argument);
  EXPECT_THROW(rmsprop({p}, {.alpha = -1}), kiln::invalid_argument);
  EXPECT_THROW(adagrad({p}, {.lr_decay = -1}), kiln::invalid_argument);
  EXPECT_THROW(adagrad({p}, {.initial_accumulator_value = -1}), kiln::invalid_argument);
  EXPECT_THROW(optimizer().step(), kiln::invalid_argument);

  auto opt = adam({p});
  EXPECT_THROW(opt.set_lr(-0.5), kiln::invalid_argument);
  EXPECT_THROW(step_lr(opt, 0), kiln::invalid_argument);
  EXPECT_THROW(cosine_annealing_lr(opt, 0), kiln::invalid_argument);
  state_dict_t s = opt.state_dict();
  state_dict_t wrong_shape = s;
  wrong_shape[2].second = kiln::tensor::zeros(dev(), {4});
  EXPECT_THROW(opt.load_state_dict(wrong_shape), kiln::shape_error);
  state_dict_t missing(s.begin(), s.end() - 1);
  EXPECT_THROW(opt.load_state_dict(missing), kiln::invalid_argument);
  state_dict_t extra = s;
  extra.emplace_back("state.1.exp_avg", kiln::tensor::zeros(dev(), {3}));
  EXPECT_THROW(opt.load_state_dict(extra), kiln::invalid_argument);
  state_dict_t bad_step = s;
  bad_step[0].second = kiln::tensor::from(dev(), std::vector<double>{-1}, {});
  EXPECT_THROW(opt.load_state_dict(bad_step), kiln::invalid_argument);
  EXPECT_EQ(opt.step_count(), 0);  // nothing was written by the refused loads
  EXPECT_NO_THROW(opt.load_state_dict(s));
}

KILN_INSTANTIATE_OPTIM_PER_DEVICE(OptimStateTest);

}  // namespace
}  // namespace optim_test
