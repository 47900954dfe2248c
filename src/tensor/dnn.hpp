// The device's "dnn" extension (cuDNN on CUDA) as conv2d, pooling and attention use it, and the
// helpers that turn stored tensors into its memory references.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string_view>

#include "dnn_abi.h"
#include "runtime/runtime.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

inline kiln_dtype dnn_dtype(scalar_type t) {
  switch (t) {
    case scalar_type::f64: return KILN_DTYPE_F64;
    case scalar_type::f16: return KILN_DTYPE_F16;
    case scalar_type::bf16: return KILN_DTYPE_BF16;
    default: return KILN_DTYPE_F32;
  }
}

// KILN_DNN_PORTABLE=1: no table (to test and compare the portable kernels where a library
// exists).
inline bool dnn_portable() {
  const char* portable = std::getenv("KILN_DNN_PORTABLE");
  return portable && *portable && std::string_view(portable) != "0";
}

// The table when the device runs conv2d on t through it, else null.
inline const kiln_dnn_v1* dnn_table(const device& dev, scalar_type t) {
  if (dnn_portable()) return nullptr;
  const device_impl& d = *dev.impl();
  if (!d.supports_op(KILN_OP_CONV2D, dnn_dtype(t))) return nullptr;
  const auto* table =
      static_cast<const kiln_dnn_v1*>(d.extension(KILN_DNN_EXTENSION, KILN_DNN_VERSION));
  // The fields before the attention entries (appended later within version 1).
  const std::size_t need = offsetof(kiln_dnn_v1, attention_forward);
  return table && table->header.struct_size >= need ? table : nullptr;
}

// The table when the device runs fused attention through it (the CUDA plugin: cuDNN's flash
// attention), else null; KILN_DNN_PORTABLE=1 skips it too.
inline const kiln_dnn_v1* dnn_attention_table(const device& dev) {
  if (dnn_portable()) return nullptr;
  const auto* table =
      static_cast<const kiln_dnn_v1*>(dev.impl()->extension(KILN_DNN_EXTENSION, KILN_DNN_VERSION));
  const std::size_t need = offsetof(kiln_dnn_v1, attention_backward) + sizeof(void*);
  return table && table->header.struct_size >= need && table->attention_forward &&
                 table->attention_backward
             ? table
             : nullptr;
}

// A stored tensor's (allocation, byte offset), marked as used by the device's default queue.
inline kiln_mem_ref dnn_ref(const tensor_impl& x) {
  note_queue_use(*x.mem, *x.dev.default_queue().impl());
  return {x.mem->handle, static_cast<std::uint64_t>(x.offset) * size_of(x.dtype)};
}

// A stored 4-d tensor ([batch, heads, rows, cols], columns contiguous) as an attention operand.
inline kiln_dnn_view dnn_view(const tensor_impl& x) {
  return {dnn_ref(x), {x.strides[0], x.strides[1], x.strides[2]}};
}

}  // namespace kiln::detail
