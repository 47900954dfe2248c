// The kiln_backend_v1 table and the plugin's only exported symbol.
#include <exception>
#include <new>

#include "cuda_backend.hpp"

namespace kiln_cuda {
namespace {

kiln_status from_exception() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return set_error(KILN_ERR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return set_error(KILN_ERR_BACKEND, "internal error: %s", e.what());
  } catch (...) {
    return set_error(KILN_ERR_BACKEND, "internal error: unknown exception");
  }
}

// Wraps an implementation so that no exception crosses the C ABI.
template <auto Fn>
struct Guard;

template <class... A, kiln_status (*Fn)(A...)>
struct Guard<Fn> {
  static kiln_status call(A... a) noexcept {
    try {
      return Fn(a...);
    } catch (...) {
      return from_exception();
    }
  }
};

template <class... A, void (*Fn)(A...)>
struct Guard<Fn> {
  static void call(A... a) noexcept {
    try {
      Fn(a...);
    } catch (...) {
      from_exception();
    }
  }
};

const char* last_error_entry() noexcept { return last_error(); }
const char* availability_entry() noexcept { return availability(); }
int device_count_entry() noexcept {
  try {
    return device_count();
  } catch (...) {
    from_exception();
    return 0;
  }
}

const kiln_backend_v1 kTable = {
    .abi_version = KILN_BACKEND_ABI_VERSION,
    .struct_size = sizeof(kiln_backend_v1),
    .name = "cuda",
    .dialect = KILN_DIALECT_CUDA,
    .last_error = last_error_entry,
    .init = Guard<init>::call,
    .shutdown = Guard<shutdown>::call,
    .availability = availability_entry,
    .compiler_id = Guard<compiler_id>::call,
    .device_count = device_count_entry,
    .device_info = Guard<device_info>::call,
    .device_open = Guard<device_open>::call,
    .device_close = Guard<device_close>::call,
    .mem_alloc = Guard<mem_alloc>::call,
    .mem_free = Guard<mem_free>::call,
    .host_alloc = Guard<host_alloc>::call,
    .host_free = Guard<host_free>::call,
    .mem_address = Guard<mem_address>::call,
    .copy_h2d = Guard<copy_h2d>::call,
    .copy_d2h = Guard<copy_d2h>::call,
    .copy_d2d = Guard<copy_d2d>::call,
    .fill = Guard<fill>::call,
    .queue_create = Guard<queue_create>::call,
    .queue_destroy = Guard<queue_destroy>::call,
    .queue_finish = Guard<queue_finish>::call,
    .queue_wait_event = Guard<queue_wait_event>::call,
    .event_create = Guard<event_create>::call,
    .event_destroy = Guard<event_destroy>::call,
    .event_record = Guard<event_record>::call,
    .event_wait = Guard<event_wait>::call,
    .event_query = Guard<event_query>::call,
    .event_elapsed_ms = Guard<event_elapsed_ms>::call,
    .compile = Guard<compile>::call,
    .free_blob = Guard<free_blob>::call,
    .program_load = Guard<program_load>::call,
    .program_unload = Guard<program_unload>::call,
    .kernel_get = Guard<kernel_get>::call,
    .kernel_limits = Guard<kernel_limits>::call,
    .launch = Guard<launch>::call,
};

}  // namespace
}  // namespace kiln_cuda

extern "C" __attribute__((visibility("default"))) const kiln_backend_v1* kiln_backend_entry(
    uint32_t core_abi_version) {
  if (core_abi_version != KILN_BACKEND_ABI_VERSION) return nullptr;
  return &kiln_cuda::kTable;
}
