// What gemm.cpp and gemv.cpp share: operand checks, the vendor table, the path record.
#include <cstddef>
#include <cstdlib>
#include <string>
#include <string_view>

#include "linalg/linalg.hpp"

namespace kiln::linalg {
namespace {
thread_local path last = path::none;
// A version-1 table as first published: gemm_epilogue was appended later (size-gated).
constexpr std::size_t base_size = offsetof(kiln_blas_v1, gemm_epilogue);
}  // namespace

path last_path() noexcept { return last; }

const char* to_string(path p) noexcept {
  switch (p) {
    case path::vendor: return "vendor";
    case path::tiled: return "tiled";
    case path::simple: return "simple";
    case path::none: break;
  }
  return "none";
}

const char* vendor_library(const device& dev) {
  const auto* t = static_cast<const kiln_blas_v1*>(
      dev.impl()->extension(KILN_BLAS_EXTENSION, KILN_BLAS_VERSION));
  return t && t->header.struct_size >= base_size && t->library ? t->library : "";
}

namespace detail {

void set_path(path p) noexcept { last = p; }

void check_devices(const kiln::detail::queue_impl& q, const char* fn, const operand (&ops)[3],
                   const char* names) {
  for (int i = 0; i < 3; ++i)
    if (ops[i].mem && ops[i].mem->dev != q.dev)
      throw invalid_argument(std::string("kiln::linalg::") + fn + ": " + names[i] + " lives on " +
                             ops[i].mem->dev->id + " but the queue belongs to " + q.dev->id);
}

std::uint64_t span_of(std::uint64_t batch, std::uint64_t stride, std::uint64_t rows,
                      std::uint64_t cols, std::uint64_t ld, const std::string& what) {
  if (batch == 0 || rows == 0 || cols == 0) return 0;
  std::uint64_t last_matrix, last_row, total;
  if (__builtin_mul_overflow(batch - 1, stride, &last_matrix) ||
      __builtin_mul_overflow(rows - 1, ld, &last_row) ||
      __builtin_add_overflow(last_matrix, last_row, &total) ||
      __builtin_add_overflow(total, cols, &total))
    throw invalid_argument("kiln::linalg: " + what + " spans more than 2^64 elements");
  return total;
}

void check_size(const operand& x, std::uint64_t need, const char* fn, const char* name,
                const std::string& shape) {
  if (x.size < need)
    throw invalid_argument(std::string("kiln::linalg::") + fn + ": " + name + " holds " +
                           std::to_string(x.size) + " elements but the shape needs " +
                           std::to_string(need) + " (" + shape + ")");
}

kiln_dtype dtype_of(scalar_type t) {
  switch (t) {
    case scalar_type::f64: return KILN_DTYPE_F64;
    case scalar_type::f16: return KILN_DTYPE_F16;
    case scalar_type::bf16: return KILN_DTYPE_BF16;
    default: return KILN_DTYPE_F32;
  }
}

// KILN_LINALG_PORTABLE=1 skips the vendor library (to compare with it, and to test the
// portable kernels where a library exists). Read on every call: a GEMM outweighs getenv.
const kiln_blas_v1* vendor_table(const kiln::detail::device_impl& dev, scalar_type t) {
  const char* portable = std::getenv("KILN_LINALG_PORTABLE");
  if (portable && *portable && std::string_view(portable) != "0") return nullptr;
  if (!dev.supports_op(KILN_OP_GEMM, dtype_of(t))) return nullptr;
  const auto* table =
      static_cast<const kiln_blas_v1*>(dev.extension(KILN_BLAS_EXTENSION, KILN_BLAS_VERSION));
  return table && table->header.struct_size >= base_size && table->gemm && table->gemv ? table
                                                                                       : nullptr;
}

epilogue_fn epilogue_of(const kiln_blas_v1* table) noexcept {
  return table && table->header.struct_size >= sizeof(kiln_blas_v1) ? table->gemm_epilogue
                                                                    : nullptr;
}

kiln_mem_ref mem_ref(kiln::detail::queue_impl& q, const operand& x, scalar_type t) {
  kiln::detail::note_queue_use(*x.mem, q);
  return {x.mem->handle, x.offset * size_of(t)};
}

kiln::detail::arg_binding mem_arg(const operand& x, scalar_type t, std::uint64_t skip,
                                  bool is_const) {
  kiln::detail::arg_binding b;
  b.is_mem = true;
  b.type = t;
  b.is_const = is_const;
  b.mem = x.mem;
  b.byte_offset = (x.offset + skip) * size_of(t);
  return b;
}

}  // namespace detail
}  // namespace kiln::linalg
