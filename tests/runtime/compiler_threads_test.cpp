// Kiln's compiler threads (src/runtime/compiler_threads.cpp): compiles from many application
// threads run on a few of Kiln's own, each caller still gets its own result or its own error,
// and the memory in-process compilers leave behind stays with those few threads instead of
// growing with the callers (stress_test's cuda:0 memory bound, issue 23). Through NVRTC, which
// compiles without a GPU (skipped where the CUDA backend or NVRTC is missing).
#include "runtime/compiler_threads.hpp"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iostream>
#include <kiln/kiln.hpp>
#include <string>
#include <thread>
#include <vector>

namespace {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool sanitized = true;
#else
constexpr bool sanitized = false;
#endif

std::uint64_t resident_anon_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) << 10;
  return 0;
}

// A kernel no other compile has (the clock and the id in its name); broken: it names an
// undeclared variable with the id in it.
std::string source(std::uint64_t id, bool broken) {
  const std::string n = std::to_string(id);
  std::string body;
  for (int i = 0; i < 24; ++i)
    body +=
        "  if (i < n) x[i] = x[i] * " + std::to_string(i + 2) + ".5f + sin(x[i] + " + n + ".0f);\n";
  return "KILN_KERNEL void k" + n + "(KILN_GLOBAL float* x, uint64_t n) {\n" +
         "  const uint64_t i = kiln_global_id(0);\n" + body +
         (broken ? "  x[0] = missing_" + n + ";\n" : "") + "}\n";
}

bool nvrtc_available(std::string* why) {
  try {
    kiln::compile_only("cuda", "sm_90", source(1, false));
    return true;
  } catch (const kiln::error& e) {
    *why = e.what();
    return false;
  }
}

std::uint64_t fresh_base() {
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) %
         1000000000 * 100;
}

TEST(CompilerThreads, ManyCallersGetTheirOwnResultsAndErrors) {
  std::string why;
  if (!nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC through the CUDA backend: " << why;
  const std::uint64_t base = fresh_base();
  constexpr int callers = 12;
  std::vector<std::string> outcome(callers);
  std::vector<std::thread> ts;
  for (int t = 0; t < callers; ++t)
    ts.emplace_back([&, t] {
      const bool broken = t % 4 == 3;
      try {
        kiln::compile_only("cuda", "sm_90", source(base + t, broken));
        outcome[t] = broken ? "compiled a broken source" : "";
      } catch (const kiln::compile_error& e) {
        const std::string want = "missing_" + std::to_string(base + t);
        if (!broken)
          outcome[t] = std::string("error on a good source: ") + e.what();
        else if (std::string(e.what()).find(want) == std::string::npos)
          outcome[t] = "the error does not name " + want + ": " + e.what();
      } catch (const std::exception& e) {
        outcome[t] = std::string("unexpected: ") + e.what();
      }
    });
  for (auto& t : ts) t.join();
  for (int t = 0; t < callers; ++t) EXPECT_EQ(outcome[t], "") << "caller " << t;
  EXPECT_GE(kiln::detail::compiler_threads_started(), 1u);
  EXPECT_LE(kiln::detail::compiler_threads_started(), kiln::detail::compiler_thread_limit());
}

// Compiled from 16 callers at once, 32 kernels leave what NVRTC freed in the compiler threads'
// arenas: without them it stayed in the callers' (+109-122 MiB on a 2-core machine, +7 MiB
// with two compiler threads).
TEST(CompilerThreads, CompilesFromManyThreadsLeaveLittleResident) {
  if (sanitized) GTEST_SKIP() << "resident memory is not bounded under a sanitizer";
  std::string why;
  if (!nvrtc_available(&why)) GTEST_SKIP() << "no NVRTC through the CUDA backend: " << why;
  const std::uint64_t base = fresh_base(), before = resident_anon_bytes();
  for (int round = 0; round < 2; ++round) {
    std::vector<std::thread> ts;
    for (int t = 0; t < 16; ++t)
      ts.emplace_back(
          [&, t] { kiln::compile_only("cuda", "sm_90", source(base + 16 * round + t, false)); });
    for (auto& t : ts) t.join();
  }
  // What NVRTC leaves is kept per compiling thread (~10-15 MiB each): a bound by the compiler
  // threads that ran, whatever the machine's core count makes their limit.
  const std::uint64_t after = resident_anon_bytes();
  const unsigned workers = kiln::detail::compiler_threads_started();
  const std::uint64_t bound = (std::uint64_t{24} + 16 * workers) << 20;
  std::cout << "[ compile  ] resident anonymous memory " << (before >> 20) << " -> "
            << (after >> 20) << " MiB with " << workers << " compiler threads (bound +"
            << (bound >> 20) << " MiB)\n";
  EXPECT_LE(after, before + bound)
      << "resident anonymous memory grew by " << ((after - before) >> 20) << " MiB";
}

// Where no thread can be started (a process at its limit), the caller runs its job itself
// instead of waiting for a thread that never comes. In a forked child (its own, empty pool)
// whose address space is capped just above what it uses, so a thread's stack cannot be mapped.
TEST(CompilerThreads, NoThreadToBeHadRunsTheJobOnTheCaller) {
  if (sanitized) GTEST_SKIP() << "a sanitizer's shadow memory does not fit an address-space cap";
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    std::uint64_t vm = 0;
    std::ifstream f("/proc/self/status");
    for (std::string line; std::getline(f, line);)
      if (line.rfind("VmSize:", 0) == 0) vm = std::stoull(line.substr(7)) << 10;
    // New threads' stacks larger than any glibc keeps cached from the parent's exited threads
    // (it would reuse one without a new mapping).
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0 || pthread_attr_setstacksize(&attr, 256u << 20) != 0 ||
        pthread_setattr_default_np(&attr) != 0)
      _exit(3);
    const rlimit cap{vm + (2 << 20), vm + (2 << 20)};
    if (vm == 0 || setrlimit(RLIMIT_AS, &cap) != 0) _exit(3);
    std::thread::id ran_on;
    kiln::detail::run_on_compiler_thread([&] { ran_on = std::this_thread::get_id(); });
    _exit(ran_on == std::this_thread::get_id() && kiln::detail::compiler_threads_started() == 0
              ? 0
              : 4);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: no cap set; 4: the job ran elsewhere";
}

}  // namespace
