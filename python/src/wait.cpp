// Interruptible waits (wait.hpp): poll the event with the GIL released, and every 20 ms take the
// GIL and let Python run its signal handlers. (A thread blocked in the wait instead, woken
// through a condition variable, would react sooner, but an interrupted wait would leave it
// inside Kiln while the interpreter exits.)
#include "wait.hpp"

#include <chrono>
#include <thread>

namespace kiln::python {

namespace py = pybind11;

void wait_interruptibly(const event& e, bool gpu) {
  if (e.done()) return;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  // Yielding reacts at once but keeps a core busy: right while a GPU computes (what CUDA's own
  // synchronisation does), wrong on the CPU backend, whose workers need the cores. After that
  // the poll sleeps in 50 us steps, a small share of any wait that long.
  const auto spin = gpu ? std::chrono::microseconds(5000) : std::chrono::microseconds(50);
  auto next_check = start + std::chrono::milliseconds(20);
  for (;;) {
    {
      py::gil_scoped_release release;
      while (!e.done()) {
        const auto now = clock::now();
        if (now >= next_check) break;
        if (now - start < spin)
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
    if (e.done()) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    next_check = clock::now() + std::chrono::milliseconds(20);
  }
}

void wait_for_default_queue(const device& dev) {
  wait_interruptibly(dev.default_queue().record(), dev.info().type == device_type::gpu);
}

}  // namespace kiln::python
