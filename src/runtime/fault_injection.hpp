// The core side of kiln::testing::inject_fault: checked at the plugin boundary.
#pragma once

#include <atomic>

#include "kiln/testing/fault_injection.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {

extern std::atomic<int> g_faults_armed;  // faults still to fire, all devices and kinds

// Fires an armed fault of kind `f` on `dev`: returns the status the plugin would have
// returned (KILN_OK when none is armed) and sets the message injected_message() returns.
kiln_status take_fault(const device_impl& dev, testing::fault f);
inline kiln_status maybe_fault(const device_impl& dev, testing::fault f) {
  if (g_faults_armed.load(std::memory_order_relaxed) == 0) [[likely]]
    return KILN_OK;
  return take_fault(dev, f);
}
// Throws the exception a plugin failure `s` of this kind would have produced.
[[noreturn]] void throw_injected(const device_impl& dev, testing::fault f, kiln_status s,
                                 const std::string& what);

}  // namespace kiln::detail
