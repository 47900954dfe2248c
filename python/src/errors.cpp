// Every kiln::error becomes a Python exception of the same name, under kiln.error, also derived
// from the built-in exception that fits (ValueError for the caller's mistakes, ...), so that
// `except ValueError` catches kiln.shape_error as it catches NumPy's.
#include <string>

#include "bindings.hpp"
#include "kiln/error.hpp"

namespace kiln::python {
namespace {

struct classes {
  py::object error, invalid_argument, shape_error, dtype_error, device_mismatch, axis_error,
      out_of_bounds, out_of_memory, unsupported, backend_failure, not_found, device_lost,
      compile_error;
};

classes& registered() {
  static classes* c = new classes();  // never destroyed: the interpreter owns the objects
  return *c;
}

py::object make_class(py::module_& m, const char* name, py::tuple bases, const char* doc) {
  py::dict ns;
  ns["__module__"] = "kiln";
  ns["__doc__"] = doc;
  py::object cls = py::reinterpret_borrow<py::object>(reinterpret_cast<PyObject*>(&PyType_Type))(
      name, bases, ns);
  m.attr(name) = cls;
  return cls;
}

void raise(const py::object& cls, const char* what) { PyErr_SetString(cls.ptr(), what); }

}  // namespace

void bind_errors(py::module_& m) {
  classes& c = registered();
  auto b = [](auto... xs) { return py::make_tuple(xs...); };
  const py::object value_error = py::reinterpret_borrow<py::object>(PyExc_ValueError);
  const py::object type_error = py::reinterpret_borrow<py::object>(PyExc_TypeError);
  const py::object index_error = py::reinterpret_borrow<py::object>(PyExc_IndexError);
  const py::object runtime_error = py::reinterpret_borrow<py::object>(PyExc_RuntimeError);
  c.error = make_class(m, "error", b(runtime_error), "Base of every Kiln error (kiln::error).");
  c.invalid_argument = make_class(m, "invalid_argument", b(c.error, value_error),
                                  "Wrong sizes, types, devices or ranges: the caller's mistake.");
  c.shape_error = make_class(m, "shape_error", b(c.invalid_argument),
                             "Shapes that do not broadcast, or a view to another element count.");
  c.dtype_error = make_class(m, "dtype_error", b(c.invalid_argument, type_error),
                             "A tensor read or used as an element type it does not have.");
  c.device_mismatch = make_class(m, "device_mismatch", b(c.invalid_argument),
                                 "Operands of one operation on different devices.");
  c.axis_error = make_class(m, "axis_error", b(c.invalid_argument, index_error),
                            "A dimension out of range for the tensor's rank.");
  c.out_of_bounds = make_class(m, "out_of_bounds", b(c.invalid_argument, index_error),
                               "A checked kernel indexed a buffer outside its elements.");
  c.out_of_memory = make_class(m, "out_of_memory",
                               b(c.error, py::reinterpret_borrow<py::object>(PyExc_MemoryError)),
                               "A device or host allocation failed.");
  c.unsupported = make_class(
      m, "unsupported", b(c.error, py::reinterpret_borrow<py::object>(PyExc_NotImplementedError)),
      "The backend or device cannot do this.");
  c.backend_failure = make_class(m, "backend_failure", b(c.error), "The driver or device failed.");
  c.not_found =
      make_class(m, "not_found", b(c.error, py::reinterpret_borrow<py::object>(PyExc_LookupError)),
                 "A device, backend or kernel that does not exist.");
  c.device_lost = make_class(m, "device_lost", b(c.error),
                             "The device failed for the process; kiln.device.reset() revives it.");
  c.compile_error = make_class(m, "compile_error", b(c.error),
                               "Kernel source that did not compile; .log and .excerpt say why.");

  // Most derived first: a shape_error is also an invalid_argument.
  py::register_exception_translator([](std::exception_ptr p) {
    const classes& k = registered();
    try {
      if (p) std::rethrow_exception(p);
    } catch (const kiln::compile_error& e) {
      py::object x = k.compile_error(e.what());
      x.attr("log") = e.log();
      x.attr("excerpt") = e.excerpt();
      PyErr_SetObject(k.compile_error.ptr(), x.ptr());
    } catch (const kiln::shape_error& e) {
      raise(k.shape_error, e.what());
    } catch (const kiln::dtype_error& e) {
      raise(k.dtype_error, e.what());
    } catch (const kiln::device_mismatch& e) {
      raise(k.device_mismatch, e.what());
    } catch (const kiln::axis_error& e) {
      raise(k.axis_error, e.what());
    } catch (const kiln::out_of_bounds& e) {
      raise(k.out_of_bounds, e.what());
    } catch (const kiln::invalid_argument& e) {
      raise(k.invalid_argument, e.what());
    } catch (const kiln::out_of_memory& e) {
      raise(k.out_of_memory, e.what());
    } catch (const kiln::unsupported& e) {
      raise(k.unsupported, e.what());
    } catch (const kiln::backend_failure& e) {
      raise(k.backend_failure, e.what());
    } catch (const kiln::not_found& e) {
      raise(k.not_found, e.what());
    } catch (const kiln::device_lost& e) {
      raise(k.device_lost, e.what());
    } catch (const kiln::error& e) {
      raise(k.error, e.what());
    }
  });
}

}  // namespace kiln::python
