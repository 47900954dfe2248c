// Resilience on every device: out-of-memory recovery, fault injection at the plugin boundary,
// kiln::fallback moving queries and user work, device loss and reset. A real trap and a real
// full-GPU fill run on CUDA devices only (they would kill a CPU process / take minutes).
#include <chrono>
#include <kiln/testing/fault_injection.hpp>
#include <numeric>
#include <thread>

#include "backends.hpp"
#include "runtime/child_process.hpp"
#include "runtime/runtime.hpp"
#include "trap.hpp"

namespace {

using kiln::testing::fault;
using namespace kiln::placeholders;

class ResilienceTest : public conformance::DeviceTest {
 protected:
  void TearDown() override { kiln::testing::clear_faults(); }

 public:
  static std::vector<float> random_data(std::size_t n, unsigned seed = 7) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-100.f, 100.f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  }
  static double sum_where_positive(const std::vector<float>& v, float scale) {
    double s = 0;
    for (float x : v)
      if (x * scale > 0) s += double(x * scale);
    return s;
  }
};

TEST_P(ResilienceTest, AnAllocationFailingOnceIsRetriedAfterReleasingTheCache) {
  kiln::testing::inject_fault(dev(), fault::allocate, 1);
  const auto data = random_data(1000);
  kiln::buffer<float> b(dev(), data);  // first try fails, the retry succeeds
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::allocate), 1);
  EXPECT_EQ(b.to_vector(), data);
}

TEST_P(ResilienceTest, OutOfMemoryNamesTheSizeTheDeviceAndWhatKilnHolds) {
  kiln::buffer<float> held(dev(), 1 << 16);
  kiln::testing::inject_fault(dev(), fault::allocate, 2);
  try {
    kiln::buffer<float> b(dev(), 1024);
    FAIL() << "the allocation succeeded";
  } catch (const kiln::out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_THAT(m, ::testing::HasSubstr("asked for 4096 bytes"));
    EXPECT_THAT(m, ::testing::HasSubstr(dev().id()));
    EXPECT_THAT(m, ::testing::HasSubstr("Kiln holds"));
    EXPECT_THAT(m, ::testing::HasSubstr("retried once"));
  }
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::allocate), 2);
  // Recovered: the next allocation works.
  kiln::buffer<float> after(dev(), std::vector<float>(1024, 3.f));
  EXPECT_EQ(after.to_vector()[1023], 3.f);
}

TEST_P(ResilienceTest, MemoryStatsCountKilnsAllocations) {
  const kiln::memory_statistics before = kiln::memory_stats(dev());
  {
    kiln::buffer<std::uint8_t> b(dev(), 3u << 20);
    const kiln::memory_statistics during = kiln::memory_stats(dev());
    EXPECT_GE(during.in_use, before.in_use + (3u << 20));
    EXPECT_GE(during.peak, during.in_use);
    EXPECT_GT(during.total, 0u);
    if (during.free != UINT64_MAX) {
      EXPECT_LE(during.free, during.total);
    }
  }
  EXPECT_EQ(kiln::memory_stats(dev()).in_use, before.in_use);
}

TEST_P(ResilienceTest, AnInjectedCompileFailureIsACompileError) {
  kiln::testing::inject_fault(dev(), fault::compile, 1);
  // A source no other test compiles: the in-memory cache cannot answer it.
  EXPECT_THROW(kiln::program::compile(dev(), R"(
KILN_KERNEL void resilience_unique_41(KILN_GLOBAL float* y) { y[kiln_global_id(0)] = 41.f; })"),
               kiln::compile_error);
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::compile), 1);
}

TEST_P(ResilienceTest, FallbackMovesAQueryWhoseKernelFailsToCompile) {
  auto to = other();
  if (!to) GTEST_SKIP() << "only one device: nothing to fall back to";
  const auto data = random_data(5000, 11);
  kiln::buffer<float> x(dev(), data);
  kiln::fallback chain{dev(), *to};
  const auto moves = kiln::fallback::moves_made();
  kiln::testing::inject_fault(dev(), fault::compile, 1);
  // A shape no other test or device uses (k additions, k the device's position), so that dev
  // really compiles it, and fails.
  const auto all = kiln::device::all();
  const int k = 1 + int(std::find(all.begin(), all.end(), dev()) - all.begin());
  double got;
  {
    kiln::fallback_scope scope(chain);
    auto q = x | kiln::transform(_1 * 3.25f);
    if (k == 1)
      got = q | kiln::transform(_1 + 0.5f) | kiln::filter(_1 > 0.f) | kiln::sum();
    else if (k == 2)
      got = q | kiln::transform(_1 + 0.5f) | kiln::transform(_1 + 0.5f) | kiln::filter(_1 > 0.f) |
            kiln::sum();
    else
      got = q | kiln::transform(_1 + 0.5f) | kiln::transform(_1 + 0.5f) |
            kiln::transform(_1 + 0.5f) | kiln::filter(_1 > 0.f) | kiln::sum();
  }
  double want = 0;
  for (float v : data) {
    float y = v * 3.25f;
    for (int i = 0; i < std::min(k, 3); ++i) y += 0.5f;
    if (y > 0) want += y;
  }
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::compile), 1);
  EXPECT_EQ(kiln::fallback::moves_made(), moves + 1);
  EXPECT_NEAR(got, want, 1e-3 * std::abs(want));
}

