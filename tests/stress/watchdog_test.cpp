// The stress tests' watchdog: a run that outlives its limit ends the process with a message
// (a hang must fail CI, not stall it); one that finishes in time disarms it.
#include <gtest/gtest.h>

#include "stress/stress_support.hpp"

namespace stress {
namespace {

TEST(StressWatchdog, AbortsWithAMessageWhenTheLimitPasses) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        watchdog dog("a stuck run", std::chrono::milliseconds(50),
                     [] { return "thread 3: stuck"; });
        std::this_thread::sleep_for(std::chrono::seconds(30));
      },
      "a stuck run did not finish within 0 s: a deadlock or a stall. thread 3: stuck");
}

TEST(StressWatchdog, DisarmedWhenTheRunFinishesInTime) {
  const auto t0 = std::chrono::steady_clock::now();
  {
    watchdog dog("a quick run", std::chrono::seconds(30), [] { return std::string(); });
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::seconds(5));  // no wait for the limit
}

TEST(StressEnvironment, NumbersAreReadAndTyposRefused) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  setenv("KILN_STRESS_TEST_VALUE", "42", 1);
  EXPECT_EQ(env_u64("KILN_STRESS_TEST_VALUE", 7), 42u);
  unsetenv("KILN_STRESS_TEST_VALUE");
  EXPECT_EQ(env_u64("KILN_STRESS_TEST_VALUE", 7), 7u);
  EXPECT_DEATH(
      {
        setenv("KILN_STRESS_TEST_VALUE", "12x", 1);
        env_u64("KILN_STRESS_TEST_VALUE", 7);
      },
      "KILN_STRESS_TEST_VALUE=12x is not a whole number");
  EXPECT_GT(resident_bytes(), 0u);
}

}  // namespace
}  // namespace stress
