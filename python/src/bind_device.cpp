// kiln.device, kiln.devices(), kiln.backends(), kiln.info().
#include <pybind11/stl.h>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/device.hpp"
#include "kiln/kernel.hpp"
#include "kiln/version.hpp"
#include "wait.hpp"

namespace kiln::python {
namespace {

const char* type_name(device_type t) {
  switch (t) {
    case device_type::cpu: return "cpu";
    case device_type::gpu: return "gpu";
    case device_type::accelerator: return "accelerator";
  }
  return "?";
}

py::dict info_dict(const device_info& i) {
  py::dict d;
  d["name"] = i.name;
  d["backend"] = i.backend;
  d["arch"] = i.arch;
  d["vendor"] = i.vendor;
  d["driver_version"] = i.driver_version;
  d["type"] = type_name(i.type);
  d["global_mem_bytes"] = i.global_mem_bytes;
  d["max_alloc_bytes"] = i.max_alloc_bytes;
  d["local_mem_bytes"] = i.local_mem_bytes;
  d["compute_units"] = i.compute_units;
  d["max_work_group_size"] = i.max_work_group_size;
  d["compute_capability"] = py::make_tuple(i.compute_major, i.compute_minor);
  return d;
}

py::dict backend_dict(const backend_status& b) {
  py::dict d;
  d["name"] = b.name;
  d["loaded"] = b.loaded;
  d["detail"] = b.detail;
  d["path"] = b.path;
  d["device_count"] = b.device_count;
  d["extensions"] = b.extensions;
  return d;
}

}  // namespace

void bind_device(py::module_& m) {
  py::enum_<feature>(m, "feature", "Optional device capabilities (device.supports).")
      .value("barrier", feature::barrier)
      .value("atomics", feature::atomics)
      .value("fp64", feature::fp64)
      .value("cooperative", feature::cooperative)
      .value("mapped_host", feature::mapped_host)
      .value("unified_address", feature::unified_address)
      .value("float_atomics", feature::float_atomics)
      .value("warp32", feature::warp32);

  py::class_<device>(m, "device", "One device of a loaded backend: kiln.device('cuda:0').")
      .def(py::init([](const std::string& spec) { return device::get(spec); }), py::arg("spec"),
           "'cpu', 'cuda', 'cuda:1', 'opencl:0': kiln.not_found names the known devices.")
      .def_static("best", &device::best, "KILN_DEVICE if set, else the device expected fastest.")
      .def_static("host", &device::host, "The host's CPU device (Kiln's built-in backend).")
      .def_property_readonly("id", &device::id)
      .def_property_readonly("backend", &device::backend)
      .def_property_readonly("index", &device::index)
      .def_property_readonly("name", [](const device& d) { return d.info().name; })
      .def_property_readonly("type", [](const device& d) { return type_name(d.info().type); })
      .def_property_readonly("info", [](const device& d) { return info_dict(d.info()); })
      .def("supports", &device::supports, py::arg("feature"))
      .def(
          "synchronize",
          [](const device& d) {
            wait_for_default_queue(d);  // where tensors and kernels run: Ctrl-C interrupts it
            py::gil_scoped_release release;
            d.synchronize();
          },
          "Blocks (without the GIL) until every queue of the device is idle; Ctrl-C interrupts "
          "the wait for the default queue (the device's work runs on).")
      .def(
          "memory_usage",
          [](const device& d) {
            const auto u = d.memory_usage();
            return py::make_tuple(u.in_use, u.peak);
          },
          "(bytes in use, peak bytes) of Kiln's allocations on the device.")
      .def("reset_peak_memory", &device::reset_peak_memory)
      .def_property_readonly("lost", &device::lost)
      .def("reset", &device::reset, py::call_guard<py::gil_scoped_release>())
      .def("__eq__", [](const device& a, const device& b) { return a == b; })
      .def("__hash__", [](const device& d) { return std::hash<std::string>()(d.id()); })
      .def("__str__", &device::id)
      .def("__repr__", [](const device& d) { return "kiln.device('" + d.id() + "')"; });

  m.def("devices", &device::all, "Every device of every loaded backend.");
  m.def("best_device", &device::best);
  m.def("backends", [] {
    py::list out;
    for (const backend_status& b : backends()) out.append(backend_dict(b));
    return out;
  });
  m.def(
      "info",
      [] {
        py::dict d;
        d["version"] = version_string;
        py::list bs, ds;
        for (const backend_status& b : backends()) bs.append(backend_dict(b));
        for (const device& dev : device::all()) {
          py::dict x = info_dict(dev.info());
          x["id"] = dev.id();
          ds.append(x);
        }
        d["backends"] = bs;
        d["devices"] = ds;
        const kernel_cache_stats c = cache_stats();
        d["kernel_cache"] =
            py::dict(py::arg("memory_hits") = c.memory_hits, py::arg("disk_hits") = c.disk_hits,
                     py::arg("compiles") = c.compiles);
        return d;
      },
      "Kiln's version, backends (loaded or why not), devices and kernel-cache counters.");
}

}  // namespace kiln::python
