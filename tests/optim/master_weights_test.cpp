// bf16/f16 parameters with f32 master weights: every rule against its double-precision model
// (the master within f32's tolerance, the 16-bit parameter exactly the rounding of the master),
// beside f32 parameters in the same optimizer; one launch per group; state_dict round trips the
// master; a parameter written from outside is adopted; updates below half a 16-bit ulp
// accumulate instead of rounding away; bad input.
#include <kiln/half.hpp>

#include "optim/optim_fixture.hpp"
#include "optim/optim_impl.hpp"

namespace optim_test {
namespace {

using kiln::scalar_type;

class OptimMasterTest : public conformance::DeviceTest {};

// A 16-bit leaf holding the rounding of seeded values in [-4, 4].
kiln::tensor make_param16(const kiln::device& dev, scalar_type t, const shape_t& shape,
                          std::uint64_t seed) {
  auto p = kiln::tensor::from(dev, values<float>(shape, seed), shape).to(t).contiguous();
  p.requires_grad_();
  return p;
}

// The values of a 16-bit tensor as doubles (exact).
std::vector<double> as_doubles(const kiln::tensor& t) {
  const std::vector<float> f = t.to(scalar_type::f32).to_vector<float>();
  return {f.begin(), f.end()};
}

// The 16-bit roundings of a gradient's values, as floats (what the 16-bit grad holds).
std::vector<float> rounded(scalar_type t, std::vector<float> v) {
  for (float& x : v) x = t == scalar_type::bf16 ? float(kiln::bfloat16(x)) : float(kiln::half(x));
  return v;
}

std::uint16_t bits_of(scalar_type t, float v) {
  return t == scalar_type::bf16 ? kiln::bfloat16(v).bits : kiln::half(v).bits;
}

// The f32 master of parameter k, from the state dict.
std::vector<float> master_of(const kiln::optim::optimizer& opt, std::size_t k) {
  const std::string name = "state." + std::to_string(k) + ".master";
  for (const auto& [n, t] : opt.state_dict())
    if (n == name) {
      EXPECT_EQ(t.dtype(), scalar_type::f32) << name;
      return t.to_vector<float>();
    }
  ADD_FAILURE() << name << " is not in the state dict";
  return {};
}

void run_config(const kiln::device& dev, const config& c, scalar_type t) {
  SCOPED_TRACE(c.name + ", " + kiln::type_name(t));
  const auto& shapes = test_shapes();
  std::vector<kiln::tensor> params;
  std::vector<std::vector<double>> want;
  std::vector<std::vector<ref_state>> state;
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    // The last parameter is f32: a second group in the same optimizer.
    const bool f32 = k + 1 == shapes.size();
    params.push_back(f32 ? make_param<float>(dev, shapes[k], 100 + k)
                         : make_param16(dev, t, shapes[k], 100 + k));
    want.push_back(as_doubles(params.back()));
    state.emplace_back(want.back().size(), ref_state{});
  }
  kiln::optim::optimizer opt = c.make(params);
  for (std::int64_t step = 1; step <= 4; ++step) {
    if (step == 3) opt.set_lr(opt.lr() * 0.5);
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const kiln::tensor& p = params[k];
      std::vector<float> g = values<float>(shapes[k], 1000 * step + k);
      if (p.dtype() != scalar_type::f32) g = rounded(t, g);
      const auto gt = kiln::tensor::from(dev, g, p.shape()).to(p.dtype());
      if ((step + k) % 3 != 0) {
        kiln::no_grad off;
        kiln::copy_(p.grad(), gt);  // in place, into the slot
      } else {
        p.set_grad(gt);  // replaced: step() copies it in
      }
      for (std::size_t i = 0; i < g.size(); ++i)
        c.model(step, opt.lr(), want[k][i], double(g[i]), state[k][i]);
    }
    opt.step();
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      SCOPED_TRACE("step " + std::to_string(step) + ", parameter " + std::to_string(k));
      const kiln::tensor& p = params[k];
      auto tol = [&](std::uint64_t i) { return 2e-5 * std::max(1.0, std::fabs(want[k][i])); };
      if (p.dtype() == scalar_type::f32) {
        EXPECT_TRUE(conformance::elements_near(p.to_vector<float>(), want[k], tol));
        continue;
      }
      ASSERT_EQ(p.dtype(), t);
      const std::vector<float> master = master_of(opt, k);
      EXPECT_TRUE(conformance::elements_near(master, want[k], tol));
      const std::vector<double> got = as_doubles(p);
      ASSERT_EQ(got.size(), master.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(bits_of(t, float(got[i])), bits_of(t, master[i]))
            << "element " << i << ": " << got[i] << " is not the rounding of " << master[i];
    }
  }
}

// bf16 and f16 in turn (each rule gets both, and the CPU compiles half as many kernels).
TEST_P(OptimMasterTest, EveryRuleSteps16BitParametersThroughF32Masters) {
  const std::vector<config> configs = all_configs();
  for (std::size_t k = 0; k < configs.size(); ++k)
    run_config(dev(), configs[k], k % 2 == 0 ? scalar_type::bf16 : scalar_type::f16);
}

TEST_P(OptimMasterTest, TwoLaunchesPerGroupAndNoCompileAfterConstruction) {
  std::vector<kiln::tensor> ps{make_param16(dev(), scalar_type::bf16, {5, 3}, 1),
                               make_param<float>(dev(), {4}, 2),
                               make_param16(dev(), scalar_type::bf16, {7}, 3)};
  auto opt = kiln::optim::adamw(ps, {.lr = 0.1});
  opt.zero_grad();
  EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 2u);
  opt.step();
  // Per group the step and the count kernel; no cast launches.
  EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 4u);
  EXPECT_EQ(kiln::last_tensor_stats().programs_compiled, 0u);
  EXPECT_EQ(ps[0].dtype(), scalar_type::bf16);
  EXPECT_EQ(ps[0].grad().dtype(), scalar_type::bf16);
}

