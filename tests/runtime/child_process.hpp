// Runs a shell command line and returns its exit status and its stdout and stderr together:
// for tests that need a fresh process (environment read at load time, a fresh registry).
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace kiln_test {

struct child_result {
  int status;
  std::string output;
};

inline child_result run_child(const std::string& command) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// This test binary's own path, to run one of its tests in a child.
inline std::string self_path() {
  std::array<char, 4096> buf{};
  const ssize_t n = readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
}

// Runs one test of this binary (gtest_filter) in a child process with `env` set: for faults
// that poison the process (a CUDA sticky error lasts as long as the process on current
// drivers), so the rest of the suite keeps a healthy device.
//   auto [code, out] = kiln_test::run_self("Child.Run", {{"KILN_CHILD_CASE", "trap"}});
inline child_result run_self(const std::string& gtest_filter,
                             const std::vector<std::pair<std::string, std::string>>& env,
                             int timeout_s = 120) {
  std::string cmd;
  for (const auto& [k, v] : env) cmd += k + "='" + v + "' ";
  return run_child(cmd + "timeout " + std::to_string(timeout_s) + " " + self_path() +
                   " --gtest_filter=" + gtest_filter);
}

}  // namespace kiln_test
