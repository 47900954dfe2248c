// The CPU backend's ABI table. Built into libkiln and reached through the same
// kiln_backend_v1 interface as the plugins.
#include "backends/cpu/cpu_backend.hpp"

namespace kiln::cpu {
namespace {
thread_local std::string error_message;
std::string availability_text;
}  // namespace

kiln_status fail(kiln_status s, std::string message) {
  error_message = std::move(message);
  return s;
}

const char* last_error() { return error_message.c_str(); }

namespace {
kiln_status init() {
  availability_text = compiler_path().empty()
                          ? "no host C++ compiler (install g++ or set KILN_CXX): kernels cannot "
                            "be compiled"
                          : "kernels compiled by " + compiler_path();
  return KILN_OK;
}
void shutdown() {}
const char* availability() { return availability_text.c_str(); }
int device_count() { return 1; }
}  // namespace

}  // namespace kiln::cpu

extern "C" const kiln_backend_v1* kiln_cpu_backend_entry(uint32_t core_abi_version) {
  using namespace kiln::cpu;
  static const kiln_backend_v1 table = {KILN_BACKEND_ABI_VERSION,
                                        sizeof(kiln_backend_v1),
                                        "cpu",
                                        "cpp",
                                        last_error,
                                        init,
                                        shutdown,
                                        availability,
                                        abi::compiler_id,
                                        device_count,
                                        abi::device_info,
                                        abi::device_open,
                                        abi::device_close,
                                        abi::mem_alloc,
                                        abi::mem_free,
                                        abi::host_alloc,
                                        abi::host_free,
                                        abi::mem_address,
                                        abi::copy_h2d,
                                        abi::copy_d2h,
                                        abi::copy_d2d,
                                        abi::fill,
                                        abi::queue_create,
                                        abi::queue_destroy,
                                        abi::queue_finish,
                                        abi::queue_wait_event,
                                        abi::event_create,
                                        abi::event_destroy,
                                        abi::event_record,
                                        abi::event_wait,
                                        abi::event_query,
                                        abi::event_elapsed_ms,
                                        abi::compile,
                                        abi::free_blob,
                                        abi::program_load,
                                        abi::program_unload,
                                        abi::kernel_get,
                                        abi::kernel_limits,
                                        abi::launch};
  return core_abi_version == KILN_BACKEND_ABI_VERSION ? &table : nullptr;
}