TEST_P(ResilienceTest, FallbackMovesAQueryWhoseLaunchFailsAndItsResultLivesThere) {
  auto to = other();
  if (!to) GTEST_SKIP() << "only one device: nothing to fall back to";
  const auto data = random_data(3000, 5);
  kiln::buffer<float> x(dev(), data);
  kiln::testing::inject_fault(dev(), fault::launch, 1);
  kiln::fallback_scope scope(kiln::fallback{dev(), *to});
  kiln::buffer<float> y = x | kiln::transform(_1 + 1.f) | kiln::to_buffer();
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::launch), 1);
  EXPECT_TRUE(y.get_device() == *to) << y.get_device().id();
  const auto out = y.to_vector();
  ASSERT_EQ(out.size(), data.size());
  for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(out[i], data[i] + 1.f) << i;
}

TEST_P(ResilienceTest, FallbackMovesAQueryThatRunsOutOfMemory) {
  auto to = other();
  if (!to) GTEST_SKIP() << "only one device: nothing to fall back to";
  const auto data = random_data(4000, 9);
  kiln::fallback_scope scope(kiln::fallback{dev(), *to});
  kiln::testing::inject_fault(dev(), fault::allocate, 2);  // the try and its retry
  // Host data: staging it onto dev allocates, and fails.
  const std::vector<float> got =
      data | kiln::on(dev()) | kiln::filter(_1 < 0.f) | kiln::to_vector();
  std::vector<float> want;
  std::copy_if(data.begin(), data.end(), std::back_inserter(want), [](float v) { return v < 0; });
  EXPECT_EQ(got, want);
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::allocate), 2);
}

TEST_P(ResilienceTest, CallerErrorsAreNeverMoved) {
  auto to = other();
  if (!to) GTEST_SKIP() << "only one device: nothing to fall back to";
  kiln::fallback chain{dev(), *to};
  int calls = 0;
  EXPECT_THROW(chain.run([&](const kiln::device&) -> int {
    ++calls;
    throw kiln::invalid_argument("wrong size");
  }),
               kiln::invalid_argument);
  EXPECT_EQ(calls, 1);
  EXPECT_THROW(kiln::fallback({dev(), dev()}), kiln::invalid_argument);
  EXPECT_THROW(kiln::fallback(std::vector<kiln::device>{}), kiln::invalid_argument);
}

TEST_P(ResilienceTest, FallbackRunMovesAUserKernelLaunch) {
  auto to = other();
  if (!to) GTEST_SKIP() << "only one device: nothing to fall back to";
  const auto data = random_data(777, 3);
  kiln::fallback chain{dev(), *to};
  kiln::testing::inject_fault(dev(), fault::launch, 1);
  std::vector<std::string> tried;
  const std::vector<float> got = chain.run(
      [&](const kiln::device& d) {
        tried.push_back(d.id());
        kiln::buffer<float> x(d, data), y(d, data.size());
        conformance::compile(d, R"(
KILN_KERNEL void twice(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, uint64_t n) {
  const uint64_t i = kiln_global_id(0);
  if (i < n) y[i] = 2.f * x[i];
})")
            .get_kernel("twice")
            .launch(d.default_queue(), kiln::range(data.size()), y, x, std::uint64_t(data.size()));
        return y.to_vector();
      },
      "twice");
  ASSERT_EQ(tried, (std::vector<std::string>{dev().id(), to->id()}));
  for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(got[i], 2.f * data[i]);
}

