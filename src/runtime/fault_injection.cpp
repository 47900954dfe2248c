#include "runtime/fault_injection.hpp"

#include <map>
#include <mutex>

#include "runtime/resilience_log.hpp"

namespace kiln {
namespace detail {

std::atomic<int> g_faults_armed{0};

namespace {
struct armed {
  int left = 0, fired = 0;
};
std::mutex& mu() {
  static std::mutex m;
  return m;
}
std::map<std::pair<const device_impl*, testing::fault>, armed>& table() {
  static auto* t = new std::map<std::pair<const device_impl*, testing::fault>, armed>;
  return *t;
}
const char* describe(testing::fault f) {
  switch (f) {
    case testing::fault::compile: return "compile failure";
    case testing::fault::launch: return "launch failure";
    case testing::fault::allocate: return "out of device memory";
    case testing::fault::device_lost: return "device lost";
  }
  return "fault";
}
}  // namespace

kiln_status take_fault(const device_impl& dev, testing::fault f) {
  std::lock_guard lock(mu());
  auto it = table().find({&dev, f});
  if (it == table().end() || it->second.left == 0) return KILN_OK;
  --it->second.left;
  ++it->second.fired;
  g_faults_armed.fetch_sub(1, std::memory_order_relaxed);
  switch (f) {
    case testing::fault::compile: return KILN_ERR_COMPILE;
    case testing::fault::launch: return KILN_ERR_BACKEND;
    case testing::fault::allocate: return KILN_ERR_OUT_OF_MEMORY;
    case testing::fault::device_lost: return KILN_ERR_DEVICE_LOST;
  }
  return KILN_ERR_BACKEND;
}

void throw_injected(const device_impl& dev, testing::fault f, kiln_status s,
                    const std::string& what) {
  const std::string msg =
      what + " (" + dev.api->name + "): injected " + describe(f) + " (kiln::testing::inject_fault)";
  switch (s) {
    case KILN_ERR_COMPILE: throw compile_error(msg, "injected compile failure", "");
    case KILN_ERR_OUT_OF_MEMORY: throw out_of_memory(msg);
    case KILN_ERR_DEVICE_LOST:
      // As the plugin would after a trap: the device stays lost until reset.
      if (!const_cast<device_impl&>(dev).lost.exchange(true)) log_device_lost(dev, msg);
      throw device_lost(msg + "; kiln::device::reset() makes the device usable again");
    default: throw backend_failure(msg);
  }
}

}  // namespace detail

namespace testing {

void inject_fault(const device& dev, fault what, int count) {
  if (count <= 0) throw invalid_argument("inject_fault: count must be positive");
  std::lock_guard lock(detail::mu());
  detail::table()[{dev.impl().get(), what}].left += count;
  detail::g_faults_armed.fetch_add(count, std::memory_order_relaxed);
}

void clear_faults() {
  std::lock_guard lock(detail::mu());
  detail::table().clear();
  detail::g_faults_armed.store(0);
}

int faults_fired(const device& dev, fault what) {
  std::lock_guard lock(detail::mu());
  auto it = detail::table().find({dev.impl().get(), what});
  return it == detail::table().end() ? 0 : it->second.fired;
}

}  // namespace testing
}  // namespace kiln
