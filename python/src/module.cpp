// The extension module kiln._kiln; the package kiln (python/kiln/__init__.py) re-exports it.
#include "bindings.hpp"
#include "kiln/version.hpp"

PYBIND11_MODULE(_kiln, m) {
  using namespace kiln::python;
  m.doc() = "Kiln: data-parallel kernels, fused queries and tensors on GPUs and CPUs";
  m.attr("__version__") = kiln::version_string;
  bind_errors(m);
  bind_dtype(m);
  bind_device(m);
  tensor_class tensor = bind_tensor(m);
  bind_tensor_math(m, tensor);
  bind_autograd(m, tensor);
  bind_nn(m);
  bind_kernel(m);
  bind_dlpack(m, tensor);
  bind_transformer(m, tensor);
  bind_query(m);
  bind_amp(m);
}
