// kiln.tensor: creation, properties, NumPy conversion, indexing and slicing, .to().
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/tensor.hpp"
#include "kiln/tensor/inplace.hpp"
#include "tensor_args.hpp"
#include "wait.hpp"

namespace kiln::python {

bool is_python_scalar(py::handle h) {
  return PyBool_Check(h.ptr()) || PyLong_Check(h.ptr()) || PyFloat_Check(h.ptr());
}

scalar_type scalar_type_beside(scalar_type t, py::handle value) {
  if (PyBool_Check(value.ptr())) return scalar_type::boolean;
  if (PyLong_Check(value.ptr())) return t == scalar_type::boolean ? scalar_type::i64 : t;
  return is_floating(t) ? t : scalar_type::f64;
}

axes to_axes(py::handle h) {
  if (h.is_none()) return {};
  if (PyLong_Check(h.ptr())) return axes(h.cast<int>());
  return axes(h.cast<std::vector<int>>());
}

shape_t to_normalized_shape(py::handle h) {
  if (PyLong_Check(h.ptr())) return {h.cast<std::int64_t>()};
  if (!PyUnicode_Check(h.ptr()) && !PyBytes_Check(h.ptr())) {
    try {
      return h.cast<shape_t>();
    } catch (const py::cast_error&) {
    }
  }
  throw py::type_error("normalized_shape must be an int or a sequence of ints, not " +
                       std::string(py::str(py::type::of(h).attr("__name__"))));
}

// A copy of x's elements in new storage (x.to(its own dtype) would be x itself).
tensor copy_of(const tensor& x) {
  return kiln::copy_(tensor::empty(x.get_device(), x.shape(), x.dtype()), x);
}

tensor tensor_from_data(py::handle data, py::handle dtype, const device& dev) {
  if (py::isinstance<tensor>(data)) {  // a copy, as from any other data
    const tensor& x = data.cast<const tensor&>();
    tensor t = x.get_device() == dev ? copy_of(x) : x.to(dev);
    return dtype.is_none() ? t : t.to(to_scalar_type(dtype));
  }
  // (a bool and a type rather than std::optional: GCC 12 warns of it as maybe uninitialised)
  const bool convert = !dtype.is_none();
  const scalar_type want = convert ? to_scalar_type(dtype) : scalar_type::f32;
  py::object np_dtype = py::none();
  if (convert && row_of(want).numpy) np_dtype = to_numpy_dtype(want);
  py::module_ np = py::module_::import("numpy");
  auto arr = np.attr("ascontiguousarray")(data, np_dtype).cast<py::array>();
  const scalar_type t = from_numpy_dtype(arr.dtype());
  shape_t shape(arr.shape(), arr.shape() + arr.ndim());
  tensor x;
  {
    py::gil_scoped_release release;
    x = detail::tensor_from_host(dev, t, arr.data(), static_cast<std::uint64_t>(arr.size()), shape);
  }
  return convert && want != t ? x.to(want) : x;
}

namespace {

// Waits, interruptibly (wait.hpp), for the work already queued where x lives (the products,
// convolutions and kernels x may be made of), so that the read after it is short. x's own lazy
// kernel, if any, runs inside the read: evaluating it here would make the read, not the
// evaluation, the last evaluating call that last_tensor_stats() reports.
void wait_before_reading(const tensor& x) { wait_for_default_queue(x.get_device()); }

py::array to_numpy(const tensor& x) {
  const py::dtype dt = to_numpy_dtype(x.dtype());
  std::vector<py::ssize_t> shape(x.shape().begin(), x.shape().end());
  py::array out(dt, shape);
  void* dst = out.mutable_data();
  wait_before_reading(x);
  {
    py::gil_scoped_release release;
    detail::tensor_read(x, x.dtype(), dst, static_cast<std::uint64_t>(x.numel()));
  }
  return out;
}

shape_t to_shape(py::args args) {
  if (args.size() == 1 && !PyLong_Check(args[0].ptr())) return args[0].cast<shape_t>();
  return args.cast<shape_t>();
}

// x[key]: ints select (the dimension goes), slices (step >= 1) keep it, None adds a size-1
// dimension, Ellipsis stands for the dimensions not named.
tensor index(const tensor& x, py::handle key) {
  std::vector<py::object> items;
  if (py::isinstance<py::tuple>(key)) {
    for (py::handle k : key.cast<py::tuple>())
      items.push_back(py::reinterpret_borrow<py::object>(k));
  } else {
    items.push_back(py::reinterpret_borrow<py::object>(key));
  }
  int named = 0;
  for (const auto& k : items)
    if (!k.is_none() && !k.is(py::ellipsis())) ++named;
  if (named > x.dim())
    throw py::index_error("kiln.tensor: " + std::to_string(named) + " indices for a tensor of " +
                          std::to_string(x.dim()) + " dimensions");
  tensor r = x;
  int d = 0;  // the next dimension of r to index
  for (const auto& k : items) {
    if (k.is_none()) {
      r = r.unsqueeze(d++);
    } else if (k.is(py::ellipsis())) {
      d += x.dim() - named;
    } else if (PyLong_Check(k.ptr())) {
      std::int64_t i = k.cast<std::int64_t>();
      const std::int64_t n = r.size(d);
      if (i < -n || i >= n)
        throw py::index_error("kiln.tensor: index " + std::to_string(i) +
                              " is out of range for dimension " + std::to_string(d) + " of size " +
                              std::to_string(n));
      if (i < 0) i += n;
      r = r.slice(d, i, i + 1).squeeze(d);
    } else if (py::isinstance<py::slice>(k)) {
      py::ssize_t start = 0, stop = 0, step = 0, len = 0;
      if (!k.cast<py::slice>().compute(r.size(d), &start, &stop, &step, &len))
        throw py::error_already_set();
      if (step < 1)
        throw py::index_error("kiln.tensor: slices need a step >= 1 (got " + std::to_string(step) +
                              ")");
      r = r.slice(d, start, start + len * step, step);
      ++d;
    } else {
      throw py::index_error("kiln.tensor: indices are ints, slices, None and ...; got " +
                            py::repr(k).cast<std::string>());
    }
  }
  return r;
}

// The one element (kiln.shape_error unless numel is 1) as a Python number.
py::object item(const tensor& x) {
  wait_before_reading(x);
  return dispatch(x.dtype(), [&](auto z) -> py::object {
    using T = decltype(z);
    T v;
    {
      py::gil_scoped_release release;
      v = x.item<T>();
    }
    if constexpr (std::is_arithmetic_v<T>)
      return py::cast(v);
    else
      return py::cast(static_cast<float>(v));
  });
}

std::string repr(const tensor& x) {
  py::module_ np = py::module_::import("numpy");
  std::string body =
      x.dtype() == scalar_type::boolean || row_of(x.dtype()).numpy
          ? py::str(np.attr("array2string")(to_numpy(x), py::arg("separator") = ", "))
                .cast<std::string>()
          : "...";
  return "kiln.tensor(" + body + ", dtype=" + row_of(x.dtype()).name +
         ", device=" + x.get_device().id() + ")";
}

}  // namespace

tensor_class bind_tensor(py::module_& m) {
  tensor_class cls(m, "tensor", R"(An n-dimensional array on one device, with lazy elementwise
arithmetic fused into one generated kernel per evaluation.

kiln.tensor(data, dtype=None, device=None, requires_grad=False) copies anything numpy.asarray
accepts (lists, scalars, arrays); dtype None keeps NumPy's; device None is kiln.best_device().)");
  cls.def(py::init([](py::handle data, py::handle dtype, py::handle dev, bool requires_grad) {
            // A tensor stays on its device unless one is named.
            const device d = dev.is_none() && py::isinstance<tensor>(data)
                                 ? data.cast<const tensor&>().get_device()
                                 : to_device(dev);
            tensor t = tensor_from_data(data, dtype, d);
            if (requires_grad) t.requires_grad_(true);
            return t;
          }),
          py::arg("data"), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
          py::arg("requires_grad") = false);

  // ---- creation functions ----
  auto creator = [&m](const char* name, tensor (*f)(const device&, const shape_t&, scalar_type),
                      const char* doc) {
    m.def(
        name,
        [f](py::args shape, py::handle dtype, py::handle dev, bool requires_grad) {
          tensor t = f(to_device(dev), to_shape(shape),
                       dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype));
          if (requires_grad) t.requires_grad_(true);
          return t;
        },
        py::kw_only(), py::arg("dtype") = py::none(), py::arg("device") = py::none(),
        py::arg("requires_grad") = false, doc);
  };
  creator("empty", &tensor::empty, "An uninitialised tensor: kiln.empty(2, 3) or empty((2, 3)).");
  creator("zeros", &tensor::zeros, "Zeros of the shape (float32 unless dtype says).");
  creator("ones", &tensor::ones, "Ones of the shape (float32 unless dtype says).");
  m.def(
      "full",
      [](const shape_t& shape, py::handle value, py::handle dtype, py::handle dev) {
        const device d = to_device(dev);
        const scalar_type t =
            dtype.is_none() ? scalar_type_beside(scalar_type::f32, value) : to_scalar_type(dtype);
        return dispatch(
            t, [&](auto z) { return tensor::full(d, shape, t, cast_scalar<decltype(z)>(value)); });
      },
      py::arg("shape"), py::arg("value"), py::kw_only(), py::arg("dtype") = py::none(),
      py::arg("device") = py::none());
  m.def(
      "arange",
      [](double start, py::object end, double step, py::handle dtype, py::handle dev) {
        const scalar_type t = dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype);
        if (end.is_none()) return tensor::arange(to_device(dev), 0, start, step, t);
        return tensor::arange(to_device(dev), start, end.cast<double>(), step, t);
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1.0, py::kw_only(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none(),
      "arange(n) or arange(start, end, step): ceil((end - start) / step) values (float32 "
      "unless dtype says).");
  m.def(
      "linspace",
      [](double start, double end, std::int64_t steps, py::handle dtype, py::handle dev) {
        return tensor::linspace(to_device(dev), start, end, steps,
                                dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype));
      },
      py::arg("start"), py::arg("end"), py::arg("steps"), py::kw_only(),
      py::arg("dtype") = py::none(), py::arg("device") = py::none());
  using random_fn = tensor (*)(const device&, const shape_t&, std::uint64_t, scalar_type);
  const std::pair<const char*, random_fn> random[] = {{"rand", &tensor::rand},
                                                      {"randn", &tensor::randn}};
  for (const auto& [name, fn] : random) {
    m.def(
        name,
        [f = fn](const shape_t& shape, std::uint64_t seed, py::handle dtype, py::handle dev) {
          return f(to_device(dev), shape, seed,
                   dtype.is_none() ? scalar_type::f32 : to_scalar_type(dtype));
        },
        py::arg("shape"), py::kw_only(), py::arg("seed") = 0, py::arg("dtype") = py::none(),
        py::arg("device") = py::none(),
        "Seeded counter-based random numbers (Philox), the same on every device.");
  }

  // ---- properties ----
  cls.def_property_readonly("shape", [](const tensor& x) { return py::tuple(py::cast(x.shape())); })
      .def_property_readonly("dtype", &tensor::dtype)
      .def_property_readonly("device", &tensor::get_device)
      .def_property_readonly("ndim", &tensor::dim)
      .def_property_readonly(
          "strides", [](const tensor& x) { return py::tuple(py::cast(x.strides())); },
          "In elements, as PyTorch (not bytes, as NumPy).")
      .def_property_readonly("is_contiguous", &tensor::is_contiguous)
      .def_property_readonly("is_lazy", &tensor::is_lazy)
      .def("numel", &tensor::numel)
      .def(
          "size",
          [](const tensor& x, py::object d) -> py::object {
            if (d.is_none()) return py::tuple(py::cast(x.shape()));
            return py::int_(x.size(d.cast<int>()));
          },
          py::arg("dim") = py::none())
      .def("__len__", [](const tensor& x) {
        if (x.dim() == 0) throw py::type_error("len() of a 0-d kiln.tensor");
        return x.size(0);
      });

  // ---- evaluation and reading back ----
  cls.def(
         "eval",
         [](const tensor& x) {
           x.eval();
           return x;
         },
         py::call_guard<py::gil_scoped_release>(),
         "Runs the expression's kernel now (without the GIL); returns self.")
      .def("numpy", &to_numpy, "A NumPy copy of the elements (evaluated first).")
      .def(
          "__array__",
          [](const tensor& x, py::object dtype, py::object) -> py::object {
            py::array a = to_numpy(x);
            return dtype.is_none() ? a : a.attr("astype")(dtype);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("tolist", [](const tensor& x) { return to_numpy(x).attr("tolist")(); })
      .def("item", &item, "The one element as a Python number.")
      .def("__bool__", [](const tensor& x) { return item(x).cast<bool>(); })
      .def("__float__", [](const tensor& x) { return item(x).cast<double>(); })
      .def("__int__", [](const tensor& x) { return py::int_(item(x)); })
      .def("__repr__", &repr);

  // ---- views ----
  cls.def("__getitem__", &index)
      .def(
          "__setitem__",
          [](const tensor& x, py::handle key, py::handle value) {
            const tensor view = index(x, key);
            with_operand<false>(view, value,
                                [](const tensor& d, const auto& v) { return kiln::copy_(d, v); });
          },
          "x[key] = value: copies into a contiguous selection of x (kiln::copy_).")
      .def("view", [](const tensor& x, py::args s) { return x.view(to_shape(s)); })
      .def("reshape", [](const tensor& x, py::args s) { return x.reshape(to_shape(s)); })
      .def("permute",
           [](const tensor& x, py::args d) {
             return x.permute(d.size() == 1 && !PyLong_Check(d[0].ptr())
                                  ? d[0].cast<std::vector<int>>()
                                  : d.cast<std::vector<int>>());
           })
      .def("transpose", &tensor::transpose, py::arg("dim0"), py::arg("dim1"))
      .def("t", &tensor::t)
      .def_property_readonly("T", &tensor::t)
      .def("expand", [](const tensor& x, py::args s) { return x.expand(to_shape(s)); })
      .def(
          "squeeze",
          [](const tensor& x, py::object d) {
            return d.is_none() ? x.squeeze() : x.squeeze(d.cast<int>());
          },
          py::arg("dim") = py::none())
      .def("unsqueeze", &tensor::unsqueeze, py::arg("dim"))
      .def("contiguous", &tensor::contiguous)
      .def("clone", &copy_of, py::call_guard<py::gil_scoped_release>(),
           "A copy in new storage (not recorded for autograd).")
      .def(
          "to",
          [](const tensor& x, py::handle target, py::handle dtype) {
            tensor r = x;
            if (!target.is_none()) {
              if (py::isinstance<device>(target)) {
                r = r.to(target.cast<device>());
              } else {
                // A name is a dtype when the table knows it, else a device spec.
                bool is_dtype = true;
                scalar_type t{};
                try {
                  t = to_scalar_type(target);
                } catch (const dtype_error&) {
                  is_dtype = false;
                }
                r = is_dtype ? r.to(t) : r.to(to_device(target));
              }
            }
            return dtype.is_none() ? r : r.to(to_scalar_type(dtype));
          },
          py::arg("target") = py::none(), py::kw_only(), py::arg("dtype") = py::none(),
          "x.to(kiln.float64), x.to('cuda:0'), x.to(device, dtype=...): a conversion is lazy; "
          "a move to another device copies.");
  return cls;
}

}  // namespace kiln::python
