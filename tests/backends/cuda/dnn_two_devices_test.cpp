// LeNet's convolutions and pooling (cuDNN, the "dnn" extension) on two CUDA devices at once:
// from two threads with no collective, and data-parallel through NCCL with one rank running
// ahead while the other makes its first cuDNN calls (issue 23: `kiln train lenet --devices
// cuda:0,cuda:1` hung there). Skips with fewer than two CUDA devices; KILN_TEST_DEVICES=cpu,cpu
// runs the same checks on two CPU ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/collective.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/data_parallel.hpp"
#include "kiln/nn/models.hpp"
#include "kiln/optim.hpp"
#include "kiln/tensor.hpp"
#include "kiln/tensor/inplace.hpp"
#include "runtime/child_process.hpp"

namespace {

using kiln::collective::communicator;

// The first two CUDA devices; or the devices of $KILN_TEST_DEVICES ("cpu,cpu": the same checks
// on two CPU ranks, through the host transport).
std::vector<kiln::device> test_devices() {
  std::vector<kiln::device> out;
  if (const char* list = std::getenv("KILN_TEST_DEVICES")) {
    const std::string s = list;
    for (std::size_t at = 0; at < s.size();) {
      const std::size_t end = std::min(s.find(',', at), s.size());
      out.push_back(kiln::device::get(s.substr(at, end - at)));
      at = end + 1;
    }
    return out;
  }
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() == "cuda" && out.size() < 2) out.push_back(d);
  return out;
}

#define REQUIRE_TWO_DEVICES(devs)                                                     \
  const std::vector<kiln::device> devs = test_devices();                              \
  if (devs.size() < 2)                                                                \
  GTEST_SKIP() << "needs two CUDA devices (found " << devs.size() << "): the bug is " \
               << "between two devices' ranks (KILN_TEST_DEVICES=cpu,cpu runs it on the CPU)"

// A seeded batch of n images [n, 1, 28, 28] and labels [n] on dev: the same on every device.
struct batch {
  kiln::tensor x, y;
};
batch make_batch(const kiln::device& dev, std::int64_t n, std::uint32_t seed) {
  std::vector<float> px(static_cast<std::size_t>(n * 28 * 28));
  std::vector<std::int64_t> labels(static_cast<std::size_t>(n));
  std::uint32_t s = seed;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (float& v : px) v = static_cast<float>(next() >> 8) / 16777216.f - 0.5f;
  for (auto& l : labels) l = (next() >> 16) % 10;
  return {kiln::tensor::from(dev, px, {n, 1, 28, 28}), kiln::tensor::from(dev, labels)};
}

// LeNet on dev with `from`'s parameters (or a fresh seeded one without).
kiln::nn::sequential lenet_like(const kiln::device& dev, const kiln::nn::sequential* from) {
  kiln::nn::sequential m = kiln::nn::models::lenet(dev);
  if (from) {
    kiln::no_grad off;
    const auto src = from->parameters();
    auto dst = m.parameters();
    for (std::size_t i = 0; i < dst.size(); ++i)
      kiln::copy_(dst[i], kiln::tensor::from(dev, src[i].detach().contiguous().to_vector<float>(),
                                             src[i].shape()));
  }
  return m;
}

// Gradients of every parameter after forward, cross-entropy and backward on b, on the host.
std::vector<std::vector<float>> gradients(kiln::nn::sequential& m, const batch& b) {
  for (kiln::tensor& p : m.parameters()) p.set_grad(kiln::tensor());
  kiln::nn::cross_entropy(m(b.x), b.y).backward();
  std::vector<std::vector<float>> out;
  for (const kiln::tensor& p : m.parameters()) out.push_back(p.grad().to_vector<float>());
  return out;
}

void expect_close(const std::vector<std::vector<float>>& a,
                  const std::vector<std::vector<float>>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (std::size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size()) << what << " parameter " << i;
    for (std::size_t k = 0; k < a[i].size(); ++k)
      ASSERT_NEAR(a[i][k], b[i][k], 1e-4 + 1e-3 * std::fabs(b[i][k]))
          << what << ", parameter " << i << " element " << k;
  }
}

