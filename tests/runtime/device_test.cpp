#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "kiln/kiln.hpp"
#include "runtime/runtime.hpp"

using testing::AllOf;
using testing::HasSubstr;

TEST(Device, TheCpuIsAlwaysPresentWithSaneProperties) {
  kiln::device cpu = kiln::device::get("cpu");
  EXPECT_EQ(cpu.id(), "cpu:0");
  EXPECT_EQ(cpu.backend(), "cpu");
  const auto& i = cpu.info();
  EXPECT_FALSE(i.name.empty());
  EXPECT_FALSE(i.arch.empty());
  EXPECT_EQ(i.type, kiln::device_type::cpu);
  EXPECT_GT(i.global_mem_bytes, 0u);
  EXPECT_GE(i.compute_units, 1u);
  EXPECT_GE(i.max_work_group_size, 1u);
  EXPECT_TRUE(cpu.supports(kiln::feature::atomics));
  EXPECT_FALSE(cpu.supports(kiln::feature::barrier));
  EXPECT_EQ(kiln::device::get("cpu:0"), cpu);
}

TEST(Device, AllListsEveryBackendsDevices) {
  int expected = 0;
  for (const auto& b : kiln::backends()) expected += b.device_count;
  EXPECT_EQ(static_cast<int>(kiln::device::all().size()), expected);
}

TEST(Device, BestPrefersGpusAndHonoursKilnDevice) {
  kiln::device best = kiln::device::best();
  bool any_gpu = false;
  for (const auto& d : kiln::device::all()) any_gpu |= d.info().type == kiln::device_type::gpu;
  EXPECT_EQ(best.info().type == kiln::device_type::gpu, any_gpu);
  setenv("KILN_DEVICE", "cpu", 1);
  EXPECT_EQ(kiln::device::best().id(), "cpu:0");
  setenv("KILN_DEVICE", "nope", 1);
  EXPECT_THROW(kiln::device::best(), kiln::not_found);
  unsetenv("KILN_DEVICE");
}

TEST(Device, BadSpecsAreClearErrors) {
  try {
    kiln::device::get("cuda:99");
    FAIL();
  } catch (const kiln::not_found& e) {
    EXPECT_THAT(e.what(), HasSubstr("no device 'cuda:99'"));
    EXPECT_THAT(e.what(), HasSubstr("cpu:0"));  // lists what exists
  }
  EXPECT_THROW(kiln::device::get("cpu:x"), kiln::invalid_argument);
  EXPECT_THROW(kiln::device::get("cpu:"), kiln::invalid_argument);
  EXPECT_THROW(kiln::device::get("metal"), kiln::not_found);
}

TEST(Device, BackendsReportWhyTheyAreUnavailable) {
  for (const auto& b : kiln::backends()) {
    if (!b.loaded) {
      EXPECT_FALSE(b.detail.empty()) << b.name;
    }
  }
}

TEST(Device, ErrorCategoriesHaveNames) {
  EXPECT_STREQ(kiln::to_string(kiln::error_category::out_of_memory), "out of memory");
  kiln::unsupported u("x");
  EXPECT_EQ(u.category(), kiln::error_category::unsupported);
}

// Device limits checked before the driver's compiler sees a kernel: a device without fp64 (some
// OpenCL GPUs) refuses `double` with the line, one without barriers refuses KILN_LOCAL. The
// device_info is made up: every device of the test machines supports both.
TEST(FeatureChecks, DoubleAndLocalMemoryRefusedWhereTheDeviceLacksThem) {
  const char* src =
      "KILN_KERNEL void k(KILN_GLOBAL float* y) {\n"
      "  KILN_LOCAL float t[4];\n"
      "  const double scale = 2.0;\n"
      "  t[0] = y[0]; y[0] = (float)(t[0] * scale);\n}\n";
  const auto parsed = kiln::kernel_lang::parse(src);
  kiln::device_info info;
  info.backend = "opencl";
  info.features = KILN_FEATURE_BARRIER;
  try {
    kiln::detail::check_features(parsed, info, "opencl:7");
    ADD_FAILURE() << "double accepted on a device without fp64";
  } catch (const kiln::unsupported& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("double"), HasSubstr("line 3"), HasSubstr("opencl:7")));
  }
  info.features = KILN_FEATURE_DOUBLE;
  try {
    kiln::detail::check_features(parsed, info, "opencl:7");
    ADD_FAILURE() << "KILN_LOCAL accepted on a device without barriers";
  } catch (const kiln::unsupported& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("KILN_LOCAL"), HasSubstr("line 2")));
  }
  info.features = KILN_FEATURE_DOUBLE | KILN_FEATURE_BARRIER;
  EXPECT_NO_THROW(kiln::detail::check_features(parsed, info, "opencl:7"));
}
