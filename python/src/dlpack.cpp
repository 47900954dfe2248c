// DLPack (https://dmlc.github.io/dlpack): kiln.tensor.__dlpack__ / __dlpack_device__ and
// kiln.from_dlpack, without copies on the CPU and on CUDA (docs/python.md, "DLPack").
//
// Export hands over tensor::data_ptr(): the capsule's managed tensor owns a kiln::tensor that
// keeps the storage alive until the consumer calls the deleter. data_ptr() has evaluated the
// tensor and finished the device's default queue, so any consumer stream may read the memory.
// A consumer that passes max_version >= (1, 0) gets DLPack 1.x's versioned capsule, others the
// 0.x one (dlpack_versioned.hpp).
// Import wraps the producer's memory with tensor::from_external, whose release (run once after
// the last tensor and its queues are done, on any thread) calls the producer's deleter under
// the GIL. It asks the producer for a versioned capsule and takes either kind. On CUDA it
// passes the producer the stream of the device's default queue (where tensors run), so the
// producer orders its pending writes before Kiln's work without a wait. OpenCL memory has no
// address: those tensors export a host copy.
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bindings.hpp"
#include "dlpack_versioned.hpp"
#include "dtype.hpp"
#include "kiln/native_handle.hpp"
#include "kiln/tensor.hpp"
#include "kiln/tensor/inplace.hpp"
#include "tensor_args.hpp"

