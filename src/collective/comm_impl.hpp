// What kiln::collective::communicator stands on: one rank of a group, over one transport
// (NCCL through a backend's "ccl" extension, an in-process host group, MPI in kiln::mpi).
// communicator.cpp validates every call before a transport sees it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kiln/collective.hpp"
#include "runtime/runtime.hpp"

namespace kiln::collective::detail {

enum class op_kind : std::uint8_t { all_reduce, broadcast, all_gather, reduce_scatter };

// A validated call: `count` is the per-rank element count (all_reduce/broadcast: the buffer;
// all_gather: send; reduce_scatter: recv). q is never null.
struct call {
  op_kind kind = op_kind::all_reduce;
  const char* name = "";
  kiln::detail::memory_impl* send = nullptr;
  kiln::detail::memory_impl* recv = nullptr;
  std::uint64_t send_off = 0, recv_off = 0, count = 0;
  scalar_type dtype = scalar_type::f32;
  reduce_op op = reduce_op::sum;
  int root = 0;
  kiln::detail::queue_impl* q = nullptr;
};

struct comm_impl {
  int rank = 0, size = 1;
  device dev{nullptr};
  std::string transport;
  virtual ~comm_impl() = default;
  // Whether the transport reduces dtype (else kiln::unsupported before it is called).
  virtual bool reduces(scalar_type t) const = 0;
  virtual void run(const call& c) = 0;
  // This rank's call failed its own checks (`why`) before reaching the transport. Host and MPI
  // groups, and NCCL ranks of one process (they meet around every launch), take part in the
  // call's rendezvous anyway, so the other ranks throw kiln::collective_error instead of
  // waiting forever; NCCL ranks in other processes cannot (they would hang, as with NCCL
  // itself). The caller then throws its own error.
  virtual void fail(const char* /*name*/, const std::string& /*why*/) {}
  // A rank's thread ended (run_per_rank): host groups wake the ranks still waiting for it, or
  // calling later, with kiln::collective_error.
  virtual void abandon(const std::string& /*why*/) {}
  // Every rank's thread has ended (run_per_rank): an abandoned group may be used again.
  virtual void rejoin() {}
};

// "kiln::collective::all_reduce (rank 1 of 2 on cpu, host): <reason>".
std::string where(const comm_impl& c, const char* op);

// Host address of memory of a host-addressable device (the CPU backend), at `off` bytes.
void* host_address(kiln::detail::memory_impl& m, std::uint64_t off);

// In-process CPU groups (host_group.cpp).
std::vector<std::shared_ptr<comm_impl>> make_host_group(const std::vector<device>& devices);
// NCCL through the backend's "ccl" extension (ccl_comm.cpp): all ranks here, or one rank of a
// group over processes.
std::vector<std::shared_ptr<comm_impl>> make_ccl_group(const std::vector<device>& devices);
std::shared_ptr<comm_impl> make_ccl_rank(const device& dev, const unique_id& id, int size,
                                         int rank);
unique_id make_ccl_unique_id(const device& dev);
// Whether dev's backend offers the "ccl" extension; `why` says why not.
bool has_ccl(const device& dev, std::string* why);

// Host reductions (host_reduce.cpp): acc[i] = op(acc[i], x[i]) for n elements of type t; and
// the division that turns a sum into avg over `ranks`.
void reduce_into(scalar_type t, reduce_op op, void* acc, const void* x, std::uint64_t n);
void finish_avg(scalar_type t, void* acc, std::uint64_t n, int ranks);

}  // namespace kiln::collective::detail
