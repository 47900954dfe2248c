// Polling a queue without waiting: true when everything queued on it so far has finished, false
// while some of it may still run. A caller about to wait can skip the wait (and the event it would
// record) when the queue is idle. Exact on CUDA (cuStreamQuery, no event) and the CPU backend.
// OpenCL (and plugins without the entry) can tell only by recording a marker event and querying
// it, which an implementation may complete after the call returns (PoCL does): there false means
// "maybe busy". Not inside a kiln::graph capture of the queue.
//
//   kiln::queue& q = dev.default_queue();
//   if (!kiln::idle(q)) q.record().wait();   // only a busy queue costs an event
#pragma once

#include "kiln/queue.hpp"

namespace kiln {

// kiln::invalid_argument for an empty queue handle; kiln::device_lost as other queue calls.
bool idle(const queue& q);

}  // namespace kiln
