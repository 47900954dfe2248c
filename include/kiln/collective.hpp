// kiln::collective: all-reduce, broadcast, all-gather and reduce-scatter over a group of
// devices, NCCL's model: one communicator per rank, one device per rank, and every rank issues
// the same operations in the same order.
//
//   // One process, one rank per device (ncclCommInitAll), one thread per rank:
//   auto comms = kiln::collective::communicator::create({kiln::device::get("cuda:0"),
//                                                        kiln::device::get("cuda:1")});
//   kiln::collective::run_per_rank(comms, [&](kiln::collective::communicator& c) {
//     kiln::buffer<float> g(c.get_device(), grads[c.rank()]);
//     c.all_reduce(g, kiln::collective::reduce_op::avg);   // in place, on the default queue
//     kiln::tensor t = kiln::tensor::rand(c.get_device(), {4, 8}, c.rank());
//     kiln::tensor all = c.all_gather(t);                  // [4 * size, 8]
//   });
//
//   // Across processes and nodes (mpirun; kiln/collective_mpi.hpp, library kiln::mpi):
//   kiln::collective::communicator c = kiln::collective::mpi::world(dev);
//
// Backends: CUDA devices through NCCL (the CUDA plugin's "ccl" extension; NCCL is dlopen'ed),
// ordered on a kiln::queue (asynchronous, like any other work on it). CPU devices in one
// process through host memory (the CPU device may be listed more than once: each entry is a
// rank, driven by its own thread), across processes through MPI; these complete before the
// call returns. Reductions: sum, prod, min, max, avg (integers: truncating division) on every
// scalar type but bool (broadcast and all_gather move bool too; NCCL lacks 16-bit integers:
// their reductions throw kiln::unsupported there). Results are identical on every rank.
// docs/collective.md has the semantics, mpirun lines and environment variables.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/queue.hpp"
#include "kiln/tensor.hpp"

namespace kiln {

// A collective failed in the library underneath (NCCL, MPI) or the ranks disagreed (different
// counts, dtypes or operations). The message names the operation, the rank and the reason.
class collective_error : public error {
 public:
  explicit collective_error(const std::string& m) : error(error_category::backend_failure, m) {}
};

namespace collective {

enum class reduce_op { sum, prod, min, max, avg };
const char* to_string(reduce_op op) noexcept;

namespace detail {
struct comm_impl;
// What one call passes down (counts in elements, offsets in bytes).
struct call_args {
  const char* name = "";
  std::shared_ptr<kiln::detail::memory_impl> send, recv;
  std::uint64_t send_off = 0, recv_off = 0, send_count = 0, recv_count = 0;
  scalar_type dtype = scalar_type::f32;
  reduce_op op = reduce_op::sum;
  int root = 0;
  const queue* q = nullptr;  // null: the device's default queue
};
void all_reduce(comm_impl& c, call_args a);
void broadcast(comm_impl& c, call_args a);
void all_gather(comm_impl& c, call_args a);
void reduce_scatter(comm_impl& c, call_args a);
}  // namespace detail

// NCCL's unique id: made by one rank (communicator::unique_id, on a device of the backend
// that will run the group), sent to the others by any means (MPI, a file, a socket).
using unique_id = std::array<std::uint8_t, 128>;

// One rank of a group. Copies share the rank; the group ends with its last handle.
class communicator {
 public:
  communicator() = default;
  // One rank per device, all in this process (rank i on devices[i]). CUDA: NCCL's
  // ncclCommInitAll (each GPU once). CPU: a host group. Drive each rank from its own thread
  // (run_per_rank), as with NCCL: a rank's call waits for the others.
  static std::vector<communicator> create(const std::vector<device>& devices);
  // One rank of a group spread over processes (ncclCommInitRank): every rank passes the id
  // rank 0 made with unique_id(dev). Blocks until all `size` ranks joined. GPU backends with
  // the "ccl" extension only; CPU groups across processes go through mpi::world.
  static communicator create(const device& dev, const unique_id& id, int size, int rank);
  static unique_id make_unique_id(const device& dev);

  int rank() const;
  int size() const;
  const device& get_device() const;
  // What runs it: "nccl", "host" (in-process CPU group) or "mpi".
  const std::string& transport() const;

