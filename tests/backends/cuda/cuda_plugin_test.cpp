// Loads libkiln_backend_cuda.so (path in $KILN_CUDA_PLUGIN) through the C ABI only: handshake,
// init and compile-only cases, which need NVRTC but no GPU. Device cases: cuda_device_test.cpp.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda_test_util.hpp"

namespace kiln_test {
namespace {

class PluginEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* path = std::getenv("KILN_CUDA_PLUGIN");
    ASSERT_NE(path, nullptr) << "set KILN_CUDA_PLUGIN to libkiln_backend_cuda.so";
    g_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(g_lib, nullptr) << dlerror();
    g_entry = reinterpret_cast<kiln_backend_entry_fn>(dlsym(g_lib, KILN_BACKEND_ENTRY_SYMBOL));
    ASSERT_NE(g_entry, nullptr);
    g_be = g_entry(KILN_BACKEND_ABI_VERSION);
    ASSERT_NE(g_be, nullptr);
    g_init = g_be->init();
    std::printf("init: %d, availability: %s\n", g_init, g_be->availability());
  }
  void TearDown() override {
    if (g_be) g_be->shutdown();
    // Not dlclose'd: thread_local storage of the plugin may still be alive.
  }
};

[[maybe_unused]] const auto* const kEnv = ::testing::AddGlobalTestEnvironment(new PluginEnv);

// --- handshake and init: run everywhere -------------------------------------------------

TEST(CudaPlugin, AbiHandshake) {
  EXPECT_EQ(g_entry(KILN_BACKEND_ABI_VERSION + 1), nullptr);
  EXPECT_EQ(g_entry(0), nullptr);
  const kiln_backend_v1* be = g_entry(KILN_BACKEND_ABI_VERSION);
  ASSERT_NE(be, nullptr);
  EXPECT_EQ(be->abi_version, KILN_BACKEND_ABI_VERSION);
  EXPECT_EQ(be->struct_size, sizeof(kiln_backend_v1));
  EXPECT_STREQ(be->name, "cuda");
  EXPECT_STREQ(be->dialect, "cuda");
  // Everything else stays hidden.
  EXPECT_EQ(dlsym(g_lib, "_ZN9kiln_cuda4initEv"), nullptr);
  EXPECT_EQ(dlsym(g_lib, "_ZN9kiln_cuda4g_cuE"), nullptr);
}

TEST(CudaPlugin, InitReportsClearly) {
  ASSERT_TRUE(g_init == KILN_OK || g_init == KILN_ERR_UNSUPPORTED) << g_init;
  EXPECT_GT(std::strlen(g_be->availability()), 10u);
  if (g_init != KILN_OK) {
    EXPECT_GT(std::strlen(g_be->last_error()), 10u);
  }
  // init is idempotent.
  EXPECT_EQ(g_be->init(), g_init);
  if (g_be->device_count() == 0) {
    EXPECT_NE(g_be->device_info(0, nullptr), KILN_OK);
  }
}

TEST(CudaPlugin, CompilerId) {
  REQUIRE_NVRTC();
  char id[64];
  ASSERT_KILN_OK(g_be->compiler_id(id, sizeof id));
  EXPECT_EQ(std::string(id).rfind("nvrtc ", 0), 0u) << id;
  char tiny[4];
  EXPECT_EQ(g_be->compiler_id(tiny, sizeof tiny), KILN_ERR_INVALID_ARGUMENT);
}

TEST(CudaPlugin, CompileOnlySm90GivesCubin) {
  REQUIRE_NVRTC();
  kiln_blob blob{};
  const char* log = nullptr;
  ASSERT_KILN_OK(g_be->compile(nullptr, "sm_90", kTinyKernel, "", &blob, &log));
  ASSERT_NE(log, nullptr);
  ASSERT_NE(blob.data, nullptr);
  ASSERT_GT(blob.size, 4u);
  EXPECT_EQ(std::memcmp(blob.data,
                        "\x7f"
                        "ELF",
                        4),
            0)
      << "expected a CUBIN for sm_90";
  g_be->free_blob(blob);
}

TEST(CudaPlugin, CompileUnknownArchFallsBackToPtx) {
  REQUIRE_NVRTC();
  kiln_blob blob{};
  const char* log = nullptr;
  // Newer than any NVRTC knows: PTX for the newest virtual architecture.
  ASSERT_KILN_OK(g_be->compile(nullptr, "sm_999", kTinyKernel, "", &blob, &log));
  ASSERT_NE(blob.data, nullptr);
  const char* ptx = static_cast<const char*>(blob.data);
  EXPECT_EQ(ptx[blob.size - 1], '\0');
  EXPECT_NE(std::strstr(ptx, ".entry k"), nullptr);
  g_be->free_blob(blob);
  // compute_XY asks for PTX explicitly.
  ASSERT_KILN_OK(g_be->compile(nullptr, "compute_90", kTinyKernel, "", &blob, &log));
  EXPECT_NE(std::strstr(static_cast<const char*>(blob.data), ".target sm_90"), nullptr);
  g_be->free_blob(blob);
}

TEST(CudaPlugin, CompileBadArch) {
  REQUIRE_NVRTC();
  kiln_blob blob{};
  const char* log = nullptr;
  EXPECT_EQ(g_be->compile(nullptr, "gfx90a", kTinyKernel, "", &blob, &log),
            KILN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(g_be->compile(nullptr, nullptr, kTinyKernel, "", &blob, &log),
            KILN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(g_be->compile(nullptr, "sm_10", kTinyKernel, "", &blob, &log), KILN_ERR_UNSUPPORTED);
  ASSERT_NE(log, nullptr);
}

TEST(CudaPlugin, CompileErrorGivesLog) {
  REQUIRE_NVRTC();
  kiln_blob blob{};
  const char* log = nullptr;
  const char* broken = R"(extern "C" __global__ void k(float* p) { p[0] = undefined_thing; })";
  EXPECT_EQ(g_be->compile(nullptr, "sm_90", broken, "", &blob, &log), KILN_ERR_COMPILE);
  ASSERT_NE(log, nullptr);
  EXPECT_NE(std::strstr(log, "undefined_thing"), nullptr) << log;
  EXPECT_NE(std::strstr(log, "error"), nullptr) << log;
  EXPECT_NE(std::strstr(g_be->last_error(), "nvrtcCompileProgram"), nullptr);
  EXPECT_EQ(blob.data, nullptr);
}

TEST(CudaPlugin, CompileOptionsAreSplitAndQuoted) {
  REQUIRE_NVRTC();
  const char* src = R"(
#if VAL != 3
#error VAL must be 3
#endif
#define STR2(x) #x
#define STR(x) STR2(x)
static_assert(sizeof(STR(NAME)) == 4, "NAME must be three characters");
extern "C" __global__ void k(int* p) { p[0] = VAL; })";
  kiln_blob blob{};
  const char* log = nullptr;
  ASSERT_KILN_OK(g_be->compile(nullptr, "sm_90", src, "  -DVAL=3\t-DNAME=\"a b\"  ", &blob, &log))
      << log;
  g_be->free_blob(blob);
  EXPECT_EQ(g_be->compile(nullptr, "sm_90", src, "-DVAL=4 -DNAME=abc", &blob, &log),
            KILN_ERR_COMPILE);
  EXPECT_NE(std::strstr(log, "VAL must be 3"), nullptr) << log;
  EXPECT_EQ(g_be->compile(nullptr, "sm_90", src, "--no-such-option", &blob, &log),
            KILN_ERR_COMPILE);
}
}  // namespace
}  // namespace kiln_test
