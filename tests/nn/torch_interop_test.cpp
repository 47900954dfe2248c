// Weights written by PyTorch (scripts/torch_reference_checkpoint.py, on a machine with
// PyTorch) load into kiln::nn's reference models and give PyTorch's logits. The directory comes
// from KILN_TORCH_REFERENCE_DIR; without it the test says how to make one and skips.
#include <cstdlib>
#include <kiln/nn.hpp>
#include <kiln/nn/checkpoint.hpp>
#include <kiln/nn/models.hpp>
#include <kiln/tensor/safetensors.hpp>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;

class NnTorchInteropTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(NnTorchInteropTest);

TEST_P(NnTorchInteropTest, PyTorchCheckpointsGiveTheSameLogits) {
  const char* dir = std::getenv("KILN_TORCH_REFERENCE_DIR");
  if (!dir)
    GTEST_SKIP() << "KILN_TORCH_REFERENCE_DIR is not set (python3 "
                    "scripts/torch_reference_checkpoint.py DIR writes one where PyTorch is)";
  const kiln::safetensors_file io =
      kiln::load_safetensors(std::string(dir) + "/reference_io.safetensors", dev());
  for (const std::string which : {"mlp", "lenet"}) {
    SCOPED_TRACE(which);
    nn::sequential model = which == "mlp" ? nn::models::mlp(dev()) : nn::models::lenet(dev());
    nn::load_checkpoint(std::string(dir) + "/" + which + ".safetensors", model);
    model.eval();
    kiln::no_grad off;
    const std::vector<float> got = model(io.at(which + ".input")).to_vector<float>();
    const std::vector<double> want = io.at(which + ".logits").to_vector<double>();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t k = 0; k < got.size(); ++k)
      EXPECT_NEAR(got[k], want[k], 1e-4 * std::max(1.0, std::abs(want[k]))) << k;
  }
}

}  // namespace
}  // namespace autograd_test
