// The kiln_backend table and the plugin's only exported symbol.
#include "cuda_backend.hpp"
#include "plugin_table.hpp"

namespace kiln_cuda {
namespace {

constexpr auto get_extension = blas_extension;
constexpr auto extension_list = blas_extension_list;
// Rings need system-scope atomics on mapped host memory, which CUDA has. GEMM: cuBLAS.
int supports_op(int, const char* op, kiln_dtype dtype) noexcept {
  return kiln_plugin::is_op(op, KILN_OP_RING) ||
         (kiln_plugin::is_op(op, KILN_OP_GEMM) &&
          (dtype == KILN_DTYPE_F32 || dtype == KILN_DTYPE_F64) && blas_loaded());
}

const kiln_backend table = KILN_PLUGIN_TABLE("cuda", "cuda", 0);

}  // namespace
}  // namespace kiln_cuda

KILN_PLUGIN_EXPORT(kiln_cuda::table)
