// The autograd engine: leaves, accumulation, no_grad, detach, retain_graph, custom functions,
// fusion of backward chains, and the errors.
#include <algorithm>
#include <cmath>
#include <kiln/log.hpp>
#include <kiln/tensor/conv.hpp>
#include <kiln/tensor/indexing.hpp>
#include <kiln/tensor/inplace.hpp>
#include <kiln/tensor/linear.hpp>
#include <limits>

#include "autograd/gradcheck.hpp"
#include "autograd/graph.hpp"

namespace autograd_test {
namespace {

class AutogradEngineTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(AutogradEngineTest);

tensor vec(const kiln::device& d, std::vector<float> v) { return tensor::from(d, v); }

TEST_P(AutogradEngineTest, LeavesAndResults) {
  auto x = vec(dev(), {1, 2, 3});
  EXPECT_FALSE(x.requires_grad());
  x.requires_grad_();
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  const tensor y = x * 2.f;
  EXPECT_TRUE(y.requires_grad());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_FALSE((vec(dev(), {1}) * 2.f).requires_grad());
  EXPECT_FALSE((x > 1.f).requires_grad());  // comparisons have no gradient
  EXPECT_FALSE(x.grad().defined());
}

TEST_P(AutogradEngineTest, GradientsAccumulateAcrossBackwardCalls) {
  auto x = vec(dev(), {1, 2, 3}).requires_grad_();
  (x * x).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4, 6}));
  (x * 3.f).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{5, 7, 9}));
  x.set_grad({});
  (x * 3.f).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 3, 3}));
}

TEST_P(AutogradEngineTest, BackwardWithAGivenGradient) {
  auto x = vec(dev(), {1, 2, 3}).requires_grad_();
  const tensor y = x * x;
  EXPECT_THROW(y.backward(), kiln::shape_error);  // not a single element
  y.backward(vec(dev(), {1, 10, 100}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 40, 600}));
  EXPECT_THROW((x * x).backward(vec(dev(), {1, 2})), kiln::shape_error);
}

TEST_P(AutogradEngineTest, DiamondGraphsSumTheirPaths) {
  auto x = vec(dev(), {0.5f, -1.5f}).requires_grad_();
  const tensor a = x * 2.f, b = kiln::exp(x);
  (a * b + a).sum().backward();  // d/dx (2x e^x + 2x) = 2e^x + 2x e^x + 2
  const std::vector<float> g = x.grad().to_vector<float>();
  for (std::size_t k = 0; k < 2; ++k) {
    const double xv = k ? -1.5 : 0.5;
    EXPECT_NEAR(g[k], 2 * std::exp(xv) + 2 * xv * std::exp(xv) + 2, 1e-5);
  }
}

TEST_P(AutogradEngineTest, NoGradAndDetachRecordNothing) {
  auto x = vec(dev(), {1, 2}).requires_grad_();
  {
    kiln::no_grad off;
    EXPECT_FALSE(kiln::is_grad_enabled());
    EXPECT_FALSE((x * 2.f).requires_grad());
    {
      kiln::enable_grad on;
      EXPECT_TRUE((x * 2.f).requires_grad());
    }
    EXPECT_FALSE(kiln::is_grad_enabled());
  }
  EXPECT_TRUE(kiln::is_grad_enabled());
  const tensor d = (x * 2.f).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.to_vector<float>(), (std::vector<float>{2, 4}));
  // d * x: only the x path carries a gradient (d is a constant 2x).
  (d * x).sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{2, 4}));
}

TEST_P(AutogradEngineTest, TheGraphIsFreedUnlessRetained) {
  auto x = vec(dev(), {1, 2}).requires_grad_();
  const tensor loss = (x * x).sum();
  loss.backward({}, true);
  loss.backward();  // retained once: a second pass works
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{4, 8}));
  EXPECT_THROW(loss.backward(), kiln::invalid_argument);  // freed now
}

TEST_P(AutogradEngineTest, RetainGradKeepsANonLeafsGradient) {
  auto x = vec(dev(), {1, 2}).requires_grad_();
  const tensor y = x * 3.f;
  y.retain_grad();
  (y * y).sum().backward();
  EXPECT_EQ(y.grad().to_vector<float>(), (std::vector<float>{6, 12}));
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{18, 36}));
}

