// Runs this test binary again, in a child process, for one test: for faults that poison the
// process (a CUDA sticky error lasts as long as the process on current drivers), so the rest
// of the suite keeps a healthy device.
//
//   auto [code, out] = tests::run_self("Child.Run", {{"KILN_CHILD_CASE", "trap"}});
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace tests {

// Returns the child's exit status (-1 when it did not exit normally) and its output.
inline std::pair<int, std::string> run_self(
    const std::string& gtest_filter, const std::vector<std::pair<std::string, std::string>>& env,
    int timeout_s = 120) {
  std::string cmd;
  for (const auto& [k, v] : env) cmd += k + "='" + v + "' ";
  cmd += "timeout " + std::to_string(timeout_s) + " /proc/" + std::to_string(getpid()) +
         "/exe --gtest_filter=" + gtest_filter + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, "popen failed"};
  std::array<char, 4096> buf;
  while (std::fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace tests