  // ---- buffers (kiln::buffer or buffer_view) on this rank's device; send and recv may be
  // the same memory ----
  // recv[i] = op over ranks of send[i]; sizes equal.
  template <class Src, class Dst>
  requires(kiln::detail::is_device_side<Src>&& kiln::detail::is_device_side<Dst>) void all_reduce(
      const Src& send, const Dst& recv, reduce_op op = reduce_op::sum,
      const queue* q = nullptr) const {
    call(detail::all_reduce, "all_reduce", send, recv, op, 0, q);
  }
  template <class Buf>
  requires kiln::detail::is_device_side<Buf>
  void all_reduce(const Buf& buf, reduce_op op = reduce_op::sum, const queue* q = nullptr) const {
    call(detail::all_reduce, "all_reduce", buf, buf, op, 0, q);
  }
  // recv of every rank = send of `root` (send is read on root only); sizes equal.
  template <class Src, class Dst>
  requires(kiln::detail::is_device_side<Src>&& kiln::detail::is_device_side<Dst>) void broadcast(
      const Src& send, const Dst& recv, int root, const queue* q = nullptr) const {
    call(detail::broadcast, "broadcast", send, recv, reduce_op::sum, root, q);
  }
  template <class Buf>
  requires kiln::detail::is_device_side<Buf>
  void broadcast(const Buf& buf, int root, const queue* q = nullptr) const {
    call(detail::broadcast, "broadcast", buf, buf, reduce_op::sum, root, q);
  }
  // recv (size() * send.size() elements) = the ranks' send, in rank order.
  template <class Src, class Dst>
  requires(kiln::detail::is_device_side<Src>&& kiln::detail::is_device_side<Dst>) void all_gather(
      const Src& send, const Dst& recv, const queue* q = nullptr) const {
    call(detail::all_gather, "all_gather", send, recv, reduce_op::sum, 0, q);
  }
  // send holds size() blocks of recv.size() elements; rank r's recv = op over ranks of block r.
  template <class Src, class Dst>
  requires(kiln::detail::is_device_side<Src>&& kiln::detail::is_device_side<
           Dst>) void reduce_scatter(const Src& send, const Dst& recv,
                                     reduce_op op = reduce_op::sum,
                                     const queue* q = nullptr) const {
    call(detail::reduce_scatter, "reduce_scatter", send, recv, op, 0, q);
  }

  // ---- tensors (stored and contiguous; a lazy tensor is evaluated first) ----
  void all_reduce(const tensor& t, reduce_op op = reduce_op::sum, const queue* q = nullptr) const;
  void broadcast(const tensor& t, int root, const queue* q = nullptr) const;
  // [size() * n, ...] from every rank's [n, ...] (a rank-0 tensor gives [size()]).
  tensor all_gather(const tensor& t, const queue* q = nullptr) const;
  // [n / size(), ...] from [n, ...]; n must divide by size() (kiln::shape_error).
  tensor reduce_scatter(const tensor& t, reduce_op op = reduce_op::sum,
                        const queue* q = nullptr) const;

  explicit communicator(std::shared_ptr<detail::comm_impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::comm_impl>& impl() const noexcept { return impl_; }

 private:
  template <class Src, class Dst>
  void call(void (*fn)(detail::comm_impl&, detail::call_args), const char* name, const Src& src,
            const Dst& dst, reduce_op op, int root, const queue* q) const {
    const auto send = kiln::detail::as_view(src);
    const auto recv = kiln::detail::as_view(dst);
    using E = typename decltype(recv)::value_type;
    static_assert(std::is_same_v<typename decltype(send)::value_type, E>,
                  "kiln::collective: send and recv element types differ");
    static_assert(!std::is_const_v<typename decltype(recv)::element_type>,
                  "kiln::collective: recv is a view of const elements");
    detail::call_args a;
    a.name = name;
    a.send = send.memory();
    a.recv = recv.memory();
    a.send_off = send.offset() * sizeof(E);
    a.recv_off = recv.offset() * sizeof(E);
    a.send_count = send.size();
    a.recv_count = recv.size();
    a.dtype = scalar_type_of<E>;
    a.op = op;
    a.root = root;
    a.q = q;
    fn(checked_impl(name), std::move(a));
  }
  detail::comm_impl& checked_impl(const char* what) const;
  std::shared_ptr<detail::comm_impl> impl_;
};

// Runs fn(comms[i]) on one thread per rank and waits for all; rethrows the first exception
// (by rank). The usual driver of an in-process group.
void run_per_rank(std::vector<communicator>& comms, const std::function<void(communicator&)>& fn);

}  // namespace collective
}  // namespace kiln