// The tensor-engine kernels `f` launches, counted through the trace log (one line each).
template <class F>
std::vector<std::string> kernels_of(F&& f) {
  std::vector<std::string> lines;
  const kiln::log_level before = kiln::get_log_level();
  kiln::set_log_level(kiln::log_level::trace);
  kiln::set_log_sink([&](kiln::log_level, std::string_view m) {
    if (m.starts_with("tensor ")) lines.emplace_back(m);
  });
  struct restore {
    kiln::log_level level;
    ~restore() {
      kiln::set_log_sink({});
      kiln::set_log_level(level);
    }
  } guard{before};
  f();
  return lines;
}

TEST_P(AutogradEngineTest, AConstantOperandsGradientIsNotComputed) {
  // A constant beside a leaf (a scale, masked_fill's value): its gradient would be a sum over
  // the whole result, which backward summed to the constant's shape and evaluated, once per
  // attention layer of a GPT. Nobody takes it: backward runs one kernel, the leaf's gradient.
  std::vector<float> v(2 * 3 * 8 * 8);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25f + float(i % 7) * 0.5f;
  const tensor seed = tensor::ones(dev(), {2, 3, 8, 8}, kiln::scalar_type::f32).eval();
  const tensor upper =
      kiln::triu(tensor::ones(dev(), {8, 8}, kiln::scalar_type::boolean), 1).eval();
  const float inf = std::numeric_limits<float>::infinity();
  const auto make = [&](int op, const tensor& x) {
    switch (op) {
      case 0: return x * 0.5f;
      case 1: return x + 2.f;
      case 2: return 2.f - x;
      case 3: return x / 4.f;
      case 4: return kiln::masked_fill(x, upper, -inf);
      case 5: return kiln::pow(x, 2.f);
      default: return kiln::where(x > 1.f, x, 0.f);
    }
  };
  const float slope[] = {0.5f, 1.f, -1.f, 0.25f, 1.f, 2.f * v[0], v[0] > 1.f ? 1.f : 0.f};
  for (int op = 0; op < 7; ++op) {
    SCOPED_TRACE("op " + std::to_string(op));
    auto x = tensor::from(dev(), v, {2, 3, 8, 8}).requires_grad_();
    const tensor y = make(op, x);
    const auto launched = kernels_of([&] { y.backward(seed * 1.f); });  // a lazy seed
    EXPECT_EQ(launched.size(), 1u) << ::testing::PrintToString(launched);
    EXPECT_NEAR(x.grad().to_vector<float>()[0], slope[op], 1e-6);
  }
  // A constant that wants a gradient gets the sum over the broadcast.
  auto x = tensor::from(dev(), v, {2, 3, 8, 8}).requires_grad_();
  auto c = tensor::from(dev(), std::vector<float>{2}, {1}).requires_grad_();
  (x * c).backward(seed);
  double sum = 0;
  for (float e : v) sum += e;
  EXPECT_NEAR(c.grad().to_vector<float>()[0], sum, 1e-4 * sum);
}

TEST_P(AutogradEngineTest, ABackwardChainOfElementwiseGradientsIsOneKernel) {
  auto x = vec(dev(), {0.1f, 0.2f, 0.3f, 0.4f}).requires_grad_();
  const tensor y = kiln::exp(kiln::sin(x) * 2.f) + kiln::tanh(x);
  y.backward(vec(dev(), {1, 1, 1, 1}));
  // The whole gradient (exp', sin', tanh', the sum of both paths) was one kernel.
  EXPECT_EQ(kiln::last_tensor_stats().kernel_launches, 1u);
  const std::vector<float> g = x.grad().to_vector<float>();
  for (std::size_t k = 0; k < 4; ++k) {
    const double v = 0.1 * double(k + 1), t = std::tanh(v);
    EXPECT_NEAR(g[k], std::exp(std::sin(v) * 2) * 2 * std::cos(v) + 1 - t * t, 1e-5);
  }
}

