// The kiln_backend table and the plugin's only exported symbol.
#include "cuda_backend.hpp"
#include "plugin_table.hpp"

namespace kiln_cuda {
namespace {

// Hides kiln_cuda::init in this table: once the driver is up, the availability line also says
// whether cuDNN loaded, and why not.
kiln_status init() {
  const kiln_status st = kiln_cuda::init();
  if (st == KILN_OK) dnn_note_availability();
  return st;
}

// "blas" (cuBLAS, blas.cpp), "dnn" (cuDNN, dnn.cpp) and "ccl" (NCCL, ccl.cpp). Each loads its
// library on first need.
const void* get_extension(const char* name, uint32_t version) noexcept {
  if (const void* t = blas_extension(name, version)) return t;
  if (const void* t = ccl_extension(name, version)) return t;
  return dnn_extension(name, version);
}

const char* extension_list() noexcept {
  static const char* const lists[8] = {
      "",      "blas/1",       "dnn/1",       "blas/1 dnn/1",
      "ccl/1", "blas/1 ccl/1", "dnn/1 ccl/1", "blas/1 dnn/1 ccl/1"};
  return lists[(blas_loaded() ? 1 : 0) | (dnn_loaded() ? 2 : 0) | (ccl_loaded() ? 4 : 0)];
}

// Rings need system-scope atomics on mapped host memory, which CUDA has. GEMM: cuBLAS.
// Convolution: cuDNN. Graphs: when the driver has the graph API.
int supports_op(int, const char* op, kiln_dtype dtype) noexcept {
  const bool f32_f64 = dtype == KILN_DTYPE_F32 || dtype == KILN_DTYPE_F64;
  const bool f16_bf16 = dtype == KILN_DTYPE_F16 || dtype == KILN_DTYPE_BF16;
  return kiln_plugin::is_op(op, KILN_OP_RING) ||
         (kiln_plugin::is_op(op, KILN_OP_GEMM) && f32_f64 && blas_loaded()) ||
         (kiln_plugin::is_op(op, KILN_OP_GEMM) && f16_bf16 && blas_reduced_loaded()) ||
         (kiln_plugin::is_op(op, KILN_OP_CONV2D) && (f32_f64 || f16_bf16) && dnn_loaded()) ||
         (kiln_plugin::is_op(op, KILN_OP_GRAPH) && g_cu.has_graphs);
}

const kiln_backend table = KILN_PLUGIN_TABLE("cuda", "cuda", KILN_BACKEND_COMPILE_ANY_THREAD);

}  // namespace
}  // namespace kiln_cuda

KILN_PLUGIN_EXPORT(kiln_cuda::table)
