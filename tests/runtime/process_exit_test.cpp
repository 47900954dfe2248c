// Programs that use Kiln exit cleanly: many short child processes, each opening every backend,
// compiling and launching kernels, running a query and returning from main with work still
// queued, started several at a time while the parent loads the machine. Every child must
// exit 0. (PoCL compiled a queued kernel on its worker thread while exit() destroyed LLVM's
// statics: SIGSEGV after "[  PASSED  ]", issue 23.)
//   KILN_EXIT_TEST_CHILDREN=N  more children (default 4: a few seconds on 2 cores; every child
//   crashed before the fix)
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <kiln/kiln.hpp>
#include <string>
#include <thread>
#include <vector>

#include "runtime/child_process.hpp"

namespace {

using namespace kiln::placeholders;

constexpr const char* child_env = "KILN_EXIT_TEST_SEED";

constexpr const char* waited_source = R"(
    KILN_KERNEL void waited(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, float add) {
      const uint64_t i = kiln_global_id(0);
      y[i] = x[i] * 2.0f + add;
    })";

// On a driver, a source no cache has seen: the driver compiles it (PoCL: on its worker
// thread when the launch runs, which is during exit()). Kiln's host backend compiles in
// program::compile, so its cached source saves a compiler run per child.
std::string queued_source(const kiln::device& dev, const char* seed) {
  const std::string salt =
      dev == kiln::device::host() ? "0" : std::to_string(std::strtoull(seed, nullptr, 10));
  return "KILN_KERNEL void queued(KILN_GLOBAL float* y, KILN_GLOBAL const float* x) {\n"
         "  y[kiln_global_id(0)] = x[kiln_global_id(0)] + (float)(" +
         salt + "ull % 7ull);\n}\n";
}

// The child's body: runs only when the parent starts this binary with KILN_EXIT_TEST_SEED.
TEST(ProcessExitChild, UseEveryBackendAndReturnWithWorkQueued) {
  const char* seed = std::getenv(child_env);
  if (!seed || !*seed) GTEST_SKIP() << "run by ProcessExit.ManyShortProcessesUnderLoad";
  for (const kiln::device& dev : kiln::device::all()) {
    SCOPED_TRACE(dev.id());
    constexpr std::size_t n = 4096;
    const std::vector<float> h(n, 1.5f);
    kiln::buffer<float> x(dev, h), y(dev, n);
    kiln::queue& q = dev.default_queue();
    // A launch waited for: the driver's code generator has run in this process (PoCL's kernel
    // cache is off in the children).
    kiln::program::compile(dev, waited_source)
        .get_kernel("waited")
        .launch(q, kiln::range(n), y, x, 1.f);
    ASSERT_EQ(y.to_vector()[n - 1], 4.f);
    const float s = h | kiln::on(dev) | kiln::transform(_1 * 2.f) | kiln::sum();
    ASSERT_EQ(s, 3.f * n);
    // Work left queued at exit: a kernel the driver has not compiled yet, and a query result.
    kiln::program::compile(dev, queued_source(dev, seed))
        .get_kernel("queued")
        .launch(q, kiln::range(n), y, x);
    const kiln::buffer<float> b = h | kiln::on(dev) | kiln::transform(_1 + 1.f) | kiln::to_buffer();
    ASSERT_EQ(b.size(), n);
  }
}

TEST(ProcessExit, ManyShortProcessesUnderLoad) {
  if (std::getenv(child_env)) GTEST_SKIP() << "in a child";
#if defined(__SANITIZE_ADDRESS__)
  // LeakSanitizer's own tracer sometimes crashes at exit (google/sanitizers#1353), and
  // sanitizer builds run without the OpenCL driver: the plain build tests the exit.
  GTEST_SKIP() << "exit is tested in the plain build";
#endif
  int children = 4;
  if (const char* v = std::getenv("KILN_EXIT_TEST_CHILDREN"); v && std::atoi(v) > 0)
    children = std::atoi(v);
  // Kernels go to a cache of their own, removed afterwards: the first child fills it with the
  // sources every child shares, so the others compile only their fresh ones.
  const std::filesystem::path cache =
      std::filesystem::temp_directory_path() / ("kiln_exit_test_" + std::to_string(getpid()));
  std::vector<kiln_test::child_result> results(static_cast<std::size_t>(children));
  const auto run = [&](int i) {
    // PoCL's own kernel cache off: its code generator runs before exit in every child.
    results[static_cast<std::size_t>(i)] =
        kiln_test::run_self("ProcessExitChild.UseEveryBackendAndReturnWithWorkQueued",
                            {{child_env, std::to_string(getpid()) + std::to_string(1000 + i)},
                             {"KILN_CACHE_DIR", cache.string()},
                             {"POCL_KERNEL_CACHE", "0"}});
  };
  run(0);
  // Load: a spinning thread beside the other children, which run two at a time.
  std::atomic<bool> stop{false};
  std::thread load([&] {
    for (volatile std::uint64_t k = 0; !stop.load(std::memory_order_relaxed);) k = k + 1;
  });
  std::atomic<int> next{1};
  std::vector<std::thread> runners;
  for (int r = 0; r < 2; ++r)
    runners.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < children;) run(i);
    });
  for (auto& t : runners) t.join();
  stop = true;
  load.join();
  std::error_code ec;
  std::filesystem::remove_all(cache, ec);
  int failed = 0;
  for (int i = 0; i < children; ++i) {
    const auto& [status, output] = results[static_cast<std::size_t>(i)];
    const bool ran = output.find("[  PASSED  ] 1 test") != std::string::npos &&
                     output.find("[  SKIPPED ]") == std::string::npos;
    if (status == 0 && ran) continue;
    ++failed;
    ADD_FAILURE() << "child " << i << " exited with " << status << (ran ? " after passing" : "")
                  << ":\n"
                  << output.substr(output.size() > 3000 ? output.size() - 3000 : 0);
  }
  EXPECT_EQ(failed, 0) << "of " << children << " children";
}

}  // namespace
