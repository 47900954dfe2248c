// Extension tables and capability queries as core code sees them (device_impl), against two
// fake plugins: one with a "test" extension and supports_op, one built before those entries.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "backend_abi.h"
#include "kiln/kiln.hpp"
#include "runtime/runtime.hpp"

namespace {

// Before main, so before the registry first loads: the fake plugins, then the usual ones.
const bool path_set = [] {
  std::string path = FAKE_PLUGIN_DIR "/extensions:" FAKE_PLUGIN_DIR "/old_table";
  if (const char* old = std::getenv("KILN_PLUGIN_PATH")) path += std::string(":") + old;
  return setenv("KILN_PLUGIN_PATH", path.c_str(), 1) == 0;
}();

// Mirrors the fake plugin's "test" extension, version 1.
struct test_ext_v1 {
  kiln_extension_header header;
  int (*answer)(void);
};

const kiln::detail::device_impl& dev(const char* spec) { return *kiln::device::get(spec).impl(); }

}  // namespace

TEST(Extensions, FoundByNameAndVersion) {
  ASSERT_TRUE(path_set);
  auto* ext = static_cast<const test_ext_v1*>(dev("fake_ext").extension("test", 1));
  ASSERT_NE(ext, nullptr);
  EXPECT_EQ(ext->header.version, 1u);
  EXPECT_EQ(ext->answer(), 42);
}

TEST(Extensions, OtherVersionsAndUnknownNamesAreAbsent) {
  EXPECT_EQ(dev("fake_ext").extension("test", 2), nullptr);
  EXPECT_EQ(dev("fake_ext").extension("blas", 1), nullptr);
  // The plugin hands back a table of another version than asked: not trusted.
  EXPECT_EQ(dev("fake_ext").extension("liar", 1), nullptr);
}

TEST(Extensions, SupportsOpIsAnsweredPerOpAndType) {
  EXPECT_TRUE(dev("fake_ext").supports_op(KILN_OP_GEMM, KILN_DTYPE_F32));
  EXPECT_FALSE(dev("fake_ext").supports_op(KILN_OP_GEMM, KILN_DTYPE_F64));
  EXPECT_FALSE(dev("fake_ext").supports_op(KILN_OP_CONV2D, KILN_DTYPE_F32));
  EXPECT_FALSE(dev("fake_ext").supports_op(KILN_OP_RING));
}

TEST(Extensions, AnOlderTableHasNone) {
  // Its table ends before get_extension/supports_op, though the pointers are there.
  EXPECT_EQ(dev("fake_old").extension("test", 1), nullptr);
  EXPECT_FALSE(dev("fake_old").supports_op(KILN_OP_GEMM, KILN_DTYPE_F32));
  for (const kiln::backend_status& b : kiln::backends()) {
    if (b.name == "fake_old") {
      EXPECT_TRUE(b.extensions.empty());
    } else if (b.name == "fake_ext") {
      EXPECT_EQ(b.extensions, (std::vector<std::string>{"test/1", "liar/1"}));
    }
  }
}

TEST(Extensions, RingsAreACapabilityNotABackendName) {
  EXPECT_TRUE(dev("cpu").supports_op(KILN_OP_RING));
  EXPECT_EQ(dev("cpu").extension("test", 1), nullptr);
  for (const kiln::device& d : kiln::device::all()) {
    // Today's answers: CUDA and the CPU host rings, OpenCL cannot.
    const bool expected = d.backend() == "cuda" || d.backend() == "cpu";
    if (d.backend() == "cuda" || d.backend() == "cpu" || d.backend() == "opencl") {
      EXPECT_EQ(d.impl()->supports_op(KILN_OP_RING), expected) << d.id();
    }
  }
}

TEST(Registration, TheBuiltInCpuBackendIsTheHost) {
  EXPECT_EQ(kiln::device::host().id(), "cpu:0");
  EXPECT_EQ(kiln::backends().front().name, "cpu");
  EXPECT_TRUE(kiln::backends().front().path.empty());
  // Portable backends (the fake ones say they are) never win over Kiln's own CPU backend.
  const kiln::device best = kiln::device::best();
  if (best.info().type == kiln::device_type::cpu) {
    EXPECT_EQ(best.id(), "cpu:0");
  }
}