TEST_P(AutogradEngineTest, CustomFunctions) {
  auto x = vec(dev(), {1, 2, 3}).requires_grad_();
  tensor out;
  {
    kiln::no_grad off;
    out = x * x * x;
  }
  // A cube with its own gradient, 3 x^2.
  out = kiln::autograd::record("cube", out, {x}, [x](const tensor& g, const tensor&) {
    return std::vector<tensor>{g * x * x * 3.f};
  });
  EXPECT_TRUE(out.requires_grad());
  out.sum().backward();
  EXPECT_EQ(x.grad().to_vector<float>(), (std::vector<float>{3, 12, 27}));
  // A backward giving the wrong shape is reported with the function's name.
  auto y = vec(dev(), {1, 2}).requires_grad_();
  const tensor bad = kiln::autograd::record(
      "broken", y * 1.f, {y},
      [&](const tensor&, const tensor&) { return std::vector<tensor>{vec(dev(), {1})}; });
  try {
    bad.sum().backward();
    FAIL() << "expected an error";
  } catch (const kiln::error& e) {
    EXPECT_NE(std::string(e.what()).find("broken"), std::string::npos) << e.what();
  }
}

// A leaf's post-accumulate hook runs as soon as its gradient is complete, while the rest of
// backward is still to come (data_parallel's buckets start their all-reduces from it): the hook
// on the weight runs before the backward of the graph's first operation.
TEST_P(AutogradEngineTest, PostAccumulateHooksRunBeforeBackwardEnds) {
  auto x = tensor::randn(dev(), {2, 3}, 1).requires_grad_();
  auto w = tensor::randn(dev(), {3, 4}, 2).requires_grad_();
  bool first_done = false, hook_ran = false, hook_early = false;
  const tensor h =
      kiln::autograd::record("first", (x * 1.f).eval(), {x}, [&](const tensor& g, const tensor&) {
        first_done = true;
        return std::vector<tensor>{g};
      });
  kiln::autograd::register_post_accumulate_hook(w, [&](const tensor&) {
    hook_ran = true;
    hook_early = !first_done;
  });
  kiln::matmul(h, w).sum().backward();
  EXPECT_TRUE(hook_ran);
  EXPECT_TRUE(first_done);
  EXPECT_TRUE(hook_early) << "the hook waited for the whole backward";
}

// A weight's gradient is handed to the engine before the input's gradient product is queued, so
// its accumulation and a gradient-only hook (data_parallel's all-reduce) overlap that product.
// Seen through the queue's order: a hook zeroes the weight. Registered as gradient-only (a
// promise the test breaks on purpose, to see the order), its write is read by the input's
// product; a public hook may write its parameter (an optimizer step in the hook), so it runs
// after the node's whole backward and the input's gradient uses the weight before the write.
TEST_P(AutogradEngineTest, WeightGradientIsAccumulatedBeforeTheInputsProduct) {
  for (const bool conv : {false, true}) {
    for (const bool gradient_only : {true, false}) {
      SCOPED_TRACE(std::string(conv ? "conv2d" : "linear") +
                   (gradient_only ? ", gradient-only hook" : ", public hook"));
      const auto input = [&] {
        return conv ? tensor::randn(dev(), {2, 2, 5, 5}, 3) : tensor::randn(dev(), {4, 3}, 3);
      };
      const auto weight = [&] {
        return (conv ? tensor::randn(dev(), {3, 2, 3, 3}, 4) : tensor::randn(dev(), {5, 3}, 4))
            .requires_grad_();
      };
      const auto apply = [conv](const tensor& x, const tensor& w) {
        return conv ? kiln::conv2d(x, w, tensor(), {}) : kiln::linear(x, w, tensor());
      };
      auto x = input().requires_grad_();
      auto w = weight();
      int hooks = 0;
      const auto zero = [&](const tensor& leaf) {
        ++hooks;
        kiln::no_grad off;
        kiln::copy_(leaf, leaf * 0.f);
      };
      if (gradient_only)
        kiln::detail::register_gradient_only_hook(w, zero);
      else
        kiln::autograd::register_post_accumulate_hook(w, zero);
      apply(x, w).sum().backward();
      EXPECT_EQ(hooks, 1);
      // The reference: the same graph with no hook.
      auto x2 = input().requires_grad_();
      auto w2 = weight();
      apply(x2, w2).sum().backward();
      const std::vector<float> gx = x.grad().to_vector<float>();
      const std::vector<float> gx_old = x2.grad().to_vector<float>();
      ASSERT_EQ(gx.size(), gx_old.size());
      if (gradient_only) {
        EXPECT_TRUE(std::all_of(gx.begin(), gx.end(), [](float v) { return v == 0.f; }))
            << "the input's product ran before the weight's gradient-only hook";
      } else {
        for (std::size_t i = 0; i < gx.size(); ++i)
          EXPECT_NEAR(gx[i], gx_old[i], 1e-4f * (1.f + std::abs(gx_old[i])))
              << i << ": the input's product read the weight a public hook wrote";
      }
      // The weight's own gradient was complete when the hook ran.
      const std::vector<float> got = w.grad().to_vector<float>();
      const std::vector<float> want = w2.grad().to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        EXPECT_NEAR(got[i], want[i], 1e-4f * (1.f + std::abs(want[i]))) << i;
    }
  }
}

