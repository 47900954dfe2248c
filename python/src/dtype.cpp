#include "dtype.hpp"

#include <string>
#include <string_view>

#include "bindings.hpp"

namespace kiln::python {

const std::vector<dtype_row>& dtype_table() {
  // One row per kiln::scalar_type: adding a type to Kiln (f16, bf16) is one row here (and one
  // case in dispatch() when it has a C++ type).
  static const std::vector<dtype_row> rows = {
      {scalar_type::boolean, "bool", "bool", "bool", 6},
      {scalar_type::i8, "int8", "i8", "int8", 0},
      {scalar_type::i16, "int16", "i16", "int16", 0},
      {scalar_type::i32, "int32", "i32", "int32", 0},
      {scalar_type::i64, "int64", "i64", "int64", 0},
      {scalar_type::u8, "uint8", "u8", "uint8", 1},
      {scalar_type::u16, "uint16", "u16", "uint16", 1},
      {scalar_type::u32, "uint32", "u32", "uint32", 1},
      {scalar_type::u64, "uint64", "u64", "uint64", 1},
      {scalar_type::f32, "float32", "f32", "float32", 2},
      {scalar_type::f64, "float64", "f64", "float64", 2},
      {scalar_type::f16, "float16", "f16", "float16", 2},
      {scalar_type::bf16, "bfloat16", "bf16", nullptr, 4},
  };
  return rows;
}

const dtype_row& row_of(scalar_type t) {
  for (const dtype_row& r : dtype_table())
    if (r.type == t) return r;
  throw dtype_error("kiln (Python): element type " + std::to_string(static_cast<int>(t)) +
                    " has no row in python/src/dtype.cpp");
}

bool is_floating(scalar_type t) { return row_of(t).dlpack_code == 2 || row_of(t).dlpack_code == 4; }

namespace {

const dtype_row* find_name(std::string_view s) {
  if (s.starts_with("torch.")) s.remove_prefix(6);
  for (const dtype_row& r : dtype_table())
    if (s == r.name || s == r.alias) return &r;
  return nullptr;
}

std::string names() {
  std::string out;
  for (const dtype_row& r : dtype_table()) out += (out.empty() ? "" : ", ") + std::string(r.name);
  return out;
}

}  // namespace

scalar_type to_scalar_type(py::handle h) {
  if (py::isinstance<scalar_type>(h)) return h.cast<scalar_type>();
  if (py::isinstance<py::str>(h)) {
    const std::string s = h.cast<std::string>();
    if (const dtype_row* r = find_name(s)) return r->type;
    throw dtype_error("kiln: unknown dtype '" + s + "' (known: " + names() + ")");
  }
  // A torch.dtype: its str() is "torch.float32" (torch is not imported to check).
  const std::string type_name = py::str(py::type::of(h).attr("__module__")).cast<std::string>();
  if (type_name == "torch")
    if (const dtype_row* r = find_name(py::str(h).cast<std::string>())) return r->type;
  py::dtype d;
  try {
    d = py::dtype::from_args(py::reinterpret_borrow<py::object>(h));
  } catch (const py::error_already_set&) {
    throw dtype_error("kiln: not a dtype: " + py::repr(h).cast<std::string>() +
                      " (pass a kiln dtype, a NumPy dtype or a name: " + names() + ")");
  }
  return from_numpy_dtype(d);
}

py::dtype to_numpy_dtype(scalar_type t) {
  const dtype_row& r = row_of(t);
  if (!r.numpy)
    throw dtype_error(std::string("kiln: NumPy has no ") + r.name +
                      " type; convert first, e.g. x.to(kiln.float32)");
  return py::dtype(std::string(r.numpy));
}

scalar_type from_numpy_dtype(const py::dtype& d) {
  const std::string name = py::str(d.attr("name")).cast<std::string>();
  for (const dtype_row& r : dtype_table())
    if (r.numpy && name == r.numpy) return r.type;
  throw dtype_error("kiln: no Kiln element type for NumPy's " + name + " (known: " + names() + ")");
}

device to_device(py::handle h) {
  if (h.is_none()) return device::best();
  if (py::isinstance<py::str>(h)) return device::get(h.cast<std::string>());
  if (py::isinstance<device>(h)) return h.cast<device>();
  throw invalid_argument("kiln: not a device: " + py::repr(h).cast<std::string>() +
                         " (pass a kiln.device or a name such as 'cpu:0')");
}

void bind_dtype(py::module_& m) {
  py::enum_<scalar_type> e(m, "dtype", "Element types of tensors, buffers and kernels.");
  for (const dtype_row& r : dtype_table()) {
    e.value(r.name, r.type);
    m.attr(r.name) = e.attr(r.name);
  }
  e.def_property_readonly("itemsize", [](scalar_type t) { return size_of(t); });
  e.def_property_readonly("is_floating_point", [](scalar_type t) { return is_floating(t); });
  e.def_property_readonly(
      "numpy", [](scalar_type t) { return to_numpy_dtype(t); },
      "NumPy's dtype of this type (kiln.dtype_error where NumPy has none).");
  // Assigned, not def'd: def would overload enum_'s own __str__ (and clobber .name with it).
  e.attr("__str__") =
      py::cpp_function([](scalar_type t) { return std::string(row_of(t).name); }, py::is_method(e));
  m.def("as_dtype", &to_scalar_type, py::arg("dtype"),
        "The kiln.dtype of a name, a NumPy dtype or type, or a torch.dtype.");
}

}  // namespace kiln::python
