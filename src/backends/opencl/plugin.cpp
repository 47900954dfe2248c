// The kiln_backend table and the plugin's only exported symbol.
#include "opencl_backend.hpp"
#include "plugin_table.hpp"

namespace kiln_opencl {
namespace {

constexpr auto get_extension = kiln_plugin::no_extension;
constexpr auto extension_list = kiln_plugin::no_extension_list;
// No rings: OpenCL has no system-scope atomics on mapped host memory to build the queues.
int supports_op(int, const char*, kiln_dtype) noexcept { return 0; }

// OpenCL reports no free-memory figure: UINT64_MAX says "unknown". Its allocator caches
// nothing Kiln could release, and it has no device reset.
kiln_status mem_info(kiln_device_h dev, uint64_t* free_bytes, uint64_t* total_bytes,
                     uint64_t* cached_bytes) noexcept {
  if (!dev) return set_error(KILN_ERR_INVALID_ARGUMENT, "mem_info: dev is NULL");
  if (free_bytes) *free_bytes = UINT64_MAX;
  if (total_bytes) *total_bytes = dev->info.global_mem_bytes;
  if (cached_bytes) *cached_bytes = 0;
  return KILN_OK;
}
kiln_status mem_trim(kiln_device_h) noexcept { return KILN_OK; }
kiln_status device_status(kiln_device_h) noexcept { return KILN_OK; }
kiln_status device_reset(kiln_device_h) noexcept {
  return set_error(KILN_ERR_UNSUPPORTED, "OpenCL has no device reset");
}
// Buffers of one OpenCL context are per device here: the core stages copies between devices.
kiln_status peer_access(kiln_device_h a, kiln_device_h b) noexcept {
  return a == b ? KILN_OK
                : set_error(KILN_ERR_UNSUPPORTED, "OpenCL devices have no peer access in Kiln");
}
kiln_status copy_peer(kiln_queue_h, kiln_device_h, kiln_mem_ref, kiln_device_h, kiln_mem_ref,
                      uint64_t) noexcept {
  return set_error(KILN_ERR_UNSUPPORTED, "OpenCL devices have no peer access in Kiln");
}

// No graph API: kiln::graph replays the stages through queues and events.
constexpr std::nullptr_t graph_capture_begin = nullptr;
constexpr std::nullptr_t graph_capture_end = nullptr;
constexpr std::nullptr_t graph_launch = nullptr;
constexpr std::nullptr_t graph_destroy = nullptr;

// Portable: a native backend for the same device (CUDA, Kiln's CPU backend) is preferred.
const kiln_backend table = KILN_PLUGIN_TABLE("opencl", "opencl", KILN_BACKEND_PORTABLE);

}  // namespace
}  // namespace kiln_opencl

KILN_PLUGIN_EXPORT(kiln_opencl::table)