namespace kiln::python {
namespace {

using dl_where = std::pair<int, int>;  // (DLDeviceType, device_id), as __dlpack_device__ says

// A capsule's names, fresh and consumed, for each kind of managed tensor.
template <class M>
struct capsule_names {
  static constexpr const char* fresh = dl::legacy_name;
  static constexpr const char* used = dl::legacy_used_name;
};
template <>
struct capsule_names<dl::managed_versioned> {
  static constexpr const char* fresh = dl::versioned_name;
  static constexpr const char* used = dl::versioned_used_name;
};

// What a capsule owns: the managed tensor of the kind handed out (the other stays unused), its
// shape and strides, and the tensor whose storage it points into.
struct export_ctx {
  DLManagedTensor legacy{};
  dl::managed_versioned versioned{};
  std::vector<std::int64_t> shape, strides;
  tensor keep;
};

template <class M>
void delete_export(M* m) {
  delete static_cast<export_ctx*>(m->manager_ctx);
}

// A capsule never consumed still owns its tensor: its destructor calls the deleter.
template <class M>
void destroy_unconsumed(PyObject* cap) {
  if (!PyCapsule_IsValid(cap, capsule_names<M>::fresh)) return;  // consumed (renamed)
  auto* m = static_cast<M*>(PyCapsule_GetPointer(cap, capsule_names<M>::fresh));
  if (m && m->deleter) m->deleter(m);
}

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
  throw dtype_error("kiln.from_dlpack: no Kiln element type for DLPack type code " +
                    std::to_string(d.code) + ", " + std::to_string(d.bits) + " bits");
}

// Where x's memory is, as DLPack names it: cpu -> kDLCPU, cuda:N -> (kDLCUDA, N); memory
// without an address (OpenCL) is exported as a host copy, so it reports kDLCPU too.
dl_where native_where(const tensor& x) {
  const device d = x.get_device();
  if (d.backend() == "cuda") return {kDLCUDA, d.index()};
  return {kDLCPU, 0};
}

bool has_address(const tensor& x) {
  const std::string& b = x.get_device().backend();
  return b == "cpu" || b == "cuda";
}

tensor copy_on(const tensor& x, const device& dev) {
  return kiln::copy_(tensor::empty(dev, x.shape(), x.dtype()), x);
}

// The stream argument of __dlpack__ (protocol: None or -1 for host memory; on CUDA 1 legacy
// default, 2 per-thread default, > 2 a stream handle, -1 none; 0 is ambiguous and refused).
// Any valid consumer stream is fine: data_ptr() has finished the queue that wrote the memory.
void check_stream(py::handle stream, const dl_where& where) {
  if (stream.is_none()) return;
  if (!PyLong_Check(stream.ptr()))
    throw py::type_error("kiln.tensor.__dlpack__: stream must be an int or None, got " +
                         py::repr(stream).cast<std::string>());
  const long long s = stream.cast<long long>();
  if (where.first == kDLCPU && s != -1)
    throw unsupported(
        "kiln.tensor.__dlpack__: the exported memory is host memory (kDLCPU): "
        "stream must be None, got " +
        std::to_string(s));
  if (where.first == kDLCUDA && (s == 0 || s < -1))
    throw py::value_error("kiln.tensor.__dlpack__: CUDA stream " + std::to_string(s) +
                          " is not valid (0 is ambiguous: pass 1 for the legacy default stream)");
}

// Whether the consumer takes DLPack 1.x's versioned capsule: max_version is None (0.x
// consumers) or (major, minor), and any major >= 1 gets Kiln's 1.0 capsule, as the protocol
// asks (a producer gives the highest version it has within the consumer's major).
bool wants_versioned(py::handle max_version) {
  if (max_version.is_none()) return false;
  if (!PyTuple_Check(max_version.ptr()) || PyTuple_GET_SIZE(max_version.ptr()) != 2 ||
      !PyLong_Check(PyTuple_GET_ITEM(max_version.ptr(), 0)) ||
      !PyLong_Check(PyTuple_GET_ITEM(max_version.ptr(), 1)))
    throw py::type_error(
        "kiln.tensor.__dlpack__: max_version must be None or a (major, minor) tuple of ints, "
        "got " +
        py::repr(max_version).cast<std::string>());
  return py::reinterpret_borrow<py::tuple>(max_version)[0].cast<long long>() >= 1;
}

py::capsule to_dlpack(const tensor& x, py::handle stream, py::handle max_version,
                      py::handle dl_device, py::handle copy) {
  const bool versioned = wants_versioned(max_version);
  dl_where where = native_where(x);
  const int want_copy = copy.is_none() ? -1 : copy.cast<bool>() ? 1 : 0;  // -1: None
  bool to_host = !has_address(x);  // OpenCL: a host copy is the only export there is
  if (!dl_device.is_none()) {
    const auto asked = dl_device.cast<dl_where>();
    if (asked != where && asked == dl_where{kDLCPU, 0})
      to_host = true;
    else if (asked != where)
      throw py::buffer_error("kiln.tensor.__dlpack__: cannot export memory of " +
                             x.get_device().id() + " to DLPack device (" +
                             std::to_string(asked.first) + ", " + std::to_string(asked.second) +
                             ")");
  }
  if (to_host) where = {kDLCPU, 0};
  check_stream(stream, where);
  if (to_host && want_copy == 0)
    throw py::buffer_error(
        "kiln.tensor.__dlpack__: memory on " + x.get_device().id() +
        " is exported as a host copy (OpenCL, or dl_device=(1, 0)); copy=False forbids it");

  auto ctx = std::make_unique<export_ctx>();
  void* data = nullptr;
  {
    py::gil_scoped_release release;  // evaluation and the queue's finish may take a while
    if (to_host)
      ctx->keep = x.to(device::host());
    else if (want_copy == 1)
      ctx->keep = copy_on(x, x.get_device());
    else
      ctx->keep = x;
    data = ctx->keep.data_ptr();
  }
  ctx->shape = ctx->keep.shape();
  ctx->strides = ctx->keep.strides();
  DLTensor t{};
  t.data = data;
  t.device = DLDevice{static_cast<DLDeviceType>(where.first), where.second};
  t.ndim = static_cast<int>(ctx->shape.size());
  t.dtype = dl_type(x.dtype());
  t.shape = ctx->shape.data();
  t.strides = ctx->strides.data();  // in elements, as Kiln's
  t.byte_offset = 0;                // data_ptr() has applied the view's offset
  if (versioned) {
    dl::managed_versioned& m = ctx->versioned;
    m.version = dl::kiln_version;
    m.flags = to_host || want_copy == 1 ? dl::flag_is_copied : 0;  // Kiln's memory is writable
    m.dl_tensor = t;
    m.manager_ctx = ctx.get();
    m.deleter = &delete_export<dl::managed_versioned>;
    ctx.release();
    return py::capsule(&m, dl::versioned_name, &destroy_unconsumed<dl::managed_versioned>);
  }
  DLManagedTensor& m = ctx->legacy;
  m.dl_tensor = t;
  m.manager_ctx = ctx.get();
  m.deleter = &delete_export<DLManagedTensor>;
  ctx.release();
  return py::capsule(&m, dl::legacy_name, &destroy_unconsumed<DLManagedTensor>);
}

// Kiln's device for DLPack memory: host memory on the host's CPU device, CUDA memory on
// cuda:<device_id>.
device device_of(const DLDevice& d) {
  switch (d.device_type) {
    case kDLCPU:
    case kDLCUDAHost: return device::host();
    case kDLCUDA: return device::get("cuda:" + std::to_string(d.device_id));
    default:
      throw unsupported("kiln.from_dlpack: memory on DLPack device type " +
                        std::to_string(d.device_type) +
                        " cannot be imported (Kiln shares host and CUDA memory only)");
  }
}

// A torch or CuPy producer's pending writes, finished: the fallback where the consuming queue
// has no stream handle to give the producer (a plugin older than kiln::native_handle).
void finish_known_producer(py::handle obj) {
  const std::string mod = py::str(py::type::of(obj).attr("__module__"));
  if (mod.rfind("torch", 0) == 0)
    py::module_::import("torch")
        .attr("cuda")
        .attr("current_stream")(obj.attr("device"))
        .attr("synchronize")();
  else if (mod.rfind("cupy", 0) == 0)
    py::module_::import("cupy").attr("cuda").attr("get_current_stream")().attr("synchronize")();
}

// The stream DLPack's consumer names: the CUstream of the queue Kiln's tensors run on (the
// device's default queue), or 0 when the plugin cannot say.
std::uintptr_t consumer_stream(const device& dev) {
  try {
    return reinterpret_cast<std::uintptr_t>(native_handle(dev.default_queue()));
  } catch (const unsupported&) {
    return 0;
  }
}

// Calls the producer's deleter once the tensor over its memory is done with it (any thread).
template <class M>
struct release_producer {
  M* m;
  void operator()() const {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    // At interpreter exit the producer's objects are gone with it.
    if (!m->deleter || !Py_IsInitialized() || finalizing) return;
    if (PyGILState_Check()) {  // the usual case: the last tensor dropped from Python
      m->deleter(m);
      return;
    }
    // Another thread (a Kiln worker dropping the last reference): blocking on the GIL here
    // could wait for a Python thread that holds it while it waits for this worker, so the
    // interpreter runs the deleter at its next check instead (still under the GIL).
    if (Py_AddPendingCall(&run_deleter, m) == 0) return;
    py::gil_scoped_acquire gil;  // the pending-call queue is full
    m->deleter(m);
  }
  static int run_deleter(void* p) {
    auto* mt = static_cast<M*>(p);
    mt->deleter(mt);
    return 0;
  }
};

// The tensor over mt's memory (no copy); the deleter is called once it is no longer used,
// or now if wrapping throws.
template <class M>
tensor wrap(M* mt) {
  std::unique_ptr<M, void (*)(M*)> owned(mt, [](M* m) {
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& t = mt->dl_tensor;
  const scalar_type st = from_dl_type(t.dtype);
  const device dev = device_of(t.device);
  shape_t shape(t.shape, t.shape + t.ndim), strides;
  if (t.strides) {
    strides.assign(t.strides, t.strides + t.ndim);
    for (int i = 0; i < t.ndim; ++i)
      if (strides[i] < 0)
        throw invalid_argument("kiln.from_dlpack: stride " + std::to_string(strides[i]) +
                               " of dimension " + std::to_string(i) +
                               " is negative (a reversed view); Kiln tensors have "
                               "non-negative strides: pass a copy, e.g. x.copy()");
  }
  if (t.byte_offset % size_of(st))
    throw invalid_argument("kiln.from_dlpack: byte_offset " + std::to_string(t.byte_offset) +
                           " is not a multiple of the element size");
  void* data = static_cast<std::byte*>(t.data) + t.byte_offset;
  tensor x = tensor::from_external(dev, data, shape, st, strides, release_producer<M>{mt});
  owned.release();  // from here the tensor's release calls the deleter
  return x;
}

// obj.__dlpack__(**kw), asking for DLPack 1.x's versioned capsule (max_version=(1, 0)). A
// producer older than that protocol (NumPy < 2.1, PyTorch < 2.4) has no max_version keyword:
// its TypeError is answered by asking again without it.
py::object call_producer(py::handle obj, const py::dict& kw) {
  const py::object export_fn = obj.attr("__dlpack__");
  py::dict versioned;  // a new dict: py::dict(kw) would be kw itself
  for (const auto& [k, v] : kw) versioned[k] = v;
  versioned["max_version"] = py::make_tuple(dl::kiln_version.major, dl::kiln_version.minor);
  try {
    return export_fn(**versioned);
  } catch (py::error_already_set& e) {
    if (!e.matches(PyExc_TypeError)) throw;
  }
  return export_fn(**kw);
}

// The capsule a producer (NumPy, torch, CuPy, ...) gives for obj.
py::object capsule_of(py::handle obj) {
  if (!py::hasattr(obj, "__dlpack__"))
    throw invalid_argument("kiln.from_dlpack: " + py::repr(py::type::of(obj)).cast<std::string>() +
                           " has no __dlpack__ (pass a NumPy array, a torch or CuPy tensor, "
                           "or a DLPack capsule)");
  const auto where = obj.attr("__dlpack_device__")().cast<dl_where>();
  device_of(DLDevice{static_cast<DLDeviceType>(where.first), where.second});  // supported?
  py::dict kw;
  if (where.first != kDLCUDA) return call_producer(obj, kw);
  // Stream-ordered, as the protocol asks: the producer makes Kiln's queue wait for its
  // pending writes (an event, no host wait). 0, 1 and 2 mean other things to DLPack, so a
  // plugin without a handle gets the legacy default stream and the producer's finish.
  const device d = device_of(DLDevice{kDLCUDA, where.second});
  const std::uintptr_t s = consumer_stream(d);
  kw["stream"] = s > 2 ? s : std::uintptr_t{1};
  py::object cap = call_producer(obj, kw);
  if (s <= 2) finish_known_producer(obj);
  return cap;
}

// What an imported capsule gave: the tensor over the producer's memory, and whether the
// producer marked that memory read-only (DLPack 1.x's flag).
struct imported {
  tensor x;
  bool read_only = false;
};

// Consumes cap (renamed, so the producer's capsule destructor leaves the memory to Kiln) once
// every check that can refuse it has passed.
imported consume(py::handle cap, int want_copy) {
  if (PyCapsule_IsValid(cap.ptr(), dl::versioned_name)) {
    auto* mt =
        static_cast<dl::managed_versioned*>(PyCapsule_GetPointer(cap.ptr(), dl::versioned_name));
    if (mt->version.major != dl::kiln_version.major)
      throw py::buffer_error(
          "kiln.from_dlpack: the capsule is DLPack " + std::to_string(mt->version.major) + "." +
          std::to_string(mt->version.minor) + "; Kiln takes DLPack 1.x and 0.x capsules");
    device_of(mt->dl_tensor.device);
    const bool read_only = (mt->flags & dl::flag_read_only) != 0;
    if (read_only && want_copy == 0)
      throw py::buffer_error(
          "kiln.from_dlpack: the producer marked its memory read-only, and a kiln.tensor is "
          "writable: the import needs a copy, which copy=False forbids");
    PyCapsule_SetName(cap.ptr(), dl::versioned_used_name);
    return {wrap(mt), read_only};
  }
  if (!PyCapsule_IsValid(cap.ptr(), dl::legacy_name))
    throw invalid_argument(
        "kiln.from_dlpack: not an unconsumed DLPack capsule ('dltensor' or "
        "'dltensor_versioned')");
  auto* mt = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(cap.ptr(), dl::legacy_name));
  device_of(mt->dl_tensor.device);  // refused before the capsule is consumed
  PyCapsule_SetName(cap.ptr(), dl::legacy_used_name);
  return {wrap(mt)};
}

// copy (the array API's): None shares the producer's memory where it can and copies where it
// must (another device, read-only memory); True always copies; False never does (BufferError).
tensor from_dlpack(py::object obj, py::handle dev, py::handle copy) {
  const int want_copy = copy.is_none() ? -1 : copy.cast<bool>() ? 1 : 0;  // -1: None
  const py::object cap = PyCapsule_CheckExact(obj.ptr()) ? obj : capsule_of(obj);
  imported in = consume(cap, want_copy);
  const device here = in.x.get_device();
  const device want = dev.is_none() ? here : to_device(dev);
  // Memory on a CPU device is every CPU device's: shared, as the same device's.
  const bool shares = want == here || (want.backend() == "cpu" && here.backend() == "cpu");
  if (!shares && want_copy == 0)
    throw py::buffer_error("kiln.from_dlpack: the memory is on " + here.id() + ", not on " +
                           want.id() + ": the copy there is forbidden by copy=False");
  py::gil_scoped_release release;  // copies queue and may wait for the queue
  if (!shares) return in.x.to(want);
  tensor y = want == here ? in.x
                          : tensor::from_external(want, in.x.data_ptr(), in.x.shape(), in.x.dtype(),
                                                  in.x.strides(), [x = in.x] {});
  if (want_copy == 1 || in.read_only) y = copy_on(y, want);
  return y;
}

}  // namespace

void bind_dlpack(py::module_& m, tensor_class& cls) {
  cls.def(
         "data_ptr",
         [](const tensor& x) {
           py::gil_scoped_release release;
           return reinterpret_cast<std::uintptr_t>(x.data_ptr());
         },
         "The address of the first element (host pointer on cpu, device pointer on cuda), as "
         "torch's data_ptr(); evaluates the tensor and finishes its default queue. "
         "kiln.unsupported on OpenCL.")
      .def(
          "__dlpack__",
          [](const tensor& x, py::handle stream, py::handle max_version, py::handle dl_device,
             py::handle copy) { return to_dlpack(x, stream, max_version, dl_device, copy); },
          py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
          py::arg("dl_device") = py::none(), py::arg("copy") = py::none(),
          "A DLPack capsule of the tensor's memory, shared (CPU and CUDA) or a host copy (OpenCL, "
          "dl_device=(1, 0), copy=True); any consumer stream may use it at once: the tensor's "
          "queue has finished. max_version=(1, 0) or later gives DLPack 1.x's versioned capsule, "
          "None a 0.x one (docs/python.md, \"DLPack\").")
      .def(
          "__dlpack_device__",
          [](const tensor& x) {
            const dl_where w = native_where(x);
            return py::make_tuple(w.first, w.second);
          },
          "(kDLCPU=1, 0) for CPU and OpenCL (exported as a host copy) tensors, (kDLCUDA=2, N) for "
          "cuda:N.");
  m.def("from_dlpack", &from_dlpack, py::arg("x"), py::kw_only(), py::arg("device") = py::none(),
        py::arg("copy") = py::none(),
        "A kiln.tensor over a DLPack producer's memory without a copy (NumPy, torch, CuPy on the "
        "host or CUDA, or a 0.x or 1.x capsule); device None keeps the memory's device (host "
        "memory: the host's CPU device), another device gets a copy. copy (the array API's): "
        "None copies only where it must (another device, memory the producer marked "
        "read-only), True always, False never (BufferError where a copy is needed).");
}

}  // namespace kiln::python
