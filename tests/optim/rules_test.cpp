// Every optimizer and option against its double-precision model: several parameters of
// different shapes in one optimizer, several steps with fresh random gradients, f32 within a
// tolerance and f64 tightly. The learning rate changes between steps (what a schedule does).
#include "optim/optim_fixture.hpp"

namespace optim_test {
namespace {

class OptimRulesTest : public conformance::DeviceTest {};

template <class T>
void run_config(const kiln::device& dev, const config& c) {
  SCOPED_TRACE(c.name + ", " + kiln::type_name(kiln::scalar_type_of<T>));
  const auto& shapes = test_shapes();
  std::vector<kiln::tensor> params;
  std::vector<std::vector<double>> want;  // the model's parameters
  std::vector<std::vector<ref_state>> state;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    params.push_back(make_param<T>(dev, shapes[k], 100 + k));
    const std::vector<T> v = params.back().template to_vector<T>();
    want.emplace_back(v.begin(), v.end());
    state.emplace_back(v.size(), ref_state{});
  }
  kiln::optim::optimizer opt = c.make(params);
  const double tol = std::is_same_v<T, float> ? 2e-5 : 1e-12;
  for (std::int64_t t = 1; t <= 4; ++t) {
    if (t == 3) opt.set_lr(opt.lr() * 0.5);
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const std::vector<T> g = values<T>(shapes[k], 1000 * t + k);
      give_grad(params[k], g, (t + k) % 3 != 0);  // mostly in place, sometimes replaced
      for (std::size_t i = 0; i < g.size(); ++i)
        c.model(t, opt.lr(), want[k][i], double(g[i]), state[k][i]);
    }
    opt.step();
    EXPECT_EQ(opt.step_count(), t);
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      SCOPED_TRACE("step " + std::to_string(t) + ", parameter " + std::to_string(k));
      EXPECT_TRUE(conformance::elements_near(
          params[k].template to_vector<T>(), want[k],
          [&](std::uint64_t i) { return tol * std::max(1.0, std::fabs(want[k][i])); }));
    }
  }
}

TEST_P(OptimRulesTest, EveryRuleMatchesItsModel) {
  for (const config& c : all_configs()) {
    run_config<float>(dev(), c);
    if (dev().supports(kiln::feature::fp64)) run_config<double>(dev(), c);
  }
}

// An undefined gradient counts as zeros: plain SGD leaves the parameter, weight decay shrinks it.
TEST_P(OptimRulesTest, UndefinedGradientIsZero) {
  auto p = make_param<float>(dev(), {4}, 7);
  const std::vector<float> before = p.to_vector<float>();
  auto opt = kiln::optim::sgd({p}, {.lr = 0.5, .weight_decay = 0.1});
  p.set_grad({});
  opt.step();
  std::vector<double> want;
  for (float v : before) want.push_back(double(v) * (1 - 0.05));
  EXPECT_TRUE(
      conformance::elements_near(p.to_vector<float>(), want, [](std::uint64_t) { return 1e-5; }));
  ASSERT_TRUE(p.grad().defined());  // the slot again, holding zeros
  EXPECT_EQ(p.grad().to_vector<float>(), std::vector<float>(4, 0.f));
}

KILN_INSTANTIATE_OPTIM_PER_DEVICE(OptimRulesTest);

}  // namespace
}  // namespace optim_test
