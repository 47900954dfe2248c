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

#include "runtime/child_process.hpp"
#include "tool/synthetic_digits.hpp"

using testing::HasSubstr;

namespace {

using result = kiln_test::child_result;

result run(const std::string& args) {
  return kiln_test::run_child("KILN_DEVICE=cpu:0 " KILN_TOOL_PATH " " + args);
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
  const std::string dir = learnable_digits("kiln-precision-digits", 777);
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
