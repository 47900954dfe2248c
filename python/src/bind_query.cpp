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
#include "kiln/queue_poll.hpp"
#include "placeholders.hpp"
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

q::aggregate_kind aggregate_kind_of(const std::string& name) {
  static const std::pair<const char*, q::aggregate_kind> kinds[] = {
      {"sum", q::aggregate_kind::sum},   {"min", q::aggregate_kind::min},
      {"max", q::aggregate_kind::max},   {"count", q::aggregate_kind::count},
      {"mean", q::aggregate_kind::mean}, {"first", q::aggregate_kind::first}};
  for (const auto& [n, k] : kinds)
    if (name == n) return k;
  throw invalid_argument("kiln.agg: no aggregate named '" + name + "'");
}

// On a GPU, work queued before the query is waited for interruptibly (Ctrl-C); then the query
// runs synchronously. Measured on the H100 (bench/python_query.py, 2026-11-27): this form
// took 0.430 ms at 256M elements where waiting on the asynchronous query's own event took
// 0.487 ms (C++: 0.391-0.396 ms).
void before_query(const device& dev) {
  if (dev.info().type != device_type::gpu) return;
  // An idle queue (the usual case) is one poll (CUDA: cuStreamQuery): the event the wait
  // records and queries took ~10 us per query on an H200.
  if (!idle(dev.default_queue())) wait_for_default_queue(dev);
}

// On the CPU backend a query of this many elements or more runs on the device's queue, and the
// wait for it (and for the work queued before it) is interruptible: the hand-off to the queue
// thread (~15 us on 2 cores) is small beside it. Smaller queries run inline, uninterruptibly,
// for at most a few milliseconds.
constexpr std::uint64_t cpu_queued_elements = std::uint64_t{1} << 20;

bool runs_queued(const q::tensor_query& tq) {
  return tq.get_device().info().type != device_type::gpu && tq.size() >= cpu_queued_elements;
}

// f() with the GIL released, its result kept.
template <class F>
auto without_gil(F&& f) {
  py::gil_scoped_release release;
  return f();
}

// Waits, interruptibly, for an asynchronous query (its error rethrown by the caller's
// async_reduce / collected).
void wait_for(q::async_state& s) { wait_interruptibly(q::async_event(s), false); }

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
      "_wait_before_query", [](const device& dev) { before_query(dev); }, py::arg("device"),
      "What a GPU query waits for before it runs (bench/python_query.py --breakdown times it).");
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
      .def("order_by", &q::tensor_query::order_by, py::arg("key"), py::arg("descending") = false)
      .def(
          "stage",
          [](q::tensor_query& tq, const std::string& kind, py::handle node,
             py::handle descending) -> py::object {
            const std::optional<tensor> v =
                placeholder_value(node, tq.components(), [&tq] { return tq.index(); });
            if (!v) return py::none();  // Python applies this tree (query.py, _apply)
            if (kind == "map") return py::bool_(tq.map(*v));
            if (kind == "filter") return py::bool_(tq.filter(*v));
            if (kind == "order_by") return py::bool_(tq.order_by(*v, descending.cast<bool>()));
            throw invalid_argument("kiln.query: no elementwise stage named '" + kind + "'");
          },
          py::arg("kind"), py::arg("node"), py::arg("descending"),
          "map / filter / order_by by a placeholder expression's tree, lowered in one call; "
          "None where the tree needs Python (a constant that is not a Python number), else "
          "as map's: False where the query cannot run it")
      .def("sort", &q::tensor_query::sort, py::arg("descending") = false)
      .def("unbound", &q::tensor_query::unbound,
           "The lowered stages without the inputs' memory (kiln.query's cache keeps these)")
      .def("over", &q::tensor_query::over, py::arg("inputs"),
           "These stages over other inputs of the same types and device, not lowered again; "
           "None where the inputs differ in count, type or device")
      .def(
          "reduce",
          [](q::tensor_query& tq, const std::string& kind) {
            const q::reduce_kind k = reduce_kind_of(kind);
            const scalar_type acc = tq.accumulator_type(k);
            q::reduce_result r;
            if (runs_queued(tq)) {
              // Planning may compile the kernel (seconds, uninterruptible): other Python
              // threads run meanwhile.
              const auto s = without_gil([&] { return tq.reduce_async(k); });
              wait_for(*s);
              py::gil_scoped_release release;
              r = q::async_reduce(*s);
            } else {
              before_query(tq.get_device());
              py::gil_scoped_release release;
              r = tq.reduce(k);
            }
            return reduction_value(r, k, acc);
          },
          py::arg("kind"))
      .def("collect",
           [](q::tensor_query& tq) {
             if (runs_queued(tq) && tq.arity() == 1) {
               const auto s = without_gil([&] { return tq.collect_async(); });
               wait_for(*s);
               py::gil_scoped_release release;
               return q::tensor_query::collected(*s, tq.type());
             }
             before_query(tq.get_device());
             py::gil_scoped_release release;
             return tq.collect();
           })
      .def("collect_all",
           [](q::tensor_query& tq) {
             before_query(tq.get_device());
             py::gil_scoped_release release;
             return tq.collect_all();
           })
      .def_property_readonly("components", &q::tensor_query::components)
      .def(
          "group",
          [](q::tensor_query& tq, const tensor& key, const py::list& aggs, bool sorted) {
            std::vector<q::tensor_query::aggregate_spec> specs;
            for (const py::handle& a : aggs) {
              const auto [kind, value] = a.cast<std::pair<std::string, py::object>>();
              q::tensor_query::aggregate_spec sp;
              sp.kind = aggregate_kind_of(kind);
              if (!value.is_none()) sp.value = value.cast<tensor>();
              specs.push_back(std::move(sp));
            }
            return tq.group(key, specs, sorted);
          },
          py::arg("key"), py::arg("aggregates"), py::arg("sorted"))
      .def("first_by", &q::tensor_query::first_by, py::arg("key"), py::arg("sorted"))
      .def("distinct", &q::tensor_query::distinct)
      .def("top_k", &q::tensor_query::top_k, py::arg("k"))
      .def("join", &q::tensor_query::join, py::arg("other"), py::arg("key"), py::arg("other_key"),
           py::arg("left"));
}

}  // namespace kiln::python
