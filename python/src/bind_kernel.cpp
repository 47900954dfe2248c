// kiln.compile(source) -> kiln.program -> kiln.kernel, launched with typed arguments over
// kiln.buffer (device memory of one element type) and Python scalars.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/buffer.hpp"
#include "kiln/kernel.hpp"
#include "kiln/queue.hpp"
#include "wait.hpp"

namespace kiln::python {
namespace {

// kiln::buffer<T> with T chosen at run time: the allocation, a window on it, its type.
struct py_buffer {
  std::shared_ptr<detail::memory_impl> mem;
  std::uint64_t offset = 0, size = 0;
  scalar_type dtype = scalar_type::f32;

  template <class T>
  buffer_view<T> view() const {
    return buffer_view<T>(mem, offset, size);
  }
  const device& get_device() const {
    return dispatch(dtype,
                    [&](auto z) -> const device& { return view<decltype(z)>().get_device(); });
  }
};

py_buffer allocate(const device& dev, std::uint64_t n, scalar_type t) {
  return dispatch(t, [&](auto z) {
    buffer<decltype(z)> b(dev, n);
    return py_buffer{b.view().memory(), 0, n, t};
  });
}

py_buffer buffer_from_data(py::handle data, py::handle dtype, const device& dev) {
  py::object np_dtype =
      dtype.is_none() ? py::none() : py::object(to_numpy_dtype(to_scalar_type(dtype)));
  auto arr =
      py::module_::import("numpy").attr("ascontiguousarray")(data, np_dtype).cast<py::array>();
  const scalar_type t = from_numpy_dtype(arr.dtype());
  if (arr.ndim() != 1)
    throw invalid_argument("kiln.buffer: data must be 1-D (got " + std::to_string(arr.ndim()) +
                           " dimensions); flatten it first");
  py_buffer b = allocate(dev, static_cast<std::uint64_t>(arr.size()), t);
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    const T* p = static_cast<const T*>(arr.data());
    py::gil_scoped_release release;
    b.view<T>().copy_from(std::span<const T>(p, b.size));
  });
  return b;
}

py::array buffer_numpy(const py_buffer& b) {
  wait_for_default_queue(b.get_device());  // the kernels writing it, interruptibly
  py::array out(to_numpy_dtype(b.dtype),
                std::vector<py::ssize_t>{static_cast<py::ssize_t>(b.size)});
  dispatch(b.dtype, [&](auto z) {
    using T = decltype(z);
    T* p = static_cast<T*>(out.mutable_data());
    py::gil_scoped_release release;
    b.view<T>().copy_to(std::span<T>(p, b.size));
  });
  return out;
}

range to_range(py::handle h, const char* what) {
  if (PyLong_Check(h.ptr())) return range(h.cast<std::uint64_t>());
  const auto v = h.cast<std::vector<std::uint64_t>>();
  switch (v.size()) {
    case 1: return range(v[0]);
    case 2: return range(v[0], v[1]);
    case 3: return range(v[0], v[1], v[2]);
  }
  throw invalid_argument(std::string("kiln.kernel.launch: ") + what +
                         " has 1 to 3 dimensions (got " + std::to_string(v.size()) + ")");
}

// Binds each argument to its declared parameter: a kiln.buffer of the parameter's element type
// for a pointer, a Python number converted to the parameter's type for a scalar.
std::vector<detail::arg_binding> bind_args(const kernel& k, const py::args& args) {
  const auto& params = k.params();
  if (args.size() != params.size())
    throw invalid_argument("kiln.kernel '" + k.name() + "': " + std::to_string(params.size()) +
                           " parameters, " + std::to_string(args.size()) + " arguments given");
  std::vector<detail::arg_binding> out;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const kernel_param& p = params[i];
    const py::handle a = args[i];
    const std::string where =
        "kiln.kernel '" + k.name() + "', argument " + std::to_string(i) + " ('" + p.name + "')";
    if (p.is_pointer) {
      if (!py::isinstance<py_buffer>(a))
        throw invalid_argument(where + ": expects a kiln.buffer of " + row_of(p.type).name +
                               ", got " + py::repr(a).cast<std::string>());
      const auto& b = a.cast<const py_buffer&>();
      if (b.dtype != p.type)
        throw dtype_error(where + ": expects a buffer of " + row_of(p.type).name + ", got one of " +
                          row_of(b.dtype).name);
      out.push_back(
          dispatch(b.dtype, [&](auto z) { return detail::bind_arg(b.view<decltype(z)>()); }));
    } else {
      if (!PyBool_Check(a.ptr()) && !PyLong_Check(a.ptr()) && !PyFloat_Check(a.ptr()) &&
          !py::hasattr(a, "__index__") && !py::hasattr(a, "__float__"))
        throw invalid_argument(where + ": expects a number (" + row_of(p.type).name + "), got " +
                               py::repr(a).cast<std::string>());
      out.push_back(dispatch(p.type, [&](auto z) {
        using T = decltype(z);
        if constexpr (std::is_integral_v<T>)
          return detail::bind_arg(a.cast<T>());
        else
          return detail::bind_arg(static_cast<T>(a.cast<double>()));
      }));
    }
  }
  return out;
}

// A kernel and the device of its program (whose default queue launches it).
struct py_kernel {
  kernel k;
  device dev;
};

