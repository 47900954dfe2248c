// The driver's own object behind a Kiln queue, for handing Kiln's work order to another library:
// DLPack's `stream` argument, a cuBLAS handle's stream, a hand-written CUDA launch. A CUstream
// (cudaStream_t) for cuda devices, a cl_command_queue for opencl. Kiln keeps ownership: never
// destroy or release it; it is valid while a handle to the queue lives. Work another library
// enqueues on it is ordered with the queue's own.
//
//   kiln::queue q = dev.default_queue();
//   auto stream = static_cast<CUstream>(kiln::native_handle(q));   // dev is cuda:N
//   my_kernel<<<grid, block, 0, stream>>>(...);                      // after q's earlier work
#pragma once

#include "kiln/queue.hpp"

namespace kiln {

// kiln::unsupported on the CPU backend (its queues are Kiln's own threads) and on plugins
// built before the entry existed; kiln::invalid_argument for an empty queue handle.
void* native_handle(const queue& q);

}  // namespace kiln
