// End to end on every backend: a small model learns a separable synthetic task with each kind
// of optimizer within a fixed number of steps; the same seed repeats the same loss curve bit
// for bit; a checkpoint round-trips model and optimizer state; and, where the setup step
// fetched them, the real MNIST digits train an MLP past 90% in one epoch.
#include <filesystem>
#include <kiln/data/loader.hpp>
#include <kiln/data/mnist.hpp>
#include <kiln/nn.hpp>
#include <kiln/nn/checkpoint.hpp>
#include <kiln/nn/models.hpp>
#include <kiln/optim.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;
namespace optim = kiln::optim;

class NnLearnTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(NnLearnTest);

// Two Gaussian blobs per class in 8 dimensions, 3 classes: separable by a small MLP.
struct blobs {
  tensor x, y;
};
blobs make_blobs(const kiln::device& dev, std::int64_t n, std::uint64_t seed) {
  const tensor noise = tensor::randn(dev, {n, 8}, seed) * 0.3f;
  const tensor y = (tensor::rand(dev, {n}, seed + 1) * 3.f).to(kiln::scalar_type::i64).eval();
  // The class's centre: +-2 on dimension (class), so classes sit on different axes.
  const tensor dims = tensor::arange(dev, 0, 8, 1, kiln::scalar_type::i64);
  const tensor centre = (dims == y.reshape({n, 1})).to(kiln::scalar_type::f32) * 2.f;
  return {(noise + centre).eval(), y};
}

std::vector<float> train(const kiln::device& dev, const std::string& which, int steps,
                         float* accuracy = nullptr) {
  nn::manual_seed(5);
  nn::sequential model(nn::linear(dev, 8, 16), nn::relu(), nn::linear(dev, 16, 3));
  optim::optimizer opt = which == "sgd"
                             ? optim::sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9})
                         : which == "adamw"   ? optim::adamw(model.parameters(), {.lr = 0.02})
                         : which == "rmsprop" ? optim::rmsprop(model.parameters(), {.lr = 0.01})
                         : which == "adagrad" ? optim::adagrad(model.parameters(), {.lr = 0.1})
                                              : optim::adam(model.parameters(), {.lr = 0.02});
  const blobs data = make_blobs(dev, 256, 11);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    opt.zero_grad();
    const tensor loss = nn::cross_entropy(model(data.x), data.y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item<float>());
  }
  if (accuracy) {
    kiln::no_grad off;
    const blobs test = make_blobs(dev, 256, 99);
    *accuracy = (model(test.x).argmax(1) == test.y).to(kiln::scalar_type::f32).mean().item<float>();
  }
  return losses;
}

TEST_P(NnLearnTest, EveryOptimizerLearnsASeparableTask) {
  for (const char* which : {"sgd", "adam", "adamw", "rmsprop", "adagrad"}) {
    SCOPED_TRACE(which);
    float acc = 0;
    const std::vector<float> losses = train(dev(), which, 60, &acc);
    EXPECT_LT(losses.back(), 0.25f * losses.front());
    EXPECT_GE(acc, 0.95f);
  }
}

TEST_P(NnLearnTest, TheSameSeedRepeatsTheLossCurveBitForBit) {
  EXPECT_EQ(train(dev(), "adam", 15), train(dev(), "adam", 15));
}

TEST_P(NnLearnTest, ACheckpointRoundTripsModelAndOptimizer) {
  const std::string path =
      (std::filesystem::temp_directory_path() /
       ("kiln_ckpt_" + std::to_string(::getpid()) + "_" + dev().id() + ".safetensors"))
          .string();
  const blobs data = make_blobs(dev(), 64, 3);
  const auto run = [&](nn::sequential& m, optim::optimizer& o, int steps) {
    for (int s = 0; s < steps; ++s) {
      o.zero_grad();
      nn::cross_entropy(m(data.x), data.y).backward();
      o.step();
    }
  };
  nn::manual_seed(1);
  nn::sequential a(nn::linear(dev(), 8, 4), nn::relu(), nn::linear(dev(), 4, 3));
  optim::optimizer oa = optim::adam(a.parameters(), {.lr = 0.05});
  run(a, oa, 3);
  nn::save_checkpoint(path, a, &oa);
  run(a, oa, 2);       // the uninterrupted run
  nn::manual_seed(2);  // other initial weights: the checkpoint must replace them
  nn::sequential b(nn::linear(dev(), 8, 4), nn::relu(), nn::linear(dev(), 4, 3));
  optim::optimizer ob = optim::adam(b.parameters(), {.lr = 0.05});
  nn::load_checkpoint(path, b, &ob);
  EXPECT_EQ(ob.step_count(), 3);
  run(b, ob, 2);
  for (std::size_t k = 0; k < a.parameters().size(); ++k)
    EXPECT_EQ(a.parameters()[k].to_vector<float>(), b.parameters()[k].to_vector<float>()) << k;
  // Weights alone into a model without an optimizer; a model of another shape is refused.
  nn::sequential c(nn::linear(dev(), 8, 4), nn::relu(), nn::linear(dev(), 4, 3));
  nn::load_checkpoint(path, c);
  nn::sequential wrong(nn::linear(dev(), 8, 5), nn::relu(), nn::linear(dev(), 5, 3));
  EXPECT_THROW(nn::load_checkpoint(path, wrong), kiln::shape_error);
  std::filesystem::remove(path);
}

TEST_P(NnLearnTest, RealDigitsTrainAnMlpInOneEpoch) {
  const std::string dir = kiln::data::default_mnist_dir();
  if (!kiln::data::mnist_available(dir))
    GTEST_SKIP() << "MNIST not fetched (" << dir << "): run scripts/fetch_mnist.sh";
  if (dev().backend() == "opencl" && dev().info().type != kiln::device_type::gpu)
    GTEST_SKIP() << "a CPU OpenCL device (PoCL) takes minutes per epoch; the synthetic task "
                    "covers it";
  auto [train_set, test_set] = kiln::data::split(kiln::data::load_mnist(dir), 8000, 0);
  nn::manual_seed(0);
  nn::sequential model = nn::models::mlp(dev());
  optim::optimizer opt = optim::adam(model.parameters(), {.lr = 1e-3});
  kiln::data::data_loader loader(std::move(train_set), dev(), {.batch_size = 64, .seed = 1});
  for (kiln::data::batch& b : loader.epoch(0)) {
    opt.zero_grad();
    nn::cross_entropy(model(b.x), b.y).backward();
    opt.step();
  }
  model.eval();
  kiln::no_grad off;
  const tensor logits = model(test_set.images_tensor(dev()));
  const float acc = (logits.argmax(1) == test_set.labels_tensor(dev()))
                        .to(kiln::scalar_type::f32)
                        .mean()
                        .item<float>();
  EXPECT_GE(acc, 0.90f);
}

}  // namespace
}  // namespace autograd_test
