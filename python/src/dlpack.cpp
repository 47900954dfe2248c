// DLPack (https://dmlc.github.io/dlpack): kiln.tensor.__dlpack__ / __dlpack_device__ and
// kiln.from_dlpack.
//
// Kiln's public C++ API has no way to see a tensor's memory or to adopt memory it did not
// allocate, so both directions copy, through the host, synchronously (which is also what makes
// any stream argument safe to ignore: nothing is pending when the capsule is handed over).
// The copies are confined to export_elements and import_elements below, the two places that
// become zero-copy when the API offers a tensor's native storage and adoption of foreign memory.
#include <dlpack/dlpack.h>
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/tensor.hpp"
#include "tensor_args.hpp"

namespace kiln::python {
namespace {

constexpr const char* capsule_name = "dltensor";
constexpr const char* used_name = "used_dltensor";

// What a capsule owns: the DLManagedTensor, its shape and the elements.
struct export_ctx {
  DLManagedTensor managed{};
  std::vector<std::int64_t> shape;
  std::unique_ptr<std::byte[]> data;
};

void delete_export(DLManagedTensor* m) { delete static_cast<export_ctx*>(m->manager_ctx); }

DLDataType dl_type(scalar_type t) {
  const dtype_row& r = row_of(t);
  return DLDataType{r.dlpack_code, static_cast<std::uint8_t>(size_of(t) * 8), 1};
}

scalar_type from_dl_type(DLDataType d) {
  if (d.lanes != 1)
    throw dtype_error("kiln.from_dlpack: vector element types (lanes " + std::to_string(d.lanes) +
                      ") are not supported");
  for (const dtype_row& r : dtype_table())
    if (r.dlpack_code == d.code && size_of(r.type) * 8 == d.bits) return r.type;
  // Producers before DLPack 0.8 spell bool as an unsigned 8-bit integer of their bool array.
  throw dtype_error("kiln.from_dlpack: no Kiln element type for DLPack type code " +
                    std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits");
}

// The elements of x in new host memory owned by ctx (evaluated, contiguous, row-major).
void export_elements(const tensor& x, export_ctx& ctx) {
  const std::uint64_t n = static_cast<std::uint64_t>(x.numel());
  ctx.data.reset(new std::byte[std::max<std::uint64_t>(n * size_of(x.dtype()), 1)]);
  py::gil_scoped_release release;
  detail::tensor_read(x, x.dtype(), ctx.data.get(), n);
}

py::capsule to_dlpack(const tensor& x, py::handle stream) {
  // The capsule holds host memory: only None (or -1, "no synchronisation") fits kDLCPU.
  if (!stream.is_none() && !(PyLong_Check(stream.ptr()) && stream.cast<long long>() == -1))
    throw unsupported(
        "kiln.tensor.__dlpack__: the exported memory is host memory (kDLCPU): "
        "stream must be None, got " +
        py::repr(stream).cast<std::string>());
  auto ctx = std::make_unique<export_ctx>();
  ctx->shape = x.shape();
  export_elements(x, *ctx);
  DLTensor& t = ctx->managed.dl_tensor;
  t.data = ctx->data.get();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = static_cast<int>(ctx->shape.size());
  t.dtype = dl_type(x.dtype());
  t.shape = ctx->shape.data();
  t.strides = nullptr;  // compact row-major
  t.byte_offset = 0;
  ctx->managed.manager_ctx = ctx.get();
  ctx->managed.deleter = &delete_export;
  DLManagedTensor* m = &ctx.release()->managed;
  // A capsule never consumed still owns the tensor: its destructor calls the deleter.
  return py::capsule(m, capsule_name, [](PyObject* cap) {
    if (PyCapsule_IsValid(cap, capsule_name)) {
      auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap, capsule_name));
      if (mt && mt->deleter) mt->deleter(mt);
    }
  });
}

// A Kiln tensor on dev with the elements the DLManagedTensor describes (host memory).
tensor import_elements(const DLManagedTensor& mt, py::handle owner, const device& dev) {
  const DLTensor& t = mt.dl_tensor;
  const scalar_type st = from_dl_type(t.dtype);
  std::vector<py::ssize_t> shape(t.shape, t.shape + t.ndim), strides(t.ndim);
  py::ssize_t step = static_cast<py::ssize_t>(size_of(st));
  for (int i = t.ndim - 1; i >= 0; --i) {
    strides[i] = t.strides ? t.strides[i] * static_cast<py::ssize_t>(size_of(st)) : step;
    step *= shape[i];
  }
  const auto* base = static_cast<const std::byte*>(t.data) + t.byte_offset;
  if (st == scalar_type::boolean || row_of(st).numpy) {
    // A NumPy view of the producer's memory (a base object stops pybind11 copying it), made
    // contiguous where its strides are not, then copied into the tensor.
    py::array view(py::dtype(row_of(st).numpy), shape, strides, base, owner);
    return tensor_from_data(view, py::none(), dev);
  }
  throw dtype_error(std::string("kiln.from_dlpack: ") + row_of(st).name +
                    " has no NumPy type to stage through");
}

tensor from_dlpack(py::object obj, py::handle dev) {
  py::object cap = obj;
  if (!PyCapsule_CheckExact(obj.ptr())) {
    if (!py::hasattr(obj, "__dlpack__"))
      throw invalid_argument(
          "kiln.from_dlpack: " + py::repr(py::type::of(obj)).cast<std::string>() +
          " has no __dlpack__ (pass a NumPy array, a torch or CuPy tensor, "
          "or a DLPack capsule)");
    const auto where = obj.attr("__dlpack_device__")().cast<std::pair<int, int>>();
    if (where.first != kDLCPU && where.first != kDLCUDAHost)
      throw unsupported("kiln.from_dlpack: memory on DLPack device type " +
                        std::to_string(where.first) +
                        " cannot be imported: Kiln's public C++ API adopts no foreign device "
                        "memory yet (copy it to the host first, e.g. with .cpu())");
    cap = obj.attr("__dlpack__")();
  }
  if (!PyCapsule_IsValid(cap.ptr(), capsule_name))
    throw invalid_argument("kiln.from_dlpack: not an unconsumed 'dltensor' capsule");
  auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), capsule_name));
  if (mt->dl_tensor.device.device_type != kDLCPU && mt->dl_tensor.device.device_type != kDLCUDAHost)
    throw unsupported("kiln.from_dlpack: only host memory (kDLCPU) can be imported");
  // Consumed: from here the deleter is ours to call (once the elements are copied).
  PyCapsule_SetName(cap.ptr(), used_name);
  struct release_on_exit {
    DLManagedTensor* m;
    ~release_on_exit() {
      if (m->deleter) m->deleter(m);
    }
  } release{mt};
  return import_elements(*mt, cap, dev.is_none() ? device::host() : to_device(dev));
}

}  // namespace

void bind_dlpack(py::module_& m, tensor_class& cls) {
  cls.def(
         "__dlpack__",
         [](const tensor& x, py::handle stream, py::kwargs) { return to_dlpack(x, stream); },
         py::arg("stream") = py::none(),
         "A DLPack capsule of the elements in host memory (a copy: see docs/python.md).")
      .def("__dlpack_device__", [](const tensor&) { return py::make_tuple(int{kDLCPU}, 0); });
  m.def("from_dlpack", &from_dlpack, py::arg("x"), py::arg("device") = py::none(),
        "A kiln.tensor of a DLPack producer's elements (NumPy, torch, CuPy on the host, or a "
        "capsule); device None is the host's CPU device.");
}

}  // namespace kiln::python
