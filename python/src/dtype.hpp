// Kiln's element types in Python: one table row per kiln::scalar_type (its Python name, its
// NumPy dtype name, or none where NumPy has none), conversions from what users pass as a
// dtype, and a dispatch from a run-time type to its C++ type.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/half.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln::python {
namespace py = pybind11;

struct dtype_row {
  scalar_type type;
  const char* name;          // kiln.float32's name, as NumPy and PyTorch spell it
  const char* alias;         // the kernel language's short spelling ("f32")
  const char* numpy;         // NumPy's dtype name; nullptr where NumPy has no such type (bfloat16)
  std::uint8_t dlpack_code;  // DLDataTypeCode: 0 int, 1 uint, 2 float, 4 bfloat, 6 bool
};

const std::vector<dtype_row>& dtype_table();
const dtype_row& row_of(scalar_type t);
// A kiln.dtype, a name ("float32", "f32", "torch.float32"), a NumPy dtype or type, a Python
// type (float, int, bool) or a torch.dtype; else kiln.dtype_error naming what was passed.
scalar_type to_scalar_type(py::handle h);
// NumPy's dtype of t; kiln.dtype_error where NumPy has none.
py::dtype to_numpy_dtype(scalar_type t);
// The row of a NumPy dtype; kiln.dtype_error for one Kiln does not have (complex, float16 ...).
scalar_type from_numpy_dtype(const py::dtype& d);

// A device argument: a kiln.device, a spec string ("cpu:0"), or None (kiln::device::best()).
device to_device(py::handle h);

// f(T{}) with T the C++ type of t (the types kiln::scalar_type_of maps).
template <class F>
decltype(auto) dispatch(scalar_type t, F&& f) {
  switch (t) {
    case scalar_type::boolean: return f(bool{});
    case scalar_type::i8: return f(std::int8_t{});
    case scalar_type::i16: return f(std::int16_t{});
    case scalar_type::i32: return f(std::int32_t{});
    case scalar_type::i64: return f(std::int64_t{});
    case scalar_type::u8: return f(std::uint8_t{});
    case scalar_type::u16: return f(std::uint16_t{});
    case scalar_type::u32: return f(std::uint32_t{});
    case scalar_type::u64: return f(std::uint64_t{});
    case scalar_type::f32: return f(float{});
    case scalar_type::f64: return f(double{});
    case scalar_type::f16: return f(half{});
    case scalar_type::bf16: return f(bfloat16{});
  }
  throw unsupported(std::string("kiln (Python): no C++ scalar type for ") + row_of(t).name);
}

bool is_floating(scalar_type t);

// A Python number as T (the 16-bit floats through float, as they have no pybind11 caster).
template <class T>
T cast_scalar(py::handle h) {
  if constexpr (std::is_arithmetic_v<T>)
    return h.cast<T>();
  else
    return T(h.cast<float>());
}

}  // namespace kiln::python
