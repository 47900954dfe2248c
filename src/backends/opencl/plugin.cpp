// The kiln_backend_v1 table and the plugin's only exported symbol.
#include "opencl_backend.hpp"
#include "plugin_guard.hpp"

namespace kiln_opencl {
namespace {

template <auto Fn>
using G = kiln_plugin::Guard<&set_error, Fn>;

const char* last_error_entry() noexcept { return last_error(); }
const char* availability_entry() noexcept { return availability(); }

const kiln_backend_v1 kTable = {
    .abi_version = KILN_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kiln_backend_v1),
    .name = "opencl",
    .dialect = "opencl",
    .last_error = last_error_entry,
    .init = G<init>::call,
    .shutdown = G<shutdown>::call,
    .availability = availability_entry,
    .compiler_id = G<compiler_id>::call,
    .device_count = kiln_plugin::count_guard<&set_error, device_count>,
    .device_info = G<device_info>::call,
    .device_open = G<device_open>::call,
    .device_close = G<device_close>::call,
    .mem_alloc = G<mem_alloc>::call,
    .mem_free = G<mem_free>::call,
    .host_alloc = G<host_alloc>::call,
    .host_free = G<host_free>::call,
    .mem_address = G<mem_address>::call,
    .copy_h2d = G<copy_h2d>::call,
    .copy_d2h = G<copy_d2h>::call,
    .copy_d2d = G<copy_d2d>::call,
    .fill = G<fill>::call,
    .queue_create = G<queue_create>::call,
    .queue_destroy = G<queue_destroy>::call,
    .queue_finish = G<queue_finish>::call,
    .queue_wait_event = G<queue_wait_event>::call,
    .event_create = G<event_create>::call,
    .event_destroy = G<event_destroy>::call,
    .event_record = G<event_record>::call,
    .event_wait = G<event_wait>::call,
    .event_query = G<event_query>::call,
    .event_elapsed_ms = G<event_elapsed_ms>::call,
    .compile = G<compile>::call,
    .free_blob = G<free_blob>::call,
    .program_load = G<program_load>::call,
    .program_unload = G<program_unload>::call,
    .kernel_get = G<kernel_get>::call,
    .kernel_limits = G<kernel_limits>::call,
    .launch = G<launch>::call,
};

}  // namespace
}  // namespace kiln_opencl

extern "C" __attribute__((visibility("default"))) const kiln_backend_v1* kiln_backend_entry(
    uint32_t core_abi_version) {
  if (core_abi_version != KILN_BACKEND_ABI_VERSION) return nullptr;
  return &kiln_opencl::kTable;
}
