// Many threads running inference at once on one shared model: every result equals the
// single-threaded one, and ThreadSanitizer (CI's TSan stage runs "Concurrent" tests) sees no
// race. Forward is const and no_grad is per thread, so nothing is shared but read-only weights
// and the runtime's (locked) caches.
#include <kiln/nn.hpp>
#include <thread>

#include "autograd/gradcheck.hpp"

namespace autograd_test {
namespace {

namespace nn = kiln::nn;

class NnConcurrentTest : public AutogradTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(NnConcurrentTest);

TEST_P(NnConcurrentTest, ConcurrentInferenceOnASharedModel) {
  nn::manual_seed(3);
  nn::sequential model(nn::linear(dev(), 16, 32), nn::relu(), nn::dropout(0.5),
                       nn::linear(dev(), 32, 4));
  model.eval();
#if defined(__SANITIZE_THREAD__)
  const int threads = 16, rounds = 2;  // TSan: the same code paths, fewer repetitions
#else
  const int threads = 128, rounds = 3;
#endif
  std::vector<tensor> inputs;
  std::vector<std::vector<float>> want;
  for (int t = 0; t < threads; ++t) {
    inputs.push_back(tensor::randn(dev(), {8, 16}, std::uint64_t(t) + 1));
    kiln::no_grad off;
    want.push_back(model(inputs.back()).argmax(1).to(kiln::scalar_type::f32).to_vector<float>());
  }
  std::vector<int> wrong(threads, 0);
  std::vector<std::string> errors(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      try {
        kiln::no_grad off;
        for (int r = 0; r < rounds; ++r) {
          const tensor y = model(inputs[std::size_t(t)]).argmax(1).to(kiln::scalar_type::f32);
          if (y.to_vector<float>() != want[std::size_t(t)]) wrong[std::size_t(t)]++;
        }
      } catch (const std::exception& e) {
        errors[std::size_t(t)] = e.what();
      }
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) {
    EXPECT_EQ(wrong[std::size_t(t)], 0) << "thread " << t;
    EXPECT_EQ(errors[std::size_t(t)], "") << "thread " << t;
  }
}

}  // namespace
}  // namespace autograd_test
