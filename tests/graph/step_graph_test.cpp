// kiln::step_graph on every device: a training step replayed from its capture (CUDA) or run
// eagerly (every other backend) matches the eager loop step for step; memory the capture used is
// not handed to later allocations; a step that reads a value back falls back to eager with a
// reason; a label out of range in a replay is reported; a bf16 attention step (cuDNN's flash
// attention on CUDA: plans made in the warm-up, run inside the capture) replays as it runs eagerly;
// bad input is refused.
#include <kiln/nn.hpp>
#include <kiln/optim.hpp>
#include <kiln/step_graph.hpp>
#include <kiln/tensor/attention.hpp>
#include <kiln/tensor/inplace.hpp>
#include <optional>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;
namespace optim = kiln::optim;

class StepGraphTest : public AutogradTest {
 protected:
  bool graphs() const { return dev().backend() == "cuda"; }
  void replays_match_eager(bool adam);
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(StepGraphTest);

struct model_and_opt {
  nn::sequential model;
  optim::optimizer opt;
};
// Adam's bias correction reads the step count on the device: a replay must advance it.
model_and_opt make(const kiln::device& dev, bool adam = false) {
  nn::manual_seed(7);
  nn::sequential m(nn::linear(dev, 8, 32), nn::relu(), nn::linear(dev, 32, 3));
  auto opt = adam ? optim::adam(m.parameters(), {.lr = 0.01})
                  : optim::sgd(m.parameters(), {.lr = 0.05, .momentum = 0.9});
  return {std::move(m), std::move(opt)};
}

// Batch k of 64 rows: inputs and labels in [0, 3).
tensor batch_x(const kiln::device& dev, int k) {
  return tensor::randn(dev, {64, 8}, 100 + static_cast<std::uint64_t>(k)).eval();
}
tensor batch_y(const kiln::device& dev, int k) {
  return (tensor::rand(dev, {64}, 200 + static_cast<std::uint64_t>(k)) * 3.f)
      .to(kiln::scalar_type::i64)
      .eval();
}

std::vector<float> flat_parameters(nn::sequential& m) {
  std::vector<float> out;
  for (const tensor& p : m.parameters()) {
    const auto v = p.to_vector<float>();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST_P(StepGraphTest, ReplaysMatchTheEagerLoopStepForStep) {
  for (bool adam : {false, true}) {
    SCOPED_TRACE(adam ? "adam" : "sgd");
    replays_match_eager(adam);
  }
}

void StepGraphTest::replays_match_eager(bool adam) {
  constexpr int steps = 6;
  model_and_opt ref = make(dev(), adam);
  std::vector<float> ref_losses;
  for (int k = 0; k < steps; ++k) {
    ref.opt.zero_grad();
    const tensor loss = nn::cross_entropy(ref.model(batch_x(dev(), k)), batch_y(dev(), k));
    loss.backward();
    ref.opt.step();
    ref_losses.push_back(loss.item<float>());
  }

  model_and_opt mine = make(dev(), adam);
  tensor x = tensor::zeros(dev(), {64, 8});
  tensor y = tensor::zeros(dev(), {64}, kiln::scalar_type::i64);
  int calls = 0;
  kiln::step_graph step(dev(), [&] {
    ++calls;
    mine.opt.zero_grad();
    tensor loss = nn::cross_entropy(mine.model(x), y);
    loss.backward();
    mine.opt.step();
    return std::vector<tensor>{loss};
  });
  EXPECT_EQ(step.kind(), kiln::replay_kind::none);
  for (int k = 0; k < steps; ++k) {
    kiln::copy_(x, batch_x(dev(), k));
    kiln::copy_(y, batch_y(dev(), k));
    const tensor loss = step.run().at(0);
    EXPECT_NEAR(loss.item<float>(), ref_losses[k], 1e-5f * std::max(1.f, ref_losses[k])) << k;
  }
  EXPECT_EQ(mine.opt.step_count(), steps);
  const auto want = flat_parameters(ref.model), got = flat_parameters(mine.model);
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 1e-5f * std::max(1.f, std::abs(want[i]))) << i;
  if (graphs()) {
    EXPECT_EQ(step.kind(), kiln::replay_kind::cuda_graph) << step.reason();
    EXPECT_EQ(step.replays(), steps - 1u);
    EXPECT_EQ(calls, 2);  // one warm-up run, one capture
  } else {
    EXPECT_EQ(step.kind(), kiln::replay_kind::queues);
    EXPECT_THAT(step.reason(), ::testing::HasSubstr("no graph API"));
    EXPECT_EQ(step.replays(), 0u);
    EXPECT_EQ(calls, steps);
  }
}

// The step's temporaries die during the capture; later allocations must not get their memory,
// or a replay would write into tensors the program holds.
TEST_P(StepGraphTest, MemoryTheCaptureUsedIsNotGivenToLaterTensors) {
  const std::int64_t n = 1 << 16;
  tensor a = tensor::randn(dev(), {n}, 3).eval();
  const std::vector<float> av = a.to_vector<float>();
  tensor out = tensor::zeros(dev(), {n});
  kiln::step_graph step(dev(), [&] {
    // Temporaries evaluated into storage of their own, then dropped.
    tensor t1 = (a * 2.f).eval();
    tensor t2 = (t1 + 1.f).eval();
    kiln::copy_(out, (t2 * t1).eval());
    return std::vector<tensor>{out};
  });
  step.run();
  step.run();  // captured here on CUDA
  std::vector<tensor> later;
  for (int i = 0; i < 8; ++i)
    later.push_back(tensor::full(dev(), {n}, kiln::scalar_type::f32, float(i)).eval());
  for (int r = 0; r < 3; ++r) step.run();
  for (int i = 0; i < 8; ++i) {
    const auto v = later[i].to_vector<float>();
    for (std::int64_t j = 0; j < n; j += 997) ASSERT_EQ(v[j], float(i)) << "tensor " << i;
  }
  const auto o = out.to_vector<float>();
  for (std::int64_t j = 0; j < n; j += 991)
    ASSERT_NEAR(o[j], (av[j] * 2.f + 1.f) * (av[j] * 2.f), 1e-4f * (1.f + std::abs(o[j])));
}

// A step through bf16 causal attention over head-split views (the vendor path on CUDA: its
// plans are made in the warm-up, the capture records their execution) matches the eager loop.
TEST_P(StepGraphTest, AttentionStepReplaysMatchTheEagerLoop) {
  constexpr int steps = 5;
  constexpr std::int64_t b = 2, t = 64, h = 2, e = 32;
  auto losses = [&](bool graphed, kiln::attention_path* path) {
    tensor w = (tensor::randn(dev(), {h * e, h * e}, 5) * 0.1f).eval();
    w.requires_grad_();
    optim::optimizer opt = optim::sgd({w}, {.lr = 0.5});
    tensor x = tensor::zeros(dev(), {b, t, h * e});
    auto body = [&] {
      opt.zero_grad();
      const tensor p = kiln::matmul(x, w).to(kiln::scalar_type::bf16);
      const tensor heads = p.reshape({b, t, h, e}).transpose(1, 2);
      const tensor y = kiln::scaled_dot_product_attention(heads, heads, heads, {}, true);
      *path = kiln::last_attention_path();
      const tensor d = y.to(kiln::scalar_type::f32) - 0.5f;
      tensor loss = (d * d).mean();
      loss.backward();
      opt.step();
      return std::vector<tensor>{loss};
    };
    std::vector<float> out;
    std::optional<kiln::step_graph> step;
    if (graphed) step.emplace(dev(), body);
    for (int k = 0; k < steps; ++k) {
      kiln::copy_(x, tensor::randn(dev(), {b, t, h * e}, 300 + std::uint64_t(k)).eval());
      out.push_back(step ? step->run().at(0).item<float>() : body().at(0).item<float>());
    }
    if (step && graphs()) {
      EXPECT_EQ(step->kind(), kiln::replay_kind::cuda_graph) << step->reason();
    }
    return out;
  };
  kiln::attention_path eager_path{}, graph_path{};
  const std::vector<float> eager = losses(false, &eager_path), replayed = losses(true, &graph_path);
  EXPECT_EQ(eager_path, graph_path);
  for (int k = 0; k < steps; ++k)
    EXPECT_NEAR(replayed[std::size_t(k)], eager[std::size_t(k)],
                1e-3f * (1 + eager[std::size_t(k)]))
        << "step " << k;                   // the dq accumulation order may differ (atomics)
  EXPECT_LT(eager.back(), eager.front());  // it learns
}

TEST_P(StepGraphTest, AStepThatReadsAValueBackRunsEagerly) {
  tensor x = tensor::randn(dev(), {256}, 5).eval();
  float seen = 0;
  int calls = 0;
  kiln::step_graph step(dev(), [&] {
    ++calls;
    tensor s = x.sum();
    seen = s.item<float>();  // a host read: cannot be captured
    return std::vector<tensor>{s};
  });
  for (int r = 0; r < 4; ++r) step.run();
  EXPECT_EQ(calls, 4 + (graphs() ? 1 : 0));  // the failed capture ran it once more
  EXPECT_EQ(step.kind(), kiln::replay_kind::queues);
  EXPECT_FALSE(step.reason().empty());
  EXPECT_NEAR(seen, x.sum().item<float>(), 1e-3f);
}

TEST_P(StepGraphTest, ALabelOutOfRangeInAReplayIsReported) {
  model_and_opt m = make(dev());
  tensor x = batch_x(dev(), 0);
  tensor y = batch_y(dev(), 0);
  kiln::step_graph step(dev(), [&] {
    m.opt.zero_grad();
    tensor loss = nn::cross_entropy(m.model(x), y);
    loss.backward();
    m.opt.step();
    return std::vector<tensor>{loss};
  });
  step.run();
  step.run();
  std::vector<std::int64_t> bad = batch_y(dev(), 0).to_vector<std::int64_t>();
  bad[5] = 7;  // 3 classes
  kiln::copy_(y, tensor::from(dev(), bad, {64}));
  bool thrown = false;
  for (int r = 0; r < 4 && !thrown; ++r) {
    try {
      step.run();
    } catch (const kiln::invalid_argument& e) {
      thrown = true;
      EXPECT_THAT(e.what(), ::testing::HasSubstr("label"));
    }
  }
  EXPECT_TRUE(thrown) << "an out-of-range label was never reported";
  dev().synchronize();
}

TEST_P(StepGraphTest, RecaptureUsesTheNewScalars) {
  tensor x = tensor::full(dev(), {1024}, kiln::scalar_type::f32, 1.f).eval();
  float c = 1.f;
  kiln::step_graph step(dev(), [&] {
    kiln::copy_(x, x + c);  // c is baked into the capture
    return std::vector<tensor>{x};
  });
  for (int r = 0; r < 3; ++r) step.run();  // 1 + 3
  c = 10.f;
  step.run();  // a replay still adds 1 on CUDA; eager adds 10
  const float after_stale = x.to_vector<float>()[7];
  EXPECT_EQ(after_stale, graphs() ? 5.f : 14.f);
  step.recapture();
  step.run();
  EXPECT_EQ(x.to_vector<float>()[7], after_stale + 10.f);
}

TEST_P(StepGraphTest, BadInputIsRefused) {
  EXPECT_THROW(kiln::step_graph(dev(), nullptr), kiln::invalid_argument);
  EXPECT_THROW(kiln::step_graph(dev(), [] { return std::vector<tensor>{}; }, {.warmup = -1}),
               kiln::invalid_argument);
  // A step that throws during the warm-up throws to the caller.
  kiln::step_graph step(
      dev(), []() -> std::vector<tensor> { throw kiln::shape_error("the step's own error"); });
  EXPECT_THROW(step.run(), kiln::shape_error);
}

}  // namespace
}  // namespace autograd_test