// Updates of a tenth of a bf16 ulp: a bf16 parameter stepped in bf16 would never move; through
// the master it moves by the sum of the updates.
TEST_P(OptimMasterTest, SmallUpdatesAccumulateInTheMaster) {
  auto p = kiln::tensor::from(dev(), std::vector<kiln::bfloat16>(8, kiln::bfloat16(1.f)), {8});
  p.requires_grad_();
  auto opt = kiln::optim::sgd({p}, {.lr = 1e-3});  // bf16's ulp at 1 is 2^-7 = 0.0078
  for (int i = 0; i < 20; ++i) {
    kiln::no_grad off;
    kiln::copy_(p.grad(), kiln::tensor::full(dev(), {8}, scalar_type::bf16, -1.0));
    opt.step();
  }
  const float master = 1.f + 20 * 1e-3f;
  for (double v : as_doubles(p)) EXPECT_EQ(v, double(float(kiln::bfloat16(master))));
  EXPECT_GT(as_doubles(p)[0], 1.0);
  for (float v : master_of(opt, 0)) EXPECT_NEAR(v, master, 1e-5);
  // Stepped in bf16, the same update rounds away.
  EXPECT_EQ(float(kiln::bfloat16(1.f + 1e-3f)), 1.f);
}

// Weights written into the parameter after construction (a checkpoint loaded into the model)
// are what the next step starts from, not the stale master.
TEST_P(OptimMasterTest, ParameterWrittenFromOutsideIsAdopted) {
  for (scalar_type t : {scalar_type::bf16, scalar_type::f16}) {
    SCOPED_TRACE(kiln::type_name(t));
    auto p = make_param16(dev(), t, {6}, 4);
    auto opt = kiln::optim::sgd({p}, {.lr = 0.25});
    {
      kiln::no_grad off;
      kiln::copy_(p.grad(), kiln::tensor::full(dev(), {6}, t, 0.5));
    }
    opt.step();
    {
      kiln::no_grad off;
      kiln::copy_(p, kiln::tensor::full(dev(), {6}, t, 3.0));
      kiln::copy_(p.grad(), kiln::tensor::full(dev(), {6}, t, 1.0));
    }
    opt.step();
    for (double v : as_doubles(p)) EXPECT_EQ(v, 2.75);
    for (float v : master_of(opt, 0)) EXPECT_EQ(v, 2.75f);
  }
}

// The master is saved and restored: a second optimizer loaded from the first's state steps to
// the same bits, though its own parameter holds only the 16-bit value.
TEST_P(OptimMasterTest, StateDictRoundTripsTheMaster) {
  auto a = make_param16(dev(), scalar_type::bf16, {3, 5}, 5);
  auto b = make_param16(dev(), scalar_type::bf16, {3, 5}, 5);
  auto opt_a = kiln::optim::adam({a}, {.lr = 1e-3});
  auto opt_b = kiln::optim::adam({b}, {.lr = 1e-3});
  const auto g = kiln::tensor::from(dev(), values<float>({3, 5}, 6), {3, 5}).to(scalar_type::bf16);
  auto step = [&](kiln::optim::optimizer& o, const kiln::tensor& p) {
    {
      kiln::no_grad off;
      kiln::copy_(p.grad(), g);
    }
    o.step();
  };
  for (int i = 0; i < 3; ++i) step(opt_a, a);
  const auto saved = opt_a.state_dict();
  {
    kiln::no_grad off;
    kiln::copy_(b, a);  // the model's weights: 16 bits
  }
  opt_b.load_state_dict(saved);
  EXPECT_EQ(master_of(opt_b, 0), master_of(opt_a, 0));
  step(opt_a, a);
  step(opt_b, b);
  EXPECT_EQ(as_doubles(b), as_doubles(a));
  EXPECT_EQ(master_of(opt_b, 0), master_of(opt_a, 0));
  // Without the master the state is incomplete.
  kiln::optim::state_dict_t partial;
  for (const auto& e : saved)
    if (e.first != "state.0.master") partial.push_back(e);
  EXPECT_THROW(opt_b.load_state_dict(partial), kiln::invalid_argument);
}

TEST_P(OptimMasterTest, BadInput) {
  // Integers have no gradients: refused before the optimizer sees them.
  auto i = kiln::tensor::zeros(dev(), {3}, scalar_type::i32);
  EXPECT_THROW(i.requires_grad_(), kiln::dtype_error);
  EXPECT_THROW(kiln::optim::sgd({i}), kiln::invalid_argument);
  // A parameter whose dtype changed under the optimizer (only reachable through the internals:
  // no public operation retypes a tensor in place) is named, not reinterpreted.
  auto p = make_param16(dev(), scalar_type::bf16, {4}, 7);
  auto opt = kiln::optim::sgd({p}, {.lr = 0.1});
  p.impl()->dtype = scalar_type::f16;
  try {
    opt.step();
    ADD_FAILURE() << "no error";
  } catch (const kiln::dtype_error& e) {
    EXPECT_NE(std::string(e.what()).find("is half, was bfloat16"), std::string::npos) << e.what();
  }
  p.impl()->dtype = scalar_type::bf16;
  EXPECT_NO_THROW(opt.step());
}

KILN_INSTANTIATE_OPTIM_PER_DEVICE(OptimMasterTest);

}  // namespace
}  // namespace optim_test
