// `kiln train --precision`: a few steps of the MLP on the CPU in each precision learn (the
// epoch's mean loss falls), the deprecated --autocast still works and says so, and a precision
// that does not exist is refused. Synthetic digits (a bright band per label), small for 2 cores.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include "kiln/data/mnist.hpp"

using testing::HasSubstr;

namespace {

struct result {
  int status;
  std::string output;  // stdout and stderr
};

result run(const std::string& args) {
  const std::string cmd = "KILN_DEVICE=cpu:0 " KILN_TOOL_PATH " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// 10,000 digits (kiln train splits off 8,000): label k is a bright band at rows 2k..2k+3.
std::string digits() {
  const std::string dir = testing::TempDir() + "kiln-precision-digits";
  kiln::data::mnist_raw raw{10000, 28, 28, {}, {}};
  std::uint32_t state = 777;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (std::int64_t i = 0; i < raw.count; ++i) {
    const int k = static_cast<int>(next() >> 16) % 10;
    raw.labels.push_back(static_cast<std::uint8_t>(k));
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x)
        raw.pixels.push_back(y >= 2 * k && y < 2 * k + 4 ? 200 + (next() >> 28)
                                                         : static_cast<std::uint8_t>(next() >> 27));
  }
  std::filesystem::create_directories(dir);
  kiln::data::write_mnist_idx(dir, raw);
  return dir;
}

// The mean loss of each epoch line ("mlp   epoch  1/2  loss 2.1234  ...").
std::vector<double> epoch_losses(const std::string& out) {
  static const std::regex line(R"(epoch +\d+/\d+ +loss +([0-9.]+))");
  std::vector<double> v;
  for (auto it = std::sregex_iterator(out.begin(), out.end(), line); it != std::sregex_iterator();
       ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

TEST(ToolTrainPrecision, EveryPrecisionLearnsOnTheCpu) {
  const std::string dir = digits();
  for (const char* p : {"fp32", "tf32", "bf16", "f16"}) {
    SCOPED_TRACE(p);
    const result r = run("train mlp --device cpu:0 --epochs 2 --steps 6 --batch 32 --precision " +
                         std::string(p) + " --data " + dir);
    ASSERT_EQ(r.status, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr(std::string("precision ") + p));
    const std::vector<double> loss = epoch_losses(r.output);
    ASSERT_EQ(loss.size(), 2u) << r.output;
    EXPECT_LT(loss[1], loss[0]) << r.output;
    EXPECT_GT(loss[1], 0.0) << r.output;
  }
  // The old spelling: still trains, and says what to write instead.
  result r = run("train mlp --device cpu:0 --epochs 1 --steps 2 --autocast bf16 --data " + dir);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--autocast is deprecated: use --precision bf16"));
  EXPECT_THAT(r.output, HasSubstr("precision bf16"));
  r = run("train mlp --precision fp8 --data " + dir);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("--precision"));
  r = run("train mlp --precision bf16 --autocast f16 --data " + dir);
  EXPECT_NE(r.status, 0);
  EXPECT_THAT(r.output, HasSubstr("excludes"));
  std::filesystem::remove_all(dir);
}

}  // namespace
