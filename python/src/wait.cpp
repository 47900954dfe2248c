// Interruptible waits (wait.hpp): poll the event, yielding at first (most waits are short) and
// then sleeping, with the GIL released; every 20 ms take the GIL and let Python run its signal
// handlers.
#include "wait.hpp"

#include <chrono>
#include <thread>

namespace kiln::python {

namespace py = pybind11;

void wait_interruptibly(const event& e) {
  if (e.done()) return;
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  auto next_check = start + std::chrono::milliseconds(20);
  for (;;) {
    {
      py::gil_scoped_release release;
      while (!e.done()) {
        const auto now = clock::now();
        if (now >= next_check) break;
        // The first 200 us yield (a kernel about to finish); later polls sleep, so a long wait
        // costs no core.
        if (now - start < std::chrono::microseconds(200))
          std::this_thread::yield();
        else
          std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    }
    if (e.done()) return;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    next_check = clock::now() + std::chrono::milliseconds(20);
  }
}

void wait_for_default_queue(const device& dev) { wait_interruptibly(dev.default_queue().record()); }

}  // namespace kiln::python
