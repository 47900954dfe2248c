#include "trap.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>

namespace conformance {

std::string trap(const kiln::device& dev) {
  const char* src = R"(
KILN_KERNEL void wild_store(KILN_GLOBAL int* y, uint64_t address) {
  y[kiln_global_id(0)] = 1;
  *((KILN_GLOBAL int*)address) = 2;
})";
  kiln::buffer<int> y(dev, 32);
  try {
    kiln::program::compile(dev, src)
        .get_kernel("wild_store")
        .launch(dev.default_queue(), kiln::range(32), y, std::uint64_t{8});
    dev.synchronize();
  } catch (const kiln::device_lost& e) {
    return e.what();
  }
  return {};
}

namespace {

// KILN_TRAP_FIRST=1: before any test, fault every CUDA device for real, check that it is lost,
// reset it, and let the whole suite run on the reset devices in the same process.
class trap_first : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* v = std::getenv("KILN_TRAP_FIRST");
    if (!v || std::string(v) != "1") return;
    for (const kiln::device& d : kiln::device::all()) {
      if (d.backend() != "cuda") continue;
      const std::string why = trap(d);
      ASSERT_FALSE(why.empty()) << d.id() << ": the wild store did not fault";
      ASSERT_TRUE(d.lost()) << d.id();
      ASSERT_THROW(kiln::buffer<float>(d, 16), kiln::device_lost);
      try {
        d.reset();
      } catch (const kiln::device_lost& e) {
        FAIL() << "KILN_TRAP_FIRST: " << e.what();  // the driver cannot recover in-process
      }
      ASSERT_FALSE(d.lost());
      std::cout << "[ kiln     ] " << d.id() << " trapped (" << why.substr(0, why.find('\n'))
                << "), reset; the suite runs on it\n";
    }
  }
};
const auto* const registered = ::testing::AddGlobalTestEnvironment(new trap_first);

}  // namespace
}  // namespace conformance
