// kiln::collective over processes started by mpirun (library kiln::mpi, built when CMake finds
// MPI). Each process is one rank with one device: GPUs run NCCL (the unique id goes out with
// MPI_Bcast), CPU devices run MPI's own collectives on host memory.
//
//   // mpirun -np 2 ./train   (docs/collective.md has the flags for containers and nodes)
//   int main(int argc, char** argv) {
//     kiln::collective::mpi::init(&argc, &argv);          // optional: world() calls it
//     kiln::device dev = kiln::collective::mpi::local_device();   // cuda:<local rank> or cpu
//     kiln::collective::communicator world = kiln::collective::mpi::world(dev);
//     kiln::tensor g = ...;
//     world.all_reduce(g, kiln::collective::reduce_op::avg);
//   }
#pragma once

#include "kiln/collective.hpp"

namespace kiln::collective::mpi {

// MPI_Init_thread (MPI_THREAD_SERIALIZED) unless MPI is initialised already; when Kiln
// initialised it, MPI_Finalize runs at exit. Arguments may be null.
void init(int* argc = nullptr, char*** argv = nullptr);
int world_rank();
int world_size();
// Rank among the processes of this node (MPI_Comm_split_type shared memory).
int local_rank();
// KILN_DEVICE when set; else GPU number local_rank() % count of the best GPU backend when
// there are GPUs; else the CPU.
device local_device();
// A communicator over every rank of MPI_COMM_WORLD, this rank on `dev`. Collective: every
// rank calls it. kiln::unsupported for a device that is neither the host CPU nor of a backend
// with the "ccl" extension (NCCL).
communicator world(const device& dev);

}  // namespace kiln::collective::mpi
