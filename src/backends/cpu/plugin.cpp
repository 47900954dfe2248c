// The CPU backend's ABI table. Built into libkiln, reached through the same kiln_backend
// table as the plugins, and registered with the registry as a built-in backend.
#include <unistd.h>

#include <cstdarg>
#include <cstdio>

#include "backends/cpu/cpu_backend.hpp"
#include "blas_abi.h"
#include "dnn_abi.h"
#include "plugin_table.hpp"
#include "runtime/builtin_backend.hpp"

namespace kiln::cpu {
namespace {
thread_local std::string error_message;
std::string availability_text;
}  // namespace

kiln_status fail(kiln_status s, std::string message) {
  error_message = std::move(message);
  return s;
}

kiln_status set_error(kiln_status s, const char* fmt, ...) noexcept {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  try {
    error_message = buf;
  } catch (...) {  // no memory for the message: the status still says what failed
  }
  return s;
}

const char* last_error() noexcept { return error_message.c_str(); }

}  // namespace kiln::cpu

namespace kiln::cpu::abi {
namespace {

using cpu::last_error;
using cpu::set_error;

// Names the compiler and the libraries behind the extensions ("...; OpenBLAS 0.3.21, oneDNN
// 2.6.3"), as `kiln info` shows them; loading them here costs nothing extra, since the
// registry asks for the extension list right after.
kiln_status init() {
  availability_text = compiler_path().empty()
                          ? "no host C++ compiler (install g++ or set KILN_CXX): kernels cannot "
                            "be compiled"
                          : "kernels compiled by " + compiler_path();
  std::string libraries;
  if (auto* b =
          static_cast<const kiln_blas_v1*>(blas_extension(KILN_BLAS_EXTENSION, KILN_BLAS_VERSION)))
    libraries = b->library;
  if (auto* d =
          static_cast<const kiln_dnn_v1*>(dnn_extension(KILN_DNN_EXTENSION, KILN_DNN_VERSION)))
    libraries += (libraries.empty() ? "" : ", ") + std::string(d->library);
  if (!libraries.empty()) availability_text += "; " + libraries;
  return KILN_OK;
}
void shutdown() {}
const char* availability() noexcept { return availability_text.c_str(); }
int device_count() { return 1; }

// "blas" (OpenBLAS, blas.cpp) and "dnn" (oneDNN, dnn.cpp), each where its library loads.
const void* get_extension(const char* name, uint32_t version) noexcept {
  if (const void* t = blas_extension(name, version)) return t;
  return dnn_extension(name, version);
}
const char* extension_list() noexcept {
  const bool blas = *blas_extension_list() != '\0', dnn = dnn_loaded();
  return blas && dnn ? "blas/1 dnn/1" : blas ? "blas/1" : dnn ? "dnn/1" : "";
}
// Rings: the serving loop runs on host threads over the same mapped queues. GEMM and GEMV:
// OpenBLAS (f16/bf16 widened to f32 for it).
// Convolution: oneDNN (f32 only; f64 runs the portable kernels).
int supports_op(int, const char* op, kiln_dtype dtype) noexcept {
  return kiln_plugin::is_op(op, KILN_OP_RING) ||
         kiln_plugin::is_op(op, KILN_OP_LOAD_WHILE_RESIDENT) ||
         kiln_plugin::is_op(op, KILN_OP_PIN_WHILE_RESIDENT) ||
         kiln_plugin::is_op(op, KILN_OP_RESET_KEEPS_OBJECTS) ||
         ((kiln_plugin::is_op(op, KILN_OP_GEMM) || kiln_plugin::is_op(op, KILN_OP_GEMV)) &&
          blas_supports(dtype)) ||
         (kiln_plugin::is_op(op, KILN_OP_CONV2D) && dnn_supports(dtype));
}

// Host memory: free is what the kernel reports available; cached, the idle blocks kept for reuse.
kiln_status mem_info(kiln_device_h, uint64_t* free_bytes, uint64_t* total_bytes,
                     uint64_t* cached_bytes) noexcept {
  const auto page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (free_bytes) *free_bytes = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * page;
  if (total_bytes) *total_bytes = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * page;
  if (cached_bytes) *cached_bytes = pooled_bytes();
  return KILN_OK;
}
kiln_status mem_trim(kiln_device_h) noexcept {
  trim_pool();
  return KILN_OK;
}
// The host cannot be lost; a reset only retires the core's handles, which still free their
// memory (KILN_OP_RESET_KEEPS_OBJECTS).
kiln_status device_status(kiln_device_h) noexcept { return KILN_OK; }
kiln_status device_reset(kiln_device_h) noexcept { return KILN_OK; }
// One device: no peers.
kiln_status peer_access(kiln_device_h a, kiln_device_h b) {
  return a == b ? KILN_OK : fail(KILN_ERR_UNSUPPORTED, "the cpu backend has one device");
}
kiln_status copy_peer(kiln_queue_h, kiln_device_h, kiln_mem_ref, kiln_device_h, kiln_mem_ref,
                      uint64_t) {
  return fail(KILN_ERR_UNSUPPORTED, "the cpu backend has one device");
}

// No graph API: kiln::graph replays the stages through queues and events.
constexpr std::nullptr_t graph_capture_begin = nullptr;
constexpr std::nullptr_t graph_capture_end = nullptr;
constexpr std::nullptr_t graph_launch = nullptr;
constexpr std::nullptr_t graph_destroy = nullptr;

const kiln_backend table = KILN_PLUGIN_TABLE("cpu", "cpp", 0);

const kiln_backend* entry(uint32_t core_abi_version) {
  return core_abi_version == KILN_BACKEND_ABI_VERSION ? &table : nullptr;
}

const detail::builtin_backend registration{entry};

}  // namespace
}  // namespace kiln::cpu::abi
