// Layers: gradients against finite differences (double), shapes, PyTorch's state_dict names,
// initialisation bounds and seeding, train/eval behaviour, load_state_dict and its errors.
#include <kiln/nn.hpp>
#include <kiln/tensor/inplace.hpp>
#include <kiln/tensor/normalization.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;

class NnLayersTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(NnLayersTest);

using v = std::vector<tensor>;
constexpr auto f64 = kiln::scalar_type::f64;

TEST_P(NnLayersTest, LinearGradients) {
  KILN_NEED_F64();
  const kiln::device d = dev();
  // The layer's computation, with x, w, b as the checked inputs.
  auto lin = std::make_shared<nn::linear>(d, 4, 3, nn::layer_options{.dtype = f64, .seed = 1});
  EXPECT_EQ(lin->weight.shape(), (kiln::shape_t{3, 4}));
  EXPECT_TRUE(gradcheck(d, [](const v& x) { return kiln::matmul(x[0], x[1].t()) + x[2]; },
                        {random_input({5, 4}, 1), random_input({3, 4}, 2), random_input({3}, 3)}));
  // The layer itself: d sum(lin(x) * R) / dW through backward() against the formula R^T x.
  const input xin = random_input({5, 4}, 4);
  const tensor x = tensor::from(d, xin.v, xin.shape);
  (*lin)(x).sum().backward();
  const std::vector<double> gw = lin->weight.grad().to_vector<double>();
  const std::vector<double> gb = lin->bias.grad().to_vector<double>();
  for (int o = 0; o < 3; ++o) {
    EXPECT_NEAR(gb[std::size_t(o)], 5.0, 1e-12);
    for (int i = 0; i < 4; ++i) {
      double s = 0;
      for (int n = 0; n < 5; ++n) s += xin.v[std::size_t(n * 4 + i)];
      EXPECT_NEAR(gw[std::size_t(o * 4 + i)], s, 1e-12);
    }
  }
}

TEST_P(NnLayersTest, ConvBatchNormPoolFlattenChainGradients) {
  KILN_NEED_F64();
  const kiln::device d = dev();
  EXPECT_TRUE(gradcheck(
      d,
      [](const v& x) {
        tensor y = kiln::conv2d(x[0], x[1], x[2], {.padding = {1, 1}});
        y = kiln::batch_norm(y, x[3], x[4], {}, {}, true).output;
        y = kiln::max_pool2d(kiln::relu(y), {.kernel = {2, 2}});
        return y.reshape({y.size(0), -1});
      },
      {random_input({2, 2, 4, 4}, 1), random_input({3, 2, 3, 3}, 2), random_input({3}, 3),
       random_input({3}, 4, 0.5, 1.5), random_input({3}, 5)},
      1e-5));
}

TEST_P(NnLayersTest, StateDictNamesFollowPyTorch) {
  nn::sequential net(nn::conv2d(dev(), 1, 6, 5), nn::relu(), nn::max_pool2d(2),
                     nn::batch_norm2d(dev(), 6), nn::flatten(), nn::linear(dev(), 6 * 12 * 12, 10));
  std::vector<std::string> names;
  for (auto& [n, t] : net.state_dict()) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "3.weight", "3.bias", "5.weight",
                                             "5.bias", "3.running_mean", "3.running_var",
                                             "3.num_batches_tracked"}));
  EXPECT_EQ(net.parameters().size(), 6u);
  EXPECT_EQ(net.parameter_count(), 6 * 25 + 6 + 6 + 6 + 864 * 10 + 10);
  const tensor y = net(tensor::randn(dev(), {2, 1, 28, 28}, 1));
  EXPECT_EQ(y.shape(), (kiln::shape_t{2, 10}));
  EXPECT_NE(net.to_string().find("(5): linear(864 -> 10)"), std::string::npos) << net.to_string();
}

TEST_P(NnLayersTest, InitialisationIsSeededAndBounded) {
  nn::manual_seed(7);
  nn::linear a(dev(), 100, 50);
  nn::manual_seed(7);
  nn::linear b(dev(), 100, 50);
  nn::linear c(dev(), 100, 50);
  const auto wa = a.weight.to_vector<float>(), wb = b.weight.to_vector<float>();
  EXPECT_EQ(wa, wb);                           // same seed sequence, same weights
  EXPECT_NE(wa, c.weight.to_vector<float>());  // the next layer draws another seed
  const double bound = 1 / std::sqrt(100.0);   // kaiming_uniform(a = sqrt(5))
  double sum2 = 0;
  for (float w : wa) {
    EXPECT_LE(std::abs(w), bound + 1e-7);
    sum2 += double(w) * w;
  }
  EXPECT_NEAR(sum2 / double(wa.size()), bound * bound / 3, 0.1 * bound * bound / 3);
  auto t = tensor::empty(dev(), {200, 300});
  nn::init::xavier_normal_(t, 3);
  const double s = t.std().item<float>();
  EXPECT_NEAR(s, std::sqrt(2.0 / 500), 0.05 * std::sqrt(2.0 / 500));
  nn::init::kaiming_normal_(t, 4, 0, "fan_out", "relu");
  EXPECT_NEAR(t.std().item<float>(), std::sqrt(2.0 / 200), 0.05 * std::sqrt(2.0 / 200));
  EXPECT_THROW(nn::init::kaiming_uniform_(t, 1, 0, "fan_sideways"), kiln::invalid_argument);
  EXPECT_THROW(nn::init::xavier_uniform_(tensor::empty(dev(), {5}), 1), kiln::shape_error);
}

