// The generated-kernel cache (src/runtime/generated_kernels.cpp) under a race: two threads
// that miss the same key at once both compile, and both must end up with the kernels the
// cache keeps. Kernels only the losing caller held were unloaded as soon as it returned, while
// the launch it had made could still be queued on a CPU device (a crash, seen with two threads
// training on one device).
#include "runtime/generated_kernels.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <kiln/kiln.hpp>
#include <thread>

namespace {

TEST(GeneratedKernels, TwoThreadsMissingOneKeyGetTheKernelsTheCacheKeeps) {
  const kiln::device dev = kiln::device::host();
  const std::uint64_t key = 0x5eed;  // the cache lives in memory: new in every process
  std::barrier both_rendering(2);
  kiln::detail::generated_kernels got[2];
  auto run = [&](int t) {
    got[t] = kiln::detail::get_generated(dev, "race_test", key, [&] {
      both_rendering.arrive_and_wait();  // both missed the cache before either compiles
      // Different text per thread: two programs, so the cache's choice is visible.
      return kiln::detail::generated_program{
          "// thread " + std::to_string(t) +
              "\nKILN_KERNEL void twice(KILN_GLOBAL float* x) { x[kiln_global_id(0)] *= 2.0f; }",
          {"twice"},
          ""};
    });
  };
  std::thread a(run, 0), b(run, 1);
  a.join();
  b.join();
  ASSERT_EQ(got[0].kernels.size(), 1u);
  ASSERT_EQ(got[1].kernels.size(), 1u);
  EXPECT_EQ(got[0].kernels[0].impl(), got[1].kernels[0].impl())
      << "the thread that lost the race kept kernels the cache does not hold";
  // And the kernels work.
  kiln::buffer<float> x(dev, std::vector<float>{1.5f, -2.f, 3.f});
  got[1].kernels[0].launch(dev.default_queue(), kiln::range(3), x);
  EXPECT_EQ(x.to_vector(), (std::vector<float>{3.f, -4.f, 6.f}));
}

}  // namespace
