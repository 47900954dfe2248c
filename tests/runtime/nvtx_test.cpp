// NVTX ranges with a profiler attached: a stand-in tool (nvtx_injection.cpp, loaded by NVTX3
// through NVTX_INJECTION64_PATH as nsys's is) records the names Kiln pushes in its domain.
// Without a tool (a child process) the domain is null and ranges do nothing.
#include "runtime/nvtx.hpp"

#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

#include "runtime/child_process.hpp"

using testing::HasSubstr;

namespace {

// Before main, so before any NVTX call reads the environment (libkiln's copy of NVTX3 and
// this binary's each initialise on their first call).
const bool tool_attached = [] {
  if (std::getenv("KILN_TEST_NO_PROFILER")) return false;
  setenv("NVTX_INJECTION64_PATH", FAKE_NVTX_TOOL, 1);
  return true;
}();

struct recorder {
  const char* (*ranges)() = nullptr;
  int (*depth)() = nullptr;
  void (*clear)() = nullptr;
  recorder() {
    void* lib = dlopen(FAKE_NVTX_TOOL, RTLD_LAZY | RTLD_NOLOAD);  // NVTX loaded it already
    if (!lib) return;
    ranges = reinterpret_cast<const char* (*)()>(dlsym(lib, "fake_nvtx_ranges"));
    depth = reinterpret_cast<int (*)()>(dlsym(lib, "fake_nvtx_depth"));
    clear = reinterpret_cast<void (*)()>(dlsym(lib, "fake_nvtx_clear"));
  }
};

class NvtxTest : public testing::Test {
 protected:
  void SetUp() override {
    if (!tool_attached) GTEST_SKIP() << "child run without a tool";
    ASSERT_NE(kiln::detail::trace_domain(), nullptr) << "the stand-in tool did not attach";
    rec_ = recorder();  // now that NVTX has loaded the tool
    ASSERT_TRUE(rec_.ranges && rec_.depth && rec_.clear);
    rec_.clear();
  }
  std::string ranges() const { return rec_.ranges(); }
  int depth() const { return rec_.depth(); }

 private:
  recorder rec_;
};

TEST_F(NvtxTest, RangesArePushedByNameAndPopped) {
  const int before = depth();
  {
    KILN_TRACE_RANGE("compile");
    const kiln::detail::trace_range launch("launch", "axpy");
    EXPECT_EQ(depth(), before + 2);
  }
  EXPECT_EQ(depth(), before);
  EXPECT_EQ(ranges(), "registered:compile\nlaunch axpy\n");
}

TEST_F(NvtxTest, LongNamesAreCut) {
  const std::string name(500, 'k');
  { const kiln::detail::trace_range r("launch", name); }
  const std::string got = ranges();
  EXPECT_EQ(got.size(), 128u);  // 127 characters and the '\n'
  EXPECT_EQ(got.substr(0, 8), "launch k");
}

TEST_F(NvtxTest, KilnWorkShowsUpByName) {
  kiln::device cpu = kiln::device::get("cpu");
  const std::string src =
      "KILN_KERNEL void nvtx_fill(KILN_GLOBAL float* y, float v) { y[kiln_global_id(0)] = v; "
      "}\n";
  kiln::queue q(cpu);
  kiln::buffer<float> y(cpu, 1024);
  kiln::program::compile(cpu, src).get_kernel("nvtx_fill").launch(q, kiln::range(1024), y, 2.f);
  q.finish();
  const float sum = y | kiln::sum();
  EXPECT_EQ(sum, 2048.f);
  const auto t = kiln::tensor::from(cpu, std::vector<float>{1, 2, 3});
  EXPECT_EQ((t + t).to_vector<float>(), (std::vector<float>{2, 4, 6}));
  const std::string got = ranges();
  EXPECT_THAT(got, HasSubstr("launch nvtx_fill\n"));
  EXPECT_THAT(got, HasSubstr("query sum\n"));
  EXPECT_THAT(got, HasSubstr("tensor add\n"));
  EXPECT_EQ(depth(), 0);
}

TEST_F(NvtxTest, CompilesAreRanges) {
  const std::string src =
      "KILN_KERNEL void nvtx_compile_" +
      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count()) +
      "(KILN_GLOBAL float* y) { y[kiln_global_id(0)] = 0.f; }\n";
  kiln::program::compile(kiln::device::get("cpu"), src);
  EXPECT_THAT(ranges(), HasSubstr("registered:compile\n"));
}

TEST(NvtxNoTool, RangesDoNothingWithoutAProfiler) {
  const auto r = kiln_test::run_child("env -u NVTX_INJECTION64_PATH KILN_TEST_NO_PROFILER=1 " +
                                      kiln_test::self_path() + " --gtest_filter=NvtxChild.NoTool");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no tool: domain null, work ran"));
}

TEST(NvtxChild, NoTool) {
  if (tool_attached) GTEST_SKIP() << "run by NvtxNoTool";
  EXPECT_EQ(kiln::detail::trace_domain(), nullptr);
  {
    KILN_TRACE_RANGE("compile");
    const kiln::detail::trace_range r("launch", "x");
  }
  kiln::device cpu = kiln::device::get("cpu");
  kiln::buffer<float> y(cpu, std::vector<float>(16, 1.f));
  EXPECT_EQ(y | kiln::sum(), 16.f);
  if (!HasFailure()) std::printf("no tool: domain null, work ran\n");
}

}  // namespace
