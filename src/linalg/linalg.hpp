// kiln::linalg internals: operand checks, the vendor table, and the portable kernels.
#pragma once

#include <cstdint>
#include <string>

#include "blas_abi.h"
#include "kiln/kernel.hpp"
#include "kiln/linalg.hpp"
#include "runtime/runtime.hpp"

namespace kiln::linalg::detail {

// Records the path this thread's last call took (last_path()).
void set_path(path p) noexcept;

// Throws invalid_argument unless the three operands live on the queue's device; names[i] is
// operand i's one-letter name ("ABC").
void check_devices(const kiln::detail::queue_impl& q, const char* fn, const operand (&ops)[3],
                   const char* names);
// Elements a strided batch of rows x cols matrices with pitch ld spans (0 when empty);
// throws invalid_argument naming `what` when the count overflows.
std::uint64_t span_of(std::uint64_t batch, std::uint64_t stride, std::uint64_t rows,
                      std::uint64_t cols, std::uint64_t ld, const std::string& what);
// Throws invalid_argument unless `x` holds `need` elements.
void check_size(const operand& x, std::uint64_t need, const char* fn, const char* name,
                const std::string& shape);

// The device's "blas" table when it runs GEMM on t through it, else null.
const kiln_blas_v1* vendor_table(const kiln::detail::device_impl& dev, scalar_type t);
kiln_dtype dtype_of(scalar_type t);
// The table's gemm_epilogue (appended within version 1) when it has one; null for a null table.
using epilogue_fn = kiln_status (*)(kiln_queue_h, const kiln_blas_gemm_desc*,
                                    const kiln_blas_epilogue_desc*);
epilogue_fn epilogue_of(const kiln_blas_v1* table) noexcept;
// Marks the operand used by q and returns its (allocation, byte offset).
kiln_mem_ref mem_ref(kiln::detail::queue_impl& q, const operand& x, scalar_type t);
// A kernel argument bound to an operand shifted by `skip` elements.
kiln::detail::arg_binding mem_arg(const operand& x, scalar_type t, std::uint64_t skip,
                                  bool is_const);

// The portable kernels for element type t (float or double), in the kernel language:
// "kiln_gemm_tiled" (local-memory tiles, needs barriers) in the tiled program;
// "kiln_gemm_simple" (one work-item per element) and "kiln_gemv" in the simple one.
const std::string& tiled_source(scalar_type t);
const std::string& simple_source(scalar_type t);
// The tiled kernel's output tile (rows and columns per work-group) and work-group side.
inline constexpr std::uint64_t tile = 64, group_side = 16;

}  // namespace kiln::linalg::detail
