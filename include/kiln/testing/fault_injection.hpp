// Fault injection: make the next calls into a device's plugin fail as a failing driver would,
// to test recovery paths (kiln::fallback, out-of-memory handling, device loss) on any backend.
// For tests only; with nothing armed it costs one relaxed atomic load per plugin call.
//
//   kiln::testing::inject_fault(dev, kiln::testing::fault::allocate, 1);
//   EXPECT_THROW(kiln::buffer<float>(dev, 1024), kiln::out_of_memory);  // the next one works
//   kiln::testing::clear_faults();
#pragma once

namespace kiln {
class device;

namespace testing {

enum class fault {
  compile,      // the backend compiler fails (kiln::compile_error)
  launch,       // the launch fails (kiln::backend_failure), the device stays usable
  allocate,     // device allocations fail (kiln::out_of_memory), retry included
  device_lost,  // the next call fails as a trapped CUDA kernel does: the device is lost
};

// The next `count` calls of kind `what` on `dev` fail. Counts add up; thread-safe.
void inject_fault(const device& dev, fault what, int count = 1);
// Disarms every injected fault and zeroes the counts faults_fired reports.
void clear_faults();
// How many injected faults of kind `what` have fired on `dev` since the last clear_faults.
int faults_fired(const device& dev, fault what);

}  // namespace testing
}  // namespace kiln
