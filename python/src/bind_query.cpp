// kiln.query's run-time path (python/kiln/query.py): the stages' lazy tensor expressions go to
// kiln::detail::q::tensor_query, which runs them with kiln::query's planner and generated
// kernels, so a query from Python costs what the same query from C++ does plus the call.
#include <pybind11/stl.h>

#include <cstring>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/query/tensor_query.hpp"
#include "kiln/query/terminals.hpp"
#include "wait.hpp"

namespace kiln::python {
namespace {

namespace q = kiln::detail::q;

q::reduce_kind reduce_kind_of(const std::string& name) {
  static const std::pair<const char*, q::reduce_kind> kinds[] = {
      {"count", q::reduce_kind::count},     {"sum", q::reduce_kind::sum},
      {"product", q::reduce_kind::product}, {"min", q::reduce_kind::min},
      {"max", q::reduce_kind::max},         {"any", q::reduce_kind::any},
      {"all", q::reduce_kind::all},         {"mean", q::reduce_kind::average},
      {"argmin", q::reduce_kind::argmin},   {"argmax", q::reduce_kind::argmax}};
  for (const auto& [n, k] : kinds)
    if (name == n) return k;
  throw invalid_argument("kiln.query: no reduction named '" + name + "'");
}

// Where the query waits. On a GPU: the asynchronous form, its event polled with Ctrl-C active
// (costs no more than C++'s synchronous wait there, and covers work queued before the query).
// On the CPU backend: the synchronous form, which runs a small query inline on this thread; the
// asynchronous one would hand off to the queue's thread (~15 us a query on 2 cores). A CPU
// query's wait is not interruptible.
bool waits_on_gpu(const device& dev) { return dev.info().type == device_type::gpu; }

// The reduction's value as a Python object: None where C++ gives an empty std::optional.
py::object reduction_value(const q::reduce_result& r, q::reduce_kind k, scalar_type acc) {
  switch (k) {
    case q::reduce_kind::count: return py::int_(r.count);
    case q::reduce_kind::argmin:
    case q::reduce_kind::argmax: return r.count ? py::object(py::int_(r.index)) : py::none();
    case q::reduce_kind::average: {
      if (!r.count) return py::none();
      double s;
      std::memcpy(&s, &r.value_bits, sizeof s);
      return py::float_(s / static_cast<double>(r.count));
    }
    case q::reduce_kind::min:
    case q::reduce_kind::max:
      if (!r.count) return py::none();
      break;
    default: break;
  }
  return dispatch(acc, [&](auto zero) -> py::object {
    using T = decltype(zero);
    T v;
    std::memcpy(&v, &r.value_bits, sizeof v);
    if constexpr (std::is_same_v<T, bool>)
      return py::bool_(v);
    else if constexpr (std::is_floating_point_v<T>)
      return py::float_(static_cast<double>(v));
    else if constexpr (std::is_integral_v<T>)
      return py::int_(v);
    else
      return py::float_(static_cast<float>(v));
  });
}

}  // namespace

void bind_query(py::module_& m) {
  m.def(
      "_last_query_stats",
      [] {
        const query_stats s = last_query_stats();
        return py::dict(py::arg("kernel_launches") = s.kernel_launches,
                        py::arg("programs_compiled") = s.programs_compiled,
                        py::arg("bytes_read") = s.bytes_read,
                        py::arg("bytes_written") = s.bytes_written, py::arg("device") = s.device);
      },
      "What this thread's last query did (kiln.last_query_stats).");
  py::class_<q::tensor_query>(m, "_tensor_query",
                              "A kiln.query's stages as kiln::query runs them (internal: "
                              "python/kiln/query.py builds it)")
      .def(py::init<const std::vector<tensor>&>(), py::arg("inputs"))
      .def_property_readonly("index", &q::tensor_query::index)
      .def_property_readonly("dtype", &q::tensor_query::type)
      .def_property_readonly("arity", &q::tensor_query::arity)
      .def("map", &q::tensor_query::map, py::arg("value"))
      .def("filter", &q::tensor_query::filter, py::arg("predicate"))
      .def(
          "reduce",
          [](q::tensor_query& tq, const std::string& kind) {
            const q::reduce_kind k = reduce_kind_of(kind);
            const scalar_type acc = tq.accumulator_type(k);
            q::reduce_result r;
            if (waits_on_gpu(tq.get_device())) {
              std::shared_ptr<q::async_state> s;
              {
                py::gil_scoped_release release;
                s = tq.reduce_async(k);
              }
              wait_interruptibly(q::async_event(*s), true);
              py::gil_scoped_release release;
              r = q::async_reduce(*s);
            } else {
              py::gil_scoped_release release;
              r = tq.reduce(k);
            }
            return reduction_value(r, k, acc);
          },
          py::arg("kind"))
      .def("collect", [](q::tensor_query& tq) {
        if (!waits_on_gpu(tq.get_device())) {
          py::gil_scoped_release release;
          return tq.collect();
        }
        std::shared_ptr<q::async_state> s;
        {
          py::gil_scoped_release release;
          s = tq.collect_async();
        }
        wait_interruptibly(q::async_event(*s), true);
        py::gil_scoped_release release;
        return q::tensor_query::collected(*s, tq.type());
      });
}

}  // namespace kiln::python
