// Mixed precision: kiln.autocast (kiln::autocast as a context manager) and
// kiln.optim.grad_scaler (kiln::optim::grad_scaler), used as torch.autocast and
// torch.amp.GradScaler are (docs/python.md, docs/reduced_precision.md).
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "bindings.hpp"
#include "dtype.hpp"
#include "kiln/optim/grad_scaler.hpp"
#include "kiln/tensor/autocast.hpp"
#include "wait.hpp"

namespace kiln::python {
namespace {

std::string type_name_of(py::handle h) { return py::str(py::type::of(h).attr("__name__")); }

// ---- kiln.autocast ----

// The C++ scope is a thread-local setting restored by its destructor, so the guard is made at
// __enter__ (not at construction) and kept per thread: one autocast object may be entered
// again while entered (nesting) and from several threads, each exit restoring its own thread.
struct py_autocast {
  scalar_type dtype;
  bool enabled;
  py::object device;  // as given (None, a kiln.device); checked, not used (see the doc)
  std::map<std::thread::id, std::vector<std::unique_ptr<kiln::autocast>>> scopes;

  py_autocast(scalar_type t, bool on, py::object d) : dtype(t), enabled(on), device(std::move(d)) {}
  py_autocast(const py_autocast&) = delete;
  py_autocast& operator=(const py_autocast&) = delete;
  // Collected while entered (`kiln.autocast().__enter__()` without an exit): the scopes stay
  // on, as torch's do, rather than restoring some thread's setting from the collecting thread.
  ~py_autocast() {
    for (auto& [id, guards] : scopes)
      for (auto& g : guards) static_cast<void>(g.release());
  }

