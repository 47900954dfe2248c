// The kiln_backend table and the plugin's only exported symbol.
#include "opencl_backend.hpp"
#include "plugin_table.hpp"

namespace kiln_opencl {
namespace {

constexpr auto get_extension = kiln_plugin::no_extension;
constexpr auto extension_list = kiln_plugin::no_extension_list;
// No rings: OpenCL has no system-scope atomics on mapped host memory to build the queues.
int supports_op(int, const char*, kiln_dtype) noexcept { return 0; }

// Portable: a native backend for the same device (CUDA, Kiln's CPU backend) is preferred.
const kiln_backend table = KILN_PLUGIN_TABLE("opencl", "opencl", KILN_BACKEND_PORTABLE);

}  // namespace
}  // namespace kiln_opencl

KILN_PLUGIN_EXPORT(kiln_opencl::table)
