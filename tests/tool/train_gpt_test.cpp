// `kiln train gpt` on the CPU: a tiny model on synthetic fortune files learns past the unigram
// baseline, reports validation losses, samples text and saves a checkpoint PyTorch-style
// names (with gradient accumulation); a directory without fortunes, a batch that micro-batches
// do not divide and data-parallel requests are refused clearly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <kiln/tensor/safetensors.hpp>
#include <regex>
#include <string>
#include <vector>

#include "runtime/child_process.hpp"

using testing::HasSubstr;

namespace {

namespace fs = std::filesystem;

kiln_test::child_result run(const std::string& args) {
  return kiln_test::run_child("KILN_DEVICE=cpu:0 " KILN_TOOL_PATH " " + args);
}

// Fortunes of a small grammar: predictable enough for a few steps of a tiny model to learn.
fs::path synthetic_fortunes(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const char* subjects[] = {"the cat", "a dog", "my friend", "the old man"};
  const char* verbs[] = {"sees", "likes", "finds", "wants"};
  const char* objects[] = {"the sea.", "a red hat.", "good bread.", "the moon."};
  std::ofstream out(dir / "grammar");
  for (int i = 0; i < 400; ++i)
    out << subjects[i % 4] << ' ' << verbs[(i / 4) % 4] << ' ' << objects[(i / 16) % 4] << "\n%\n";
  return dir;
}

TEST(ToolTrainGpt, LearnsPastTheUnigramBaselineAndSaves) {
  const fs::path dir = synthetic_fortunes("kiln-gpt-fortunes");
  const fs::path save = dir / "out";
  fs::create_directories(save);
  const auto r =
      run("train gpt --device cpu:0 --context 16 --layers 1 --heads 2 --width 32 "
          "--steps 40 --batch 8 --grad-accum 2 --eval-every 20 --sample 40 --lr 3e-3 --data " +
          dir.string() + " --save " + save.string());
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fortunes: 400 documents"));
  EXPECT_THAT(r.output, HasSubstr("(1 layers, 2 heads, width 32, context 16)"));
  EXPECT_THAT(r.output, HasSubstr("batch 8 (2 micro-batches of 4)"));
  static const std::regex val(R"(val loss ([0-9.]+))");
  std::vector<double> losses;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), val);
       it != std::sregex_iterator(); ++it)
    losses.push_back(std::stod((*it)[1]));
  ASSERT_EQ(losses.size(), 2u) << r.output;
  EXPECT_LT(losses[1], losses[0]) << r.output;
  EXPECT_THAT(r.output, HasSubstr("(below)"));
  EXPECT_THAT(r.output, HasSubstr("sample:\n"));
  const kiln::safetensors_file f =
      kiln::load_safetensors((save / "gpt.safetensors").string(), kiln::device::host());
  EXPECT_TRUE(f.contains("wte.weight"));
  EXPECT_TRUE(f.contains("h.0.attn.in_proj_weight"));
  EXPECT_EQ(f.at("h.0.mlp.c_fc.weight").shape(), (kiln::shape_t{128, 32}));
  fs::remove_all(dir);
}

TEST(ToolTrainGpt, RefusesMissingDataAndDataParallel) {
  const fs::path empty =
      fs::temp_directory_path() / ("kiln-gpt-empty_" + std::to_string(::getpid()));
  fs::create_directories(empty);
  auto r = run("train gpt --device cpu:0 --steps 1 --data " + empty.string());
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("no fortune files"));
  const fs::path fortunes = synthetic_fortunes("kiln-gpt-accum");
  r = run("train gpt --device cpu:0 --batch 8 --grad-accum 3 --steps 1 --data " +
          fortunes.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("--grad-accum 3 must divide the batch (8)"));
  fs::remove_all(fortunes);
  r = run("train gpt --devices cpu:0,cpu:0 --steps 1 --data " + empty.string());
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("--devices is not supported"));
  fs::remove_all(empty);
}

}  // namespace