// Both devices' threads run LeNet forward and backward at once, each on its own queue, handle
// and workspace; every step's gradients match the CPU's.
TEST(CudaTwoDevices, LeNetConvolutionsOnBothDevicesAtOnceMatchTheCpu) {
  REQUIRE_TWO_DEVICES(devs);
  const kiln::device cpu = kiln::device::get("cpu");
  kiln::nn::manual_seed(11);
  kiln::nn::sequential ref = kiln::nn::models::lenet(cpu);
  constexpr int steps = 4;
  std::vector<std::vector<std::vector<float>>> want;
  for (int s = 0; s < steps; ++s) want.push_back(gradients(ref, make_batch(cpu, 24 + 8 * s, s)));

  std::vector<kiln::nn::sequential> models;
  for (int r = 0; r < 2; ++r) models.push_back(lenet_like(devs[r], &ref));
  std::vector<std::vector<std::vector<std::vector<float>>>> got(2);
  std::vector<std::string> errors(2);
  std::mutex mu;
  std::condition_variable cv;
  int ready = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      {  // start together: the first cuDNN calls of both devices overlap
        std::unique_lock lock(mu);
        ++ready;
        cv.notify_all();
        cv.wait(lock, [&] { return ready == 2; });
      }
      try {
        // New shapes each step: new handles' algorithms and workspaces while the other runs.
        for (int s = 0; s < steps; ++s)
          got[r].push_back(gradients(models[r], make_batch(devs[r], 24 + 8 * s, s)));
        devs[r].synchronize();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(errors[r], "") << devs[r].id();
    ASSERT_EQ(got[r].size(), static_cast<std::size_t>(steps)) << devs[r].id();
    for (int s = 0; s < steps; ++s)
      expect_close(got[r][s], want[s], devs[r].id() + " step " + std::to_string(s));
  }
}

// The child of LeNetDataParallelWithARankAheadFinishes (a fresh process: cuDNN loads its
// kernels on first use, once per process). Rank 1 starts late, after rank 0 finished its first
// step and waits on it, the way `kiln train` ranks drift apart while cuDNN initialises.
TEST(CudaTwoDevicesChild, LeNetDataParallelRankAhead) {
  if (!std::getenv("KILN_TEST_DNN_CHILD")) GTEST_SKIP() << "runs in a child process only";
  REQUIRE_TWO_DEVICES(devs);
  std::vector<communicator> comms;
  try {
    comms = communicator::create({devs[0], devs[1]});
  } catch (const kiln::unsupported& e) {
    GTEST_SKIP() << "no NCCL: " << e.what();
  }
  std::mutex mu;
  std::condition_variable cv;
  bool lead_stepped = false;
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    if (c.rank() == 1) {
      // Until rank 0 is in its first loss.item() with its all-reduce queued; a Kiln that holds
      // each rank at its collectives until the others arrive never gets rank 0 there, so the
      // wait is bounded.
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(3), [&] { return lead_stepped; });
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kiln::nn::manual_seed(5);
    kiln::nn::sequential model = kiln::nn::models::lenet(dev);
    auto opt = kiln::optim::adam(model.parameters(), {.lr = 1e-3});
    kiln::nn::data_parallel ddp(model, opt, c);
    for (int step = 0; step < 3; ++step) {
      const batch b = make_batch(dev, 32, static_cast<std::uint32_t>(100 * step + c.rank()));
      opt.zero_grad();
      const kiln::tensor loss = kiln::nn::cross_entropy(ddp(b.x), b.y);
      loss.backward();
      ddp.step();
      if (c.rank() == 0 && step == 0) {
        std::lock_guard lock(mu);
        lead_stepped = true;
        cv.notify_all();
      }
      EXPECT_TRUE(std::isfinite(loss.item<float>())) << "rank " << c.rank() << " step " << step;
    }
    // data_parallel keeps the ranks' parameters identical.
    for (const kiln::tensor& p : model.parameters()) {
      kiln::tensor lead = (p.detach() * 1.f).contiguous();
      c.broadcast(lead, 0);
      EXPECT_EQ(lead.to_vector<float>(), p.detach().contiguous().to_vector<float>())
          << "rank " << c.rank();
    }
  });
}

// The deadlock this guards against leaves a process that never ends: the case runs in a child
// with a deadline, so it fails instead of hanging the suite.
TEST(CudaTwoDevices, LeNetDataParallelWithARankAheadFinishes) {
  REQUIRE_TWO_DEVICES(devs);
  constexpr int deadline_s = 90;
  const auto [status, output] = kiln_test::run_self(
      "CudaTwoDevicesChild.LeNetDataParallelRankAhead", {{"KILN_TEST_DNN_CHILD", "1"}}, deadline_s);
  if (output.find("[  SKIPPED ]") != std::string::npos &&
      output.find("no NCCL") != std::string::npos)
    GTEST_SKIP() << "no NCCL in the child:\n" << output;
  ASSERT_NE(status, 124) << "the 2-GPU LeNet data-parallel run hung (killed after " << deadline_s
                         << " s):\n"
                         << output;
  EXPECT_EQ(status, 0) << output;
  EXPECT_NE(output.find("[  PASSED  ] 1 test"), std::string::npos) << output;
}

}  // namespace
