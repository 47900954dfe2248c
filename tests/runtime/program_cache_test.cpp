// program::compile's in-memory cache (src/runtime/program_cache.cpp) and program lifetime:
// threads that compile one source at once share the program the cache keeps, and a program
// unloaded while launches of its kernels still wait on a queue does not take their code away.
#include "runtime/program_cache.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <chrono>
#include <kiln/kiln.hpp>
#include <optional>
#include <thread>

#include "runtime/runtime.hpp"

namespace {

// A source no other test (or earlier run's memory cache) has: a define with the clock in it.
std::string fresh_define() {
  return "-DKILN_PROGRAM_CACHE_TEST=" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

constexpr const char* twice_source =
    "KILN_KERNEL void twice(KILN_GLOBAL float* x) { x[kiln_global_id(0)] *= 2.0f; }";

TEST(ProgramCache, ThreadsCompilingOneSourceAtOnceShareOneProgram) {
  const kiln::device dev = kiln::device::host();
  for (int round = 0; round < 3; ++round) {
    const std::string options = fresh_define();
    std::barrier both(2);
    std::shared_ptr<kiln::detail::program_impl> got[2];
    auto run = [&](int t) {
      both.arrive_and_wait();  // both miss the memory cache: a compile takes far longer
      got[t] =
          kiln::program::compile(dev, twice_source, options).get_kernel("twice").impl()->program;
    };
    std::thread a(run, 0), b(run, 1);
    a.join();
    b.join();
    // Before the fix the loser kept a program of its own, unloaded when its handles went,
    // whatever launches of it were still queued.
    EXPECT_EQ(got[0], got[1]) << "round " << round;
  }
}

// Entries carry the device generation: a program compiled before a reset is never handed out
// again, and one compiled across a reset (inserted late) never replaces a newer one.
TEST(ProgramCache, EntriesOfAnotherDeviceGenerationAreNeverReturned) {
  kiln::detail::program_cache cache;
  auto old_program = std::make_shared<kiln::detail::program_impl>();
  auto new_program = std::make_shared<kiln::detail::program_impl>();
  EXPECT_EQ(cache.insert("src", "", 1, old_program), old_program);
  EXPECT_EQ(cache.find("src", "", 1), old_program);
  EXPECT_EQ(cache.find("src", "", 2), nullptr);
  EXPECT_EQ(cache.insert("src", "", 2, new_program), new_program);  // replaces the stale one
  EXPECT_EQ(cache.find("src", "", 2), new_program);
  auto late = std::make_shared<kiln::detail::program_impl>();
  EXPECT_EQ(cache.insert("src", "", 1, late), late);  // compiled before the reset: not kept
  EXPECT_EQ(cache.find("src", "", 2), new_program);
  EXPECT_EQ(cache.find("src", "", 1), nullptr);
}

// The queue of a CPU device runs launches on its own thread, after the call returns. Here the
// launches wait behind a slow kernel on another queue while the last reference to their
// program goes (the memory cache cleared, as a device reset does, and the handles dropped).
TEST(ProgramCache, LaunchesQueuedBeforeTheirProgramIsUnloadedStillRun) {
  const kiln::device dev = kiln::device::host();
  const std::uint64_t n = 1 << 16;
  kiln::queue slow(dev), q(dev);
  kiln::buffer<std::uint32_t> mid(dev, n), out(dev, n);
  mid.fill(0xdeadbeefu);
  out.fill(0xdeadbeefu);
  const kiln::program spin = kiln::program::compile(dev, R"(
    KILN_KERNEL void produce(KILN_GLOBAL uint32_t* out, uint32_t rounds) {
      const uint64_t i = kiln_global_id(0);
      uint32_t v = (uint32_t)i;
      for (uint32_t r = 0; r < rounds; ++r) v = v * 1664525u + 1013904223u;
      out[i] = v;
    })");
  // Compiled before the slow kernel starts, so that the host compiler's time does not count.
  std::optional<kiln::program> p = kiln::program::compile(dev, R"(
      KILN_KERNEL void flip(KILN_GLOBAL uint32_t* out, KILN_GLOBAL const uint32_t* in) {
        out[kiln_global_id(0)] = ~in[kiln_global_id(0)];
      })",
                                                          fresh_define());
  spin.get_kernel("produce").launch(slow, kiln::range(n), mid, 2000u);
  q.wait(slow.record());
  p->get_kernel("flip").launch(q, kiln::range(n), out, mid);
  p->get_kernel("flip").launch(q, kiln::range(n), mid, out);
  dev.impl()->programs().clear();
  p.reset();  // the program is unloaded here, with both launches still waiting behind `slow`
  EXPECT_FALSE(slow.record().done()) << "the slow kernel ended first: the test proves nothing";
  q.finish();
  // Both launches ran: out holds ~v, and mid v again.
  const std::vector<std::uint32_t> got = mid.to_vector(), flipped = out.to_vector();
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint32_t v = static_cast<std::uint32_t>(i);
    for (int r = 0; r < 2000; ++r) v = v * 1664525u + 1013904223u;
    ASSERT_EQ(flipped[i], ~v) << "item " << i;
    ASSERT_EQ(got[i], v) << "item " << i;
  }
}

}  // namespace