void launch(const py_kernel& pk, py::handle global, const py::args& args, py::handle local) {
  std::vector<detail::arg_binding> b = bind_args(pk.k, args);
  const range g = to_range(global, "global_size");
  std::optional<range> l;
  if (!local.is_none()) l = to_range(local, "local_size");
  queue& q = pk.dev.default_queue();
  py::gil_scoped_release release;
  detail::launch(*pk.k.impl(), *q.impl(), g, l ? &*l : nullptr, b.data(), b.size());
}

std::string check_names() { return "'automatic', 'off' or 'bounds'"; }

check_mode to_check_mode(const std::string& s) {
  if (s == "automatic") return check_mode::automatic;
  if (s == "off") return check_mode::off;
  if (s == "bounds") return check_mode::bounds;
  throw invalid_argument("kiln.compile: checks is " + check_names() + ", not '" + s + "'");
}

}  // namespace

void bind_kernel(py::module_& m) {
  py::class_<py_buffer>(m, "buffer", R"(Device memory of one element type (kiln::buffer<T>), what
raw kernels read and write. kiln.buffer(data, dtype=None, device=None) copies a 1-D array.)")
      .def(py::init([](py::handle data, py::handle dtype, py::handle dev) {
             return buffer_from_data(data, dtype, to_device(dev));
           }),
           py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none())
      .def_static(
          "empty",
          [](std::uint64_t n, py::handle dtype, py::handle dev) {
            return allocate(to_device(dev), n,
                            dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype));
          },
          py::arg("size"), py::kw_only(), py::arg("dtype") = py::none(),
          py::arg("device") = py::none(), "size uninitialised elements.")
      .def_property_readonly("dtype", [](const py_buffer& b) { return b.dtype; })
      .def_property_readonly("device", &py_buffer::get_device)
      .def("__len__", [](const py_buffer& b) { return b.size; })
      .def("numpy", &buffer_numpy, "A NumPy copy (waits for the kernels that use the buffer).")
      .def(
          "__array__",
          [](const py_buffer& b, py::object dtype, py::object) -> py::object {
            py::array a = buffer_numpy(b);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def(
          "fill",
          [](const py_buffer& b, py::handle v) {
            dispatch(b.dtype, [&](auto z) {
              using T = decltype(z);
              const T value = cast_scalar<T>(v);
              py::gil_scoped_release release;
              b.view<T>().fill(value);
            });
          },
          py::arg("value"))
      .def(
          "subview",
          [](const py_buffer& b, std::uint64_t offset, std::uint64_t count) {
            return dispatch(b.dtype, [&](auto z) {
              auto v = b.view<decltype(z)>().subview(offset, count);
              return py_buffer{v.memory(), v.offset(), v.size(), b.dtype};
            });
          },
          py::arg("offset"), py::arg("count"), "A window sharing the memory.")
      .def("__repr__", [](const py_buffer& b) {
        return "kiln.buffer(size=" + std::to_string(b.size) + ", dtype=" + row_of(b.dtype).name +
               ", device=" + b.get_device().id() + ")";
      });

  py::class_<py_kernel>(m, "kernel", "One entry point of a compiled program.")
      .def_property_readonly("name", [](const py_kernel& k) { return k.k.name(); })
      .def_property_readonly(
          "params",
          [](const py_kernel& k) {
            py::list out;
            for (const kernel_param& p : k.k.params())
              out.append(py::make_tuple(p.name, p.type, p.is_pointer, p.is_const));
            return out;
          },
          "(name, dtype, is_pointer, is_const) of each parameter.")
      .def_property_readonly("max_work_group_size",
                             [](const py_kernel& k) { return k.k.max_work_group_size(); })
      .def("launch", &launch, py::arg("global_size"), py::kw_only(),
           py::arg("local_size") = py::none(),
           R"(k.launch(n, y, x, 2.0): enqueues on the device's default queue (asynchronous; reading
a buffer waits). Each argument must match its parameter: a kiln.buffer of the declared element
type, or a number (converted to the declared type).)")
      .def("__call__", &launch, py::arg("global_size"), py::kw_only(),
           py::arg("local_size") = py::none())
      .def("__repr__", [](const py_kernel& k) { return "kiln.kernel('" + k.k.name() + "')"; });

  py::class_<program>(m, "program", "Compiled kernel source (cached in memory and on disk).")
      .def(
          "kernel",
          [](const program& p, const std::string& name) {
            return py_kernel{p.get_kernel(name), p.get_device()};
          },
          py::arg("name"))
      .def("__getitem__",
           [](const program& p, const std::string& name) {
             return py_kernel{p.get_kernel(name), p.get_device()};
           })
      .def_property_readonly("kernel_names", &program::kernel_names)
      .def_property_readonly("device", &program::get_device)
      .def_property_readonly("checked", &program::checked);

  m.def(
      "compile",
      [](const std::string& source, py::handle dev, const std::string& options,
         const std::string& checks) {
        const device d = to_device(dev);
        const check_mode c = to_check_mode(checks);
        py::gil_scoped_release release;
        return program::compile(d, source, options, c);
      },
      py::arg("source"), py::arg("device") = py::none(), py::arg("options") = "",
      py::arg("checks") = "automatic",
      R"(Compiles kernel-language source for a device (compiled once, then cached); kernel
errors raise kiln.compile_error with .log and .excerpt. checks: 'automatic', 'off', 'bounds'.)");
  m.def(
      "device_synchronize",
      [](py::handle dev) {
        const device d = to_device(dev);
        wait_for_default_queue(d);  // where kernels run: Ctrl-C interrupts the long part
        py::gil_scoped_release release;
        d.synchronize();
      },
      py::arg("device") = py::none());
}

}  // namespace kiln::python
