// The kiln_backend table and the plugin's only exported symbol.
#include "cuda_backend.hpp"
#include "plugin_table.hpp"

namespace kiln_cuda {
namespace {

constexpr auto get_extension = kiln_plugin::no_extension;
constexpr auto extension_list = kiln_plugin::no_extension_list;
// Rings need system-scope atomics on mapped host memory, which CUDA has.
int supports_op(int, const char* op, kiln_dtype) noexcept {
  return kiln_plugin::is_op(op, KILN_OP_RING);
}

const kiln_backend table = KILN_PLUGIN_TABLE("cuda", "cuda", 0);

}  // namespace
}  // namespace kiln_cuda

KILN_PLUGIN_EXPORT(kiln_cuda::table)
