// The fixture machinery (see backends.hpp) and the coverage report: which backends the suite
// ran on, and for each backend without a device, why (a skipped test carrying the reason).
#include "conformance/backends.hpp"

#include <cctype>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <set>

namespace conformance {
namespace {

std::optional<kiln::backend_status> find_backend(std::string_view name) {
  for (const kiln::backend_status& b : kiln::backends())
    if (b.name == name) return b;
  return std::nullopt;
}

// KILN_CONFORMANCE_REQUIRE="cuda" turns "no device" from a skip into a failure, so a GPU
// machine cannot silently run the suite on the CPU alone (e.g. when the plugin was not built).
[[maybe_unused]] bool required(const std::string& backend) {
  const char* env = std::getenv("KILN_CONFORMANCE_REQUIRE");
  if (!env) return false;
  std::stringstream list(env);
  for (std::string item; std::getline(list, item, ',');)
    if (item == backend) return true;
  return false;
}

std::string why_no_device(const kiln::backend_status& b) {
  std::string s = b.name + (b.loaded ? " backend loaded without a device: " : " backend not loaded: ");
  s += b.detail.empty() ? "(no reason given)" : b.detail;
  if (b.name == "cuda" && cuda_compile_only())
    s += " -- every kernel source of the suite is still compiled for " +
         std::string(cuda_check_arch) + " through NVRTC";
  return s;
}

// Prints, once per process, the devices the suite runs on and why the others are missing.
class BackendReport : public ::testing::Environment {
  void SetUp() override {
    std::cout << "[ kiln     ] devices:";
    for (const kiln::device& d : kiln::device::all())
      std::cout << " " << d.id() << " (" << d.info().name << ")";
    std::cout << "\n";
    for (const kiln::backend_status& b : kiln::backends())
      if (!b.loaded || b.device_count == 0) std::cout << "[ kiln     ] " << why_no_device(b) << "\n";
  }
};
[[maybe_unused]] ::testing::Environment* const report =
    ::testing::AddGlobalTestEnvironment(new BackendReport);

[[maybe_unused]] std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const kiln::backend_status& b : kiln::backends()) names.push_back(b.name);
  return names;
}

}  // namespace

std::vector<std::string> device_ids() {
  std::vector<std::string> ids;
  for (const kiln::device& d : kiln::device::all()) ids.push_back(d.id());
  return ids;
}

std::string device_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

bool cuda_compile_only() {
  static const bool value = [] {
    auto b = find_backend("cuda");
    return b && b->loaded && b->device_count == 0;
  }();
  return value;
}

void compile_everywhere(std::string_view source, std::string_view options) {
  if (!cuda_compile_only()) return;
  static std::mutex mu;
  static std::set<std::string> checked;
  std::string key = std::string(options) + '\0' + std::string(source);
  {
    std::lock_guard lock(mu);
    if (checked.count(key)) return;
  }
  kiln::compile_only("cuda", cuda_check_arch, source, options);
  std::lock_guard lock(mu);
  checked.insert(std::move(key));
}

kiln::program compile(const kiln::device& dev, std::string_view source, std::string_view options) {
  compile_everywhere(source, options);
  return kiln::program::compile(dev, source, options);
}

// Other suites reuse the fixture machinery without the coverage tests.
#ifndef KILN_FIXTURE_ONLY
namespace {

class BackendCoverage : public ::testing::TestWithParam<std::string> {};

// Passes for a backend with devices (after checking how they are enumerated); skips with the
// backend's own reason otherwise.
TEST_P(BackendCoverage, DevicesEnumeratedOrReasonGiven) {
  const auto b = find_backend(GetParam());
  ASSERT_TRUE(b.has_value());
  if (!b->loaded || b->device_count == 0) {
    if (required(b->name)) FAIL() << why_no_device(*b) << " (required by KILN_CONFORMANCE_REQUIRE)";
    EXPECT_FALSE(b->detail.empty()) << "a backend without devices must say why";
    GTEST_SKIP() << why_no_device(*b);
  }
  int seen = 0;
  for (const kiln::device& d : kiln::device::all()) {
    if (d.backend() != b->name) continue;
    SCOPED_TRACE(d.id());
    const kiln::device_info& info = d.info();
    EXPECT_EQ(d.id(), b->name + ":" + std::to_string(seen));
    EXPECT_EQ(d.index(), seen);
    EXPECT_EQ(info.backend, b->name);
    EXPECT_FALSE(info.name.empty());
    EXPECT_FALSE(info.arch.empty());
    EXPECT_GT(info.global_mem_bytes, 0u);
    EXPECT_GT(info.max_work_group_size, 0u);
    for (int k = 0; k < 3; ++k) {
      EXPECT_GT(info.max_work_item_sizes[k], 0u);
      EXPECT_GT(info.max_groups[k], 0u);
    }
    EXPECT_TRUE(kiln::device::get(d.id()) == d) << "device::get must return the same device";
    std::cout << "[ kiln     ] covered " << d.id() << ": " << info.name << ", arch " << info.arch
              << "\n";
    ++seen;
  }
  EXPECT_EQ(seen, b->device_count);
}

INSTANTIATE_TEST_SUITE_P(conformance, BackendCoverage, ::testing::ValuesIn(backend_names()),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

TEST(conformance_Backends, CpuDeviceIsAlwaysPresent) {
  const auto cpu = find_backend("cpu");
  ASSERT_TRUE(cpu.has_value());
  EXPECT_TRUE(cpu->loaded) << cpu->detail;
  EXPECT_EQ(cpu->device_count, 1);
  EXPECT_EQ(kiln::device::get("cpu").id(), "cpu:0");
  EXPECT_EQ(kiln::device::get("cpu:0").info().type, kiln::device_type::cpu);
}

// The machinery itself: a source that is fine C++ for the CPU backend but not CUDA (it uses the
// CPU dialect's hidden item parameter) must be rejected by compile_everywhere.
TEST(conformance_Backends, CompileEverywhereChecksTheCudaDialect) {
  if (!cuda_compile_only())
    GTEST_SKIP() << "the CUDA backend is not in compile-only mode here (no plugin, or a GPU "
                    "whose own tests compile every kernel)";
  const char* cpu_only = R"(
KILN_KERNEL void cpu_only(KILN_GLOBAL uint64_t* out) {
  out[kiln__it.gid[0]] = 1;
})";
  EXPECT_NO_THROW(kiln::program::compile(kiln::device::get("cpu"), cpu_only));
  try {
    compile_everywhere(cpu_only);
    ADD_FAILURE() << "compile_everywhere accepted a source NVRTC must reject";
  } catch (const kiln::compile_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cuda (sm_90)"));
    EXPECT_TRUE(has_marked_line(e.what(), 3, "kiln__it.gid[0]")) << e.what();
  }
}

}  // namespace
#endif  // KILN_FIXTURE_ONLY
}  // namespace conformance