// Device loss, injected where the backend can reset (CUDA, CPU); the real trap is below.
TEST_P(ResilienceTest, ALostDeviceRefusesEverythingUntilResetThenWorksAgain) {
  try {
    dev().reset();
  } catch (const kiln::unsupported& e) {
    GTEST_SKIP() << dev().id() << " cannot be reset: " << e.what();
  }
  const auto data = random_data(256, 21);
  kiln::buffer<float> before(dev(), data);
  kiln::queue q(dev());
  kiln::kernel k = conformance::compile(dev(), R"(
KILN_KERNEL void plus_one(KILN_GLOBAL float* y) { y[kiln_global_id(0)] += 1.f; })")
                       .get_kernel("plus_one");
  kiln::testing::inject_fault(dev(), fault::device_lost, 1);
  EXPECT_THROW(k.launch(q, kiln::range(256), before), kiln::device_lost);
  EXPECT_TRUE(dev().lost());
  EXPECT_THROW(before.to_vector(), kiln::device_lost);
  EXPECT_THROW(kiln::buffer<float>(dev(), 16), kiln::device_lost);
  EXPECT_THROW(q.finish(), kiln::device_lost);
  EXPECT_THROW(k.launch(q, kiln::range(256), before), kiln::device_lost);
  EXPECT_THROW(kiln::program::compile(dev(), "KILN_KERNEL void z(KILN_GLOBAL int* y) {}"),
               kiln::device_lost);
  // Under a fallback, a query over host data moves on.
  if (auto to = other()) {
    kiln::fallback_scope scope(kiln::fallback{dev(), *to});
    const double s = data | kiln::on(dev()) | kiln::transform(_1 * 1.f) | kiln::sum();
    EXPECT_NEAR(s, std::accumulate(data.begin(), data.end(), 0.0), 1e-2);
  }

  dev().reset();
  EXPECT_FALSE(dev().lost());
  // Objects from before stay dead; new ones work.
  EXPECT_THROW(before.to_vector(), kiln::device_lost);
  EXPECT_THROW(q.finish(), kiln::device_lost);
  EXPECT_THROW(k.launch(dev().default_queue(), kiln::range(256), before), kiln::device_lost);
  kiln::buffer<float> after(dev(), data);
  conformance::compile(dev(), R"(
KILN_KERNEL void plus_one(KILN_GLOBAL float* y) { y[kiln_global_id(0)] += 1.f; })")
      .get_kernel("plus_one")
      .launch(dev().default_queue(), kiln::range(256), after);
  const auto out = after.to_vector();
  for (std::size_t i = 0; i < data.size(); ++i) ASSERT_EQ(out[i], data[i] + 1.f);
  const double s = after | kiln::transform(_1 - 1.f) | kiln::sum();
  EXPECT_NEAR(s, std::accumulate(data.begin(), data.end(), 0.0), 1e-2);
}

// A real trap, in a child process (current CUDA drivers keep a sticky error for the life of
// the process, so it would poison every later test): the loss is detected, every call throws
// device_lost, the fallback moves work on, and reset() either brings the device back (work
// then runs on it again) or says clearly that it cannot.
void real_trap_case(const kiln::device& dev) {
  const auto data = ResilienceTest::random_data(1 << 20, 2);
  const double want = ResilienceTest::sum_where_positive(data, 2.f);
  auto query_sum = [&](const kiln::device& d) {
    return data | kiln::on(d) | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 0.f) | kiln::sum();
  };
  kiln::buffer<float> old(dev, std::vector<float>(64, 1.f));
  const std::string why = conformance::trap(dev);
  ASSERT_FALSE(why.empty()) << "the wild store did not fault";
  EXPECT_THAT(why, ::testing::HasSubstr("reset"));
  EXPECT_TRUE(dev.lost());
  EXPECT_THROW(old.to_vector(), kiln::device_lost);
  EXPECT_THROW(kiln::buffer<float>(dev, 16), kiln::device_lost);
  EXPECT_THROW((void)query_sum(dev), kiln::device_lost);
  auto moved = [&] {
    kiln::fallback_scope scope(kiln::fallback{dev, kiln::device::host()});
    return query_sum(dev);
  };
  EXPECT_NEAR(moved(), want, 1e-3 * want) << "the fallback did not move the query";
  try {
    dev.reset();
  } catch (const kiln::device_lost& e) {
    // The driver cannot recover in this process: the device stays lost, says why, and the
    // fallback still moves work on.
    std::cout << "[ kiln     ] reset refused: " << e.what() << "\n";
    EXPECT_THAT(e.what(), ::testing::HasSubstr("could not be brought back"));
    EXPECT_TRUE(dev.lost());
    try {
      kiln::buffer<float> b(dev, 16);
      ADD_FAILURE() << "a buffer was made on a device the reset could not recover";
    } catch (const kiln::device_lost& again) {
      EXPECT_THAT(again.what(), ::testing::HasSubstr("a reset could not bring it back"));
    }
    EXPECT_THROW(old.to_vector(), kiln::device_lost);
    EXPECT_NEAR(moved(), want, 1e-3 * want);
    return;
  }
  std::cout << "[ kiln     ] reset recovered the device\n";
  EXPECT_FALSE(dev.lost());
  EXPECT_THROW(old.to_vector(), kiln::device_lost);
  const double s = query_sum(dev);
  EXPECT_NEAR(s, want, 1e-3 * want);
}

