// Bad input at kiln::optim's entry points not covered by state_test's Errors: hyper-parameters
// that are NaN (every range check must refuse them, not only negative values), set_lr(NaN),
// schedules with NaN factors, an optimizer handle that holds nothing. Runs on every device.
// docs/testing.md ("Bad input, by entry point") lists what is covered where.
#include "bad_input.hpp"

#include <cmath>

#include "optim/optim_fixture.hpp"

namespace {

using bad_input::throws;
using namespace kiln::optim;

class OptimBadInputTest : public conformance::DeviceTest {
 protected:
  kiln::tensor param() const {
    kiln::tensor p = kiln::tensor::ones(dev(), {4});
    p.requires_grad_();
    return p;
  }
};
KILN_INSTANTIATE_PER_DEVICE(OptimBadInputTest);

TEST_P(OptimBadInputTest, NanHyperParameters) {
  const double nan = std::nan("");
  const kiln::tensor p = param();
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)sgd({p}, {.lr = nan}); }, {"sgd", "lr"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)sgd({p}, {.momentum = nan}); }, {"momentum"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)sgd({p}, {.weight_decay = nan}); },
                                             {"weight_decay"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)adam({p}, {.beta1 = nan}); }, {"adam", "beta1"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)adam({p}, {.eps = nan}); }, {"eps"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)adamw({p}, {.beta2 = nan}); }, {"beta2"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)rmsprop({p}, {.alpha = nan}); },
                                             {"rmsprop", "alpha"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)adagrad({p}, {.lr_decay = nan}); },
                                             {"adagrad", "lr_decay"}));
  optimizer opt = sgd({p}, {.lr = 0.1});
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { opt.set_lr(nan); }, {"lr", "at least 0"}));
  EXPECT_EQ(opt.lr(), 0.1) << "a refused set_lr changed the rate";
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)step_lr(opt, 1, nan); }, {"gamma"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)cosine_annealing_lr(opt, 4, nan); }, {"eta_min"}));
}

TEST_P(OptimBadInputTest, EmptyOptimizerHandle) {
  optimizer none;
  const std::initializer_list<std::string> empty{"empty handle"};
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { none.step(); }, empty));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { none.zero_grad(); }, empty));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)none.lr(); }, empty));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { none.set_lr(0.1); }, empty));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)none.parameters(); }, empty));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)none.state_dict(); }, empty));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)step_lr(none, 1); }, empty));
}

}  // namespace
