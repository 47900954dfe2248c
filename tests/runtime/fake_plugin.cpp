// A deliberately broken backend plugin, built three ways, to test how the loader refuses it.
#include "backend_abi.h"

#if FAKE_MODE == 1  // built for another ABI version
extern "C" __attribute__((visibility("default"))) const kiln_backend_v1* kiln_backend_entry(
    uint32_t) {
  static kiln_backend_v1 table{};
  table.abi_version = 999;
  table.struct_size = sizeof table;
  table.name = "fake";
  return &table;
}
#elif FAKE_MODE == 2  // refuses the core's version
extern "C" __attribute__((visibility("default"))) const kiln_backend_v1* kiln_backend_entry(
    uint32_t) {
  return nullptr;
}
#else                 // exports no entry point
extern "C" __attribute__((visibility("default"))) int not_an_entry() { return 0; }
#endif