TEST_P(NnLayersTest, DropoutTrainAndEval) {
  nn::dropout drop(0.25, 11);
  const tensor x = tensor::ones(dev(), {4000});
  const std::vector<float> y = drop(x).to_vector<float>();
  std::size_t zeros = 0;
  for (float e : y) {
    if (e == 0)
      ++zeros;
    else
      EXPECT_FLOAT_EQ(e, 1 / 0.75f);
  }
  EXPECT_NEAR(double(zeros) / 4000, 0.25, 0.03);
  EXPECT_NE(drop(x).to_vector<float>(), y);  // a fresh mask per call
  nn::dropout again(0.25, 11);
  EXPECT_EQ(again(x).to_vector<float>(), y);  // the same seed repeats
  drop.eval();
  EXPECT_EQ(drop(x).to_vector<float>(), x.to_vector<float>());
  EXPECT_THROW(nn::dropout(1.0), kiln::invalid_argument);
}

TEST_P(NnLayersTest, BatchNormTracksRunningStatisticsInTraining) {
  nn::batch_norm2d bn(dev(), 2);
  const tensor x = tensor::randn(dev(), {8, 2, 3, 3}, 5) * 2.f + 1.f;
  const tensor y = bn(x);
  EXPECT_EQ(bn.num_batches_tracked.item<std::int64_t>(), 1);
  const std::vector<float> m = x.mean({0, 2, 3}).to_vector<float>();
  const std::vector<float> rm = bn.running_mean.to_vector<float>();
  for (int c = 0; c < 2; ++c) EXPECT_NEAR(rm[std::size_t(c)], 0.1 * m[std::size_t(c)], 1e-5);
  EXPECT_NEAR(y.mean().item<float>(), 0, 1e-5);
  bn.eval();
  const tensor z = bn(x);  // running statistics now: not normalised to 0 mean
  EXPECT_EQ(bn.num_batches_tracked.item<std::int64_t>(), 1);
  EXPECT_GT(std::abs(z.mean().item<float>()), 0.1);
}

TEST_P(NnLayersTest, LoadStateDict) {
  nn::sequential a(nn::linear(dev(), 3, 2), nn::relu(), nn::linear(dev(), 2, 1));
  nn::sequential b(nn::linear(dev(), 3, 2), nn::relu(), nn::linear(dev(), 2, 1));
  b.load_state_dict(a.state_dict());
  const tensor x = tensor::randn(dev(), {4, 3}, 1);
  EXPECT_EQ(a(x).to_vector<float>(), b(x).to_vector<float>());
  nn::named_tensors s = a.state_dict();
  s.pop_back();
  EXPECT_THROW(b.load_state_dict(s), kiln::invalid_argument);  // missing key
  b.load_state_dict(s, false);
  s = a.state_dict();
  s.emplace_back("9.weight", tensor::ones(dev(), {1}));
  EXPECT_THROW(b.load_state_dict(s), kiln::invalid_argument);  // unexpected key
  s = a.state_dict();
  s[0].second = tensor::ones(dev(), {2, 2});
  EXPECT_THROW(b.load_state_dict(s), kiln::shape_error);
}

TEST_P(NnLayersTest, BadInput) {
  nn::linear lin(dev(), 4, 2);
  EXPECT_THROW(lin(tensor::ones(dev(), {3, 5})), kiln::shape_error);
  EXPECT_THROW(lin(tensor()), kiln::invalid_argument);
  EXPECT_THROW(nn::linear(dev(), 0, 2), kiln::invalid_argument);
  EXPECT_THROW(nn::conv2d(dev(), 3, 4, 3, {.groups = 2}), kiln::invalid_argument);
  nn::batch_norm2d bn(dev(), 3);
  EXPECT_THROW(bn(tensor::ones(dev(), {2, 3})), kiln::shape_error);
  EXPECT_THROW(bn(tensor::ones(dev(), {2, 4, 2, 2})), kiln::shape_error);
  EXPECT_THROW(nn::flatten(3)(tensor::ones(dev(), {2, 3})), kiln::axis_error);
}

}  // namespace
}  // namespace autograd_test
