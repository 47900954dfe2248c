// End-to-end checks of the `kiln` tool and of plugin loading, in child processes so each gets
// a fresh registry and its own environment.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

using testing::HasSubstr;

namespace {

struct result {
  int status;
  std::string output;
};

result run(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " KILN_TOOL_PATH " " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  while (std::size_t n = fread(buf.data(), 1, buf.size(), p)) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace

TEST(Tool, InfoListsBackendsAndTheCpuDevice) {
  auto r = run("", "info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("cpu     loaded"));
  EXPECT_THAT(r.output, HasSubstr("cpu:0"));
  EXPECT_THAT(r.output, HasSubstr("best device:"));
  // The CUDA backend is always listed: with devices, or with the reason it has none.
  EXPECT_THAT(r.output, HasSubstr("cuda"));
}

TEST(Tool, InfoSaysWhyCudaIsUnavailable) {
  auto r = run("", "info");
  ASSERT_EQ(r.status, 0);
  if (r.output.find("cuda:0") != std::string::npos) GTEST_SKIP() << "a CUDA device is present";
  // Either the plugin is missing, or it loaded and explains why there is no device.
  EXPECT_THAT(r.output, testing::AnyOf(HasSubstr("not found"), HasSubstr("no NVIDIA driver"),
                                       HasSubstr("CUDA driver unusable")))
      << r.output;
}

TEST(Tool, PluginWithAnotherAbiVersionIsRefusedNamingBothVersions) {
  auto r = run("KILN_PLUGIN_PATH=" FAKE_PLUGIN_DIR "/bad_version", "info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("backend ABI version 999, this Kiln needs version 2"));
}

TEST(Tool, PluginRefusingTheCoreVersionIsReported) {
  auto r = run("KILN_PLUGIN_PATH=" FAKE_PLUGIN_DIR "/null_table", "info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("refused backend ABI version 2"));
}

TEST(Tool, PluginWithoutEntryPointIsReported) {
  auto r = run("KILN_PLUGIN_PATH=" FAKE_PLUGIN_DIR "/no_entry", "info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("does not export kiln_backend_entry"));
}

TEST(Tool, InfoListsEachBackendsExtensions) {
  auto r =
      run("KILN_PLUGIN_PATH=" FAKE_PLUGIN_DIR "/extensions:" FAKE_PLUGIN_DIR "/old_table", "info");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fake_ext loaded, 1 device(s)"));
  EXPECT_THAT(r.output, HasSubstr("extensions: test/1, liar/1"));
  EXPECT_THAT(r.output, HasSubstr("extensions: none"));  // cpu, and the older fake_old
}

TEST(Tool, DemoRunsAndChecksOnTheCpu) {
  auto r = run("KILN_DEVICE=cpu KILN_CACHE=0", "demo");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("device: cpu:0"));
  EXPECT_THAT(r.output, HasSubstr("GB/s"));
  EXPECT_THAT(r.output, HasSubstr("check: ok"));
}

TEST(Tool, UnknownDeviceIsAClearError) {
  auto r = run("KILN_DEVICE=cuda:99", "demo");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("no device 'cuda:99'"));
}

TEST(Tool, CacheShowsAndClears) {
  const std::string dir = testing::TempDir() + "kiln-tool-cache";
  std::filesystem::remove_all(dir);
  auto r = run("KILN_DEVICE=cpu KILN_CACHE_DIR=" + dir, "demo");
  ASSERT_EQ(r.status, 0) << r.output;
  r = run("KILN_CACHE_DIR=" + dir, "cache");
  EXPECT_THAT(r.output, HasSubstr("entries: 1"));
  r = run("KILN_CACHE_DIR=" + dir, "cache clear");
  EXPECT_THAT(r.output, HasSubstr("removed 1 entries"));
  r = run("KILN_CACHE_DIR=" + dir, "cache");
  EXPECT_THAT(r.output, HasSubstr("entries: 0"));
  r = run("KILN_CACHE=0", "cache");
  EXPECT_THAT(r.output, HasSubstr("disabled"));
  std::filesystem::remove_all(dir);
}

TEST(Tool, UnknownCommandFails) {
  auto r = run("", "frobnicate");
  EXPECT_EQ(r.status, 2);
  EXPECT_THAT(r.output, HasSubstr("unknown command"));
}

TEST(Tool, CpuWithoutACompilerSaysSo) {
  auto r = run("KILN_DEVICE=cpu KILN_CACHE=0 KILN_CXX=/nonexistent/c++", "demo");
  EXPECT_EQ(r.status, 1);
  EXPECT_THAT(r.output, HasSubstr("no host C++ compiler"));
  r = run("KILN_CXX=/nonexistent/c++", "info");
  EXPECT_THAT(r.output, HasSubstr("no host C++ compiler"));
}

// Without a GPU there is nothing to measure; with one, the crossover lands in the cache dir.
TEST(Tool, CalibrateStoresTheGpuCrossover) {
  const auto dir = std::filesystem::temp_directory_path() / "kiln_calibrate_test";
  std::filesystem::remove_all(dir);
  auto r = run("KILN_CACHE_DIR=" + dir.string(), "calibrate");
  ASSERT_EQ(r.status, 0) << r.output;
  if (r.output.find("no GPU") != std::string::npos) {
    EXPECT_FALSE(std::filesystem::exists(dir / "placement.txt"));
  } else {
    EXPECT_THAT(r.output, HasSubstr("crossover"));
    ASSERT_TRUE(std::filesystem::exists(dir / "placement.txt")) << r.output;
  }
  std::filesystem::remove_all(dir);
}
