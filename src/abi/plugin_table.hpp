// Builds a backend's whole kiln_backend table from the entry list in backend_abi.h. Use it in
// the plugin's namespace, where set_error and one function per entry are declared with the
// entry's name; each is wrapped by kiln_plugin::Guard (noexcept ones go in as they are):
//
//   namespace kiln_cuda {
//   const kiln_backend table = KILN_PLUGIN_TABLE("cuda", "cuda", 0);
//   }
//   KILN_PLUGIN_EXPORT(kiln_cuda::table)
#pragma once

#include <cstring>

#include "plugin_guard.hpp"

#define KILN_PLUGIN_ENTRY_(ret, fn, params) .fn = ::kiln_plugin::Guard<&set_error, fn>::call,

// name, dialect and flags (KILN_BACKEND_*) as in kiln_backend.
#define KILN_PLUGIN_TABLE(name_, dialect_, flags_)                                               \
  kiln_backend {                                                                                 \
    .abi_version = KILN_BACKEND_ABI_VERSION, .struct_size = sizeof(kiln_backend), .name = name_, \
    .dialect = dialect_, .flags = flags_, KILN_BACKEND_FUNCTIONS(KILN_PLUGIN_ENTRY_)             \
  }

// The plugin's only exported symbol: the table, for a core of the same ABI version.
#define KILN_PLUGIN_EXPORT(table_)                                                          \
  extern "C" __attribute__((visibility("default"))) const kiln_backend* kiln_backend_entry( \
      uint32_t core_abi_version) {                                                          \
    return core_abi_version == KILN_BACKEND_ABI_VERSION ? &(table_) : nullptr;              \
  }

namespace kiln_plugin {

// For a plugin without extension tables:
//   constexpr auto get_extension = kiln_plugin::no_extension;
//   constexpr auto extension_list = kiln_plugin::no_extension_list;
inline const void* no_extension(const char*, uint32_t) noexcept { return nullptr; }
inline const char* no_extension_list() noexcept { return ""; }

// True when `op` names the operation `want` (a KILN_OP_* string); a NULL op matches nothing.
inline bool is_op(const char* op, const char* want) noexcept {
  return op && std::strcmp(op, want) == 0;
}

}  // namespace kiln_plugin