// An error thrown by what an early-delivered gradient completes (here a gradient-only hook)
// reaches the caller as it was thrown, not re-labelled as an error in the matmul's gradient.
TEST_P(AutogradEngineTest, EarlyHookErrorsKeepTheirType) {
  auto x = tensor::randn(dev(), {4, 3}, 1).requires_grad_();
  auto w = tensor::randn(dev(), {5, 3}, 2).requires_grad_();
  kiln::detail::register_gradient_only_hook(
      w, [](const tensor&) { throw kiln::out_of_memory("hook ran out of memory"); });
  try {
    kiln::linear(x, w, tensor()).sum().backward();
    FAIL() << "expected the hook's error";
  } catch (const kiln::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("hook ran out of memory"), std::string::npos);
  }
  // A public hook's error also keeps its type.
  auto w3 = tensor::randn(dev(), {5, 3}, 2).requires_grad_();
  kiln::autograd::register_post_accumulate_hook(
      w3, [](const tensor&) { throw kiln::out_of_memory("public hook"); });
  EXPECT_THROW(kiln::linear(x, w3, tensor()).sum().backward(), kiln::out_of_memory);
}

// Zero-size batched products have (zero) weight gradients, not an error.
TEST_P(AutogradEngineTest, ZeroSizeBatchedProductGradients) {
  for (const std::vector<std::int64_t>& xs :
       {std::vector<std::int64_t>{2, 0, 3}, std::vector<std::int64_t>{0, 4, 3}}) {
    auto x = tensor::randn(dev(), xs, 1).requires_grad_();
    auto w = tensor::randn(dev(), {5, 3}, 2).requires_grad_();
    kiln::linear(x, w, tensor()).sum().backward();
    const std::vector<float> gw = w.grad().to_vector<float>();
    ASSERT_EQ(gw.size(), 15u);
    EXPECT_TRUE(std::all_of(gw.begin(), gw.end(), [](float v) { return v == 0.f; }));
    EXPECT_EQ(x.grad().shape(), xs);
  }
  // A zero inner dimension: [2, 3, 0] @ [0, 4].
  auto a = tensor::randn(dev(), {2, 3, 0}, 1).requires_grad_();
  auto b = tensor::randn(dev(), {0, 4}, 2).requires_grad_();
  kiln::matmul(a, b).sum().backward();
  EXPECT_EQ(b.grad().shape(), (std::vector<std::int64_t>{0, 4}));
  EXPECT_EQ(a.grad().shape(), (std::vector<std::int64_t>{2, 3, 0}));
}

TEST_P(AutogradEngineTest, Errors) {
  auto i = tensor::from(dev(), std::vector<int>{1, 2});
  EXPECT_THROW(i.requires_grad_(), kiln::dtype_error);
  auto x = vec(dev(), {1, 2}).requires_grad_();
  const tensor y = x * 2.f;
  EXPECT_THROW(tensor(y).requires_grad_(), kiln::invalid_argument);          // not a leaf
  EXPECT_THROW(vec(dev(), {1}).backward(), kiln::invalid_argument);          // nothing recorded
  EXPECT_THROW(kiln::copy_(x, vec(dev(), {3, 4})), kiln::invalid_argument);  // in place
  {
    kiln::no_grad off;
    kiln::copy_(x, vec(dev(), {3, 4}));  // allowed outside recording
  }
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{3, 4}));
  EXPECT_THROW(x.set_grad(vec(dev(), {1, 2, 3})), kiln::shape_error);
  EXPECT_THROW(tensor().requires_grad_(), kiln::invalid_argument);
}

}  // namespace
}  // namespace autograd_test