  void enter() {
    scopes[std::this_thread::get_id()].push_back(std::make_unique<kiln::autocast>(dtype, enabled));
  }
  void exit() {
    auto it = scopes.find(std::this_thread::get_id());
    if (it == scopes.end() || it->second.empty())
      throw py::value_error("kiln.autocast.__exit__: not entered on this thread");
    it->second.pop_back();  // restores what was active before the matching __enter__
    if (it->second.empty()) scopes.erase(it);
  }
};

scalar_type autocast_dtype(py::handle h) {
  const scalar_type t = to_scalar_type(h);  // kiln.dtype_error for what names no type
  if (!is_reduced_float(t))
    throw dtype_error(std::string("kiln.autocast: dtype must be kiln.float16 or kiln.bfloat16, "
                                  "not kiln.") +
                      row_of(t).name);
  return t;
}

void bind_autocast(py::module_& m) {
  py::class_<py_autocast>(m, "autocast", R"(Mixed precision for this thread (torch.autocast):

    with kiln.autocast(kiln.bfloat16):        # or kiln.float16 (with kiln.optim.grad_scaler)
        loss = kiln.nn.cross_entropy(model(x), y)   # products in bf16, the loss in f32
    loss.backward()

Inside the block, matmul, linear (kiln.linear, kiln.nn.linear) and conv2d cast float32 operands
to dtype and return dtype; losses compute in float32; parameters stay float32. As C++'s
kiln::autocast, the setting is per thread and covers every device (device is accepted for
torch.autocast's signature and checked, not used); enabled=False turns an enclosing one off.
Blocks nest; one object may be entered again, and used as a decorator.)")
      .def(py::init([](py::handle dtype, py::handle dev, bool enabled) {
             py::object d = py::none();
             if (!dev.is_none()) d = py::cast(to_device(dev));
             return std::make_unique<py_autocast>(autocast_dtype(dtype), enabled, std::move(d));
           }),
           py::arg("dtype") = scalar_type::bf16, py::arg("device") = py::none(),
           py::arg("enabled") = true)
      .def("__enter__", [](py_autocast& a) { a.enter(); })
      .def("__exit__", [](py_autocast& a, const py::args&) { a.exit(); })
      .def_readonly("dtype", &py_autocast::dtype)
      .def_readonly("enabled", &py_autocast::enabled)
      .def_readonly("device", &py_autocast::device)
      .def("__repr__", [](const py_autocast& a) {
        return std::string("kiln.autocast(dtype=kiln.") + row_of(a.dtype).name +
               ", device=" + std::string(py::repr(a.device)) +
               ", enabled=" + (a.enabled ? "True" : "False") + ")";
      });
  m.def(
      "is_autocast_enabled", [] { return kiln::autocast::active().has_value(); },
      "Whether this thread is inside an enabled kiln.autocast block.");
  m.def(
      "get_autocast_dtype",
      []() -> py::object {
        const std::optional<scalar_type> t = kiln::autocast::active();
        return t ? py::cast(*t) : py::none();
      },
      "The 16-bit dtype of this thread's innermost enabled kiln.autocast block, else None.");
}

// ---- kiln.optim.grad_scaler ----

// The C++ scaler plus what Python shows of it. The mutex makes one scaler usable from several
// threads (the C++ one is not); calls take it after dropping the GIL, so a step that compiles
// its kernels does not block other Python threads.
struct py_scaler {
  optim::grad_scaler_options options;
  optim::grad_scaler scaler;
  std::optional<device> dev;  // the state's device, known once scale() or step() succeeded
  std::shared_ptr<std::mutex> mu = std::make_shared<std::mutex>();
};

struct py_step_result {
  optim::grad_scaler::step_result result;
  std::optional<device> dev;
  std::shared_ptr<std::mutex> mu;
};

// Reads that wait for the device: first for the queued work with Ctrl-C active (wait.hpp), then
// the C++ read, whose own wait finds nothing left to do.
template <class F>
auto read_back(const std::optional<device>& dev, std::mutex& mu, F&& f) {
  if (dev) wait_for_default_queue(*dev);
  py::gil_scoped_release off;
  std::lock_guard<std::mutex> lock(mu);
  return f();
}

tensor scale_one(py_scaler& s, const tensor& loss) {
  py::gil_scoped_release off;
  std::lock_guard<std::mutex> lock(*s.mu);
  tensor r = s.scaler.scale(loss);
  if (s.options.enabled && !s.dev) s.dev = loss.get_device();
  return r;
}

py::object scale(py_scaler& s, py::handle outputs) {
  if (py::isinstance<tensor>(outputs)) return py::cast(scale_one(s, outputs.cast<const tensor&>()));
  if (py::isinstance<py::list>(outputs) || py::isinstance<py::tuple>(outputs)) {
    py::list out;
    for (py::handle h : outputs) {
      if (!py::isinstance<tensor>(h))
        throw py::type_error("kiln.optim.grad_scaler.scale: expects kiln.tensor items, got " +
                             type_name_of(h));
      out.append(py::cast(scale_one(s, h.cast<const tensor&>())));
    }
    return py::isinstance<py::tuple>(outputs) ? py::object(py::tuple(out)) : py::object(out);
  }
  throw py::type_error(
      "kiln.optim.grad_scaler.scale: expects a kiln.tensor (the loss) or a list or tuple of "
      "them, got " +
      type_name_of(outputs));
}

// The optimizer argument of step / unscale_ (fn), or a TypeError naming what came.
optim::optimizer& optimizer_arg(py::handle opt, const char* fn) {
  if (!py::isinstance<optim::optimizer>(opt))
    throw py::type_error(std::string("kiln.optim.grad_scaler.") + fn +
                         ": expects a kiln.optim optimizer (kiln.optim.sgd, adam, adamw, rmsprop "
                         "or adagrad), got " +
                         type_name_of(opt));
  return opt.cast<optim::optimizer&>();
}

py_step_result step(py_scaler& s, py::handle opt) {
  optim::optimizer& o = optimizer_arg(opt, "step");
  py::gil_scoped_release off;
  std::lock_guard<std::mutex> lock(*s.mu);
  py_step_result r{s.scaler.step(o), std::nullopt, s.mu};
  // Stepped: every parameter is on the state's device (the C++ step checks it).
  if (s.options.enabled && !s.dev) s.dev = o.parameters().front().get_device();
  r.dev = s.dev;
  return r;
}

void unscale_(py_scaler& s, py::handle opt) {
  optim::optimizer& o = optimizer_arg(opt, "unscale_");
  py::gil_scoped_release off;
  std::lock_guard<std::mutex> lock(*s.mu);
  s.scaler.unscale_(o);
  if (s.options.enabled && !s.dev) s.dev = o.parameters().front().get_device();
}

py::dict state_dict(const py_scaler& s) {
  py::dict d;
  if (!s.options.enabled) return d;  // as torch: nothing to save
  d["scale"] = read_back(s.dev, *s.mu, [&] { return s.scaler.get_scale(); });
  d["growth_factor"] = s.options.growth_factor;
  d["backoff_factor"] = s.options.backoff_factor;
  d["growth_interval"] = s.options.growth_interval;
  return d;
}

// A new scaler with the saved scale as its initial one (and the saved factors). The count of
// clean steps is not restored (the C++ scaler keeps it on the device without an accessor):
// the next growth comes up to growth_interval steps later. torch's "_growth_tracker" is
// accepted and ignored for that reason.
void load_state_dict(py_scaler& s, const py::dict& d) {
  const char* fn = "kiln.optim.grad_scaler.load_state_dict: ";
  if (!s.options.enabled)
    throw invalid_argument(std::string(fn) + "this scaler is disabled (enabled=False)");
  optim::grad_scaler_options o = s.options;
  for (auto [k, v] : d) {
    const std::string key = py::str(k);
    if (key == "scale")
      o.init_scale = v.cast<double>();
    else if (key == "growth_factor")
      o.growth_factor = v.cast<double>();
    else if (key == "backoff_factor")
      o.backoff_factor = v.cast<double>();
    else if (key == "growth_interval")
      o.growth_interval = v.cast<int>();
    else if (key != "_growth_tracker")
      throw invalid_argument(std::string(fn) + "unexpected key '" + key + "'");
  }
  if (!d.contains("scale"))
    throw invalid_argument(std::string(fn) +
                           "no 'scale' (the state of a disabled scaler is empty)");
  optim::grad_scaler fresh(o);  // checks the values as the constructor does
  py::gil_scoped_release off;
  std::lock_guard<std::mutex> lock(*s.mu);
  s.options = o;
  s.scaler = std::move(fresh);
  s.dev.reset();
}

void bind_grad_scaler(py::module_& om) {
  py::class_<py_scaler> cls(om, "grad_scaler",
                            R"(Loss scaling for float16 training (torch.amp.GradScaler):

    scaler = kiln.optim.grad_scaler()
    with kiln.autocast(kiln.float16):
        loss = kiln.nn.cross_entropy(model(x), y)
    scaler.scale(loss).backward()
    scaler.step(opt)      # unscales the gradients; skips the step on inf/NaN
    scaler.update()       # halves the scale after an overflow, doubles it after growth_interval

No host sync in that loop: the scale and the skip flag live on the device of the first loss
scaled (every parameter of the optimizer must be there). get_scale(), last_step_skipped(),
state_dict() and bool(scaler.step(opt)) read back.)");
  py::class_<py_step_result>(cls, "step_result",
                             "What step() returns: bool() says whether the step was taken (reads "
                             "back; only until the scaler's next step()).")
      .def("__bool__", [](const py_step_result& r) {
        return read_back(r.dev, *r.mu, [&] { return static_cast<bool>(r.result); });
      });
  cls.def(py::init([](double init_scale, double growth_factor, double backoff_factor,
                      int growth_interval, bool enabled) {
            optim::grad_scaler_options o{init_scale, growth_factor, backoff_factor, growth_interval,
                                         enabled};
            return py_scaler{o, optim::grad_scaler(o), std::nullopt};
          }),
          py::arg("init_scale") = 65536.0, py::arg("growth_factor") = 2.0,
          py::arg("backoff_factor") = 0.5, py::arg("growth_interval") = 2000,
          py::arg("enabled") = true)
      .def("scale", &scale, py::arg("outputs"),
           "outputs (a loss, or a list or tuple of them) times the scale; lazy, on the device.")
      .def("step", &step, py::arg("optimizer"),
           "Unscales the optimizer's gradients in place and steps it, skipped on the device when "
           "one is inf or NaN. No host sync. After unscale_(optimizer) it only steps.")
      .def("unscale_", &unscale_, py::arg("optimizer"),
           "Divides the optimizer's gradients by the scale in place and checks them now, so they "
           "can be read or clipped (kiln.optim.clip_grad_norm_) before step(). Once per "
           "optimizer between update()s; step it before unscaling or stepping another (else "
           "kiln.invalid_argument). No host sync.")
      .def(
          "update",
          [](py_scaler& s) {
            std::lock_guard<std::mutex> lock(*s.mu);
            s.scaler.update();
          },
          py::call_guard<py::gil_scoped_release>(),
          "After step(): the scale times backoff_factor after an overflow, times growth_factor "
          "after growth_interval clean steps in a row. No host sync.")
      .def(
          "get_scale",
          [](const py_scaler& s) {
            return read_back(s.dev, *s.mu, [&] { return s.scaler.get_scale(); });
          },
          "The current scale (reads back once the state is on a device).")
      .def(
          "last_step_skipped",
          [](const py_scaler& s) {
            return read_back(s.dev, *s.mu, [&] { return s.scaler.last_step_skipped(); });
          },
          "Whether the latest step() found inf or NaN and skipped (reads back).")
      .def("is_enabled", [](const py_scaler& s) { return s.options.enabled; })
      .def_property_readonly("init_scale", [](const py_scaler& s) { return s.options.init_scale; })
      .def_property_readonly("growth_factor",
                             [](const py_scaler& s) { return s.options.growth_factor; })
      .def_property_readonly("backoff_factor",
                             [](const py_scaler& s) { return s.options.backoff_factor; })
      .def_property_readonly("growth_interval",
                             [](const py_scaler& s) { return s.options.growth_interval; })
      .def("state_dict", &state_dict,
           "{'scale', 'growth_factor', 'backoff_factor', 'growth_interval'} (reads the scale "
           "back); empty when disabled.")
      .def("load_state_dict", &load_state_dict, py::arg("state"),
           "Continues from a state_dict (this module's or torch.amp.GradScaler's); the count of "
           "clean steps toward the next growth restarts at 0.")
      .def("__repr__", [](const py_scaler& s) {
        return "kiln.optim.grad_scaler(init_scale=" +
               std::string(py::repr(py::float_(s.options.init_scale))) +
               ", growth_factor=" + std::string(py::repr(py::float_(s.options.growth_factor))) +
               ", backoff_factor=" + std::string(py::repr(py::float_(s.options.backoff_factor))) +
               ", growth_interval=" + std::to_string(s.options.growth_interval) +
               ", enabled=" + (s.options.enabled ? "True" : "False") + ")";
      });
}

}  // namespace

void bind_amp(py::module_& m) {
  bind_autocast(m);
  py::module_ om = m.attr("optim");
  bind_grad_scaler(om);
}

}  // namespace kiln::python
