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

// Ranks as threads (kiln::collective::run_per_rank) each seed and build their model at once:
// every thread gets the parameters one thread gets (issue 23: the seed sequence was one
// process-wide counter, so concurrent builds drew each other's layer keys).
TEST_P(NnConcurrentTest, ConcurrentModelBuildsWithTheirOwnSeedMatchOneThread) {
  auto build = [&] {
    nn::manual_seed(11);
    nn::sequential m(nn::linear(dev(), 12, 24), nn::relu(), nn::linear(dev(), 24, 24), nn::relu(),
                     nn::linear(dev(), 24, 5));
    std::vector<float> all;
    for (const tensor& p : m.parameters()) {
      const auto v = p.to_vector<float>();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const std::vector<float> want = build();
  const int threads = 8, rounds = 10;
  std::vector<int> wrong(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int r = 0; r < rounds; ++r) wrong[t] += build() != want;
    });
  for (auto& th : pool) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

}  // namespace
}  // namespace autograd_test