TEST(ResilienceTrapChild, Run) {
  const char* id = std::getenv("KILN_TRAP_DEVICE");
  if (!id) GTEST_SKIP() << "runs only as the child of ResilienceTest.ARealTrap...";
  real_trap_case(kiln::device::get(id));
  std::fflush(nullptr);
  std::_Exit(::testing::Test::HasFailure() ? 3 : 0);  // skip teardown on a lost context
}

TEST_P(ResilienceTest, ARealTrapIsDetectedAndTheWorkMovesOn) {
  if (dev().backend() != "cuda")
    GTEST_SKIP() << "a wild store faults only CUDA contexts survivably";
  auto [code, out] =
      kiln_test::run_self("ResilienceTrapChild.Run", {{"KILN_TRAP_DEVICE", GetParam()}});
  EXPECT_EQ(code, 0) << "child output:\n" << out;
  const auto at = out.find("[ kiln     ] reset");
  if (at != std::string::npos) std::cout << out.substr(at, out.find('\n', at) - at) << "\n";
}

// The whole GPU, filled for real: the error's figures, recovery after freeing, and a query
// that moves to the host under a fallback while the GPU is full. While it holds the GPU, every
// other process on that card fails to allocate (other test binaries under `ctest -j`, and the
// same card's OpenCL device): it runs only where the card is this process's alone, said by
// KILN_TEST_EXCLUSIVE_GPU=1 (a RUN_SERIAL ctest entry). After, the memory goes back to the
// driver, not into this process's pool, where it stayed until exit, starving the others.
TEST_P(ResilienceTest, FillingTheWholeGpuFailsClearlyAndRecovers) {
  if (dev().backend() != "cuda") GTEST_SKIP() << "fills a CUDA GPU; other devices use injection";
  const char* exclusive = std::getenv("KILN_TEST_EXCLUSIVE_GPU");
  if (!exclusive || std::string(exclusive) != "1")
    GTEST_SKIP() << "fills " << dev().id() << ", failing every other process using it: runs "
                 << "only with KILN_TEST_EXCLUSIVE_GPU=1 (ctest runs it alone)";
  std::vector<kiln::buffer<std::uint8_t>> hog;
  std::string message;
  try {
    for (int i = 0; i < 100000; ++i) hog.emplace_back(dev(), std::uint64_t(1) << 30);
  } catch (const kiln::out_of_memory& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty());
  EXPECT_THAT(message, ::testing::HasSubstr("asked for 1073741824 bytes"));
  EXPECT_THAT(message, ::testing::HasSubstr("of ")) << message;
  std::cout << "[ kiln     ] held " << hog.size() << " GiB; " << message.substr(0, 300) << "\n";
  const auto data = random_data(1 << 16, 4);
  {
    kiln::fallback_scope scope(kiln::fallback{dev(), kiln::device::host()});
    // The GPU has less than 1 GiB free: a 2 GiB query cannot stage there... use a big input.
    std::vector<float> big(std::size_t(1) << 29, 1.f);  // 2 GiB of host data
    const double s = big | kiln::on(dev()) | kiln::sum();
    EXPECT_EQ(s, double(big.size()));
  }
  hog.clear();
  kiln::buffer<float> x(dev(), data);
  EXPECT_EQ(x.to_vector(), data);
  // Leave the card as found: the freed GiBs back to the driver (the pool keeps what it frees).
  // Frees made without a queue run on the plugin's internal stream: trim until they landed.
  dev().synchronize();
  const std::uint64_t gib = std::uint64_t(1) << 30;
  std::uint64_t cached = 0;
  for (const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);;) {
    kiln::detail::release_cached_memory(*dev().impl());
    cached = kiln::memory_stats(dev()).cached;
    if (cached < gib || std::chrono::steady_clock::now() >= until) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_LT(cached, gib) << "the filled memory stayed in this process's pool";
}

KILN_INSTANTIATE_PER_DEVICE(ResilienceTest);

}  // namespace
