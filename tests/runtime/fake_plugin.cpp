// A fake backend plugin, built five ways: three broken ones to test how the loader refuses
// them, and two that load, to test extension tables and capability queries.
#include <cstring>

#include "backend_abi.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

#if FAKE_MODE == 1  // built for another ABI version
FAKE_EXPORT const kiln_backend* kiln_backend_entry(uint32_t) {
  static kiln_backend table{};
  table.abi_version = 999;
  table.struct_size = sizeof table;
  table.name = "fake";
  return &table;
}
#elif FAKE_MODE == 2  // refuses the core's version
FAKE_EXPORT const kiln_backend* kiln_backend_entry(uint32_t) { return nullptr; }
#elif FAKE_MODE == 3  // exports no entry point
FAKE_EXPORT int not_an_entry() { return 0; }
#else                 // 4: one device, a "test" extension and supports_op; 5: the same, older table
namespace {

// The "test" extension, version 1.
struct test_ext_v1 {
  kiln_extension_header header;
  int (*answer)(void);
};
int answer() { return 42; }
const test_ext_v1 test_ext = {{1, sizeof(test_ext_v1)}, answer};
// A table that says it is version 7 whatever was asked: the core must not trust it.
const test_ext_v1 liar_ext = {{7, sizeof(test_ext_v1)}, answer};

const void* get_extension(const char* name, uint32_t version) {
  if (std::strcmp(name, "test") == 0 && version == 1) return &test_ext;
  if (std::strcmp(name, "liar") == 0) return &liar_ext;
  return nullptr;
}
const char* extension_list() { return "test/1 liar/1"; }
// gemm on f32 only; nothing else.
int supports_op(int, const char* op, kiln_dtype dtype) {
  return std::strcmp(op, KILN_OP_GEMM) == 0 && dtype == KILN_DTYPE_F32;
}

const char* no_error() { return ""; }
kiln_status init() { return KILN_OK; }
void shutdown() {}
int device_count() { return 1; }
kiln_status device_info(int, kiln_device_info* out) {
  std::strcpy(out->name, "fake device");
  std::strcpy(out->arch, "fake");
  out->type = KILN_DEVICE_CPU;
  return KILN_OK;
}

}  // namespace

FAKE_EXPORT const kiln_backend* kiln_backend_entry(uint32_t) {
  static kiln_backend table{};
  table.abi_version = KILN_BACKEND_ABI_VERSION;
  // Mode 5 is a plugin built before the optional entries: its table ends where they start.
  table.struct_size = FAKE_MODE == 4 ? sizeof table : KILN_BACKEND_REQUIRED_SIZE;
  table.name = FAKE_MODE == 4 ? "fake_ext" : "fake_old";
  table.dialect = "cpp";
  table.flags = KILN_BACKEND_PORTABLE;  // never chosen by device::best() over Kiln's own
  table.last_error = no_error;
  table.init = init;
  table.shutdown = shutdown;
  table.availability = no_error;
  table.device_count = device_count;
  table.device_info = device_info;
  // Filled in mode 5 too: the core must still not call past struct_size.
  table.get_extension = get_extension;
  table.extension_list = extension_list;
  table.supports_op = supports_op;
  return &table;
}
#endif
