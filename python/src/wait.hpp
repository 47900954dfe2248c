// Waits that Ctrl-C interrupts. A blocking call into Kiln holds no GIL, so Python's signal
// handler cannot run until it returns: a long kernel would make Ctrl-C do nothing for its whole
// run. These waits poll instead, checking for signals between polls; an interrupt abandons the
// wait with the signal handler's exception (KeyboardInterrupt) while the device work runs on.
#pragma once

#include <pybind11/pybind11.h>

#include "kiln/device.hpp"
#include "kiln/queue.hpp"

namespace kiln::python {

// Until e is done, without the GIL; raises what a signal handler raised meanwhile. gpu: e
// marks work on a GPU (the host may spin while it runs).
void wait_interruptibly(const event& e, bool gpu);
// Until the work queued so far on dev's default queue (where tensors and kernels run) is done.
void wait_for_default_queue(const device& dev);

}  // namespace kiln::python
