// The MPI transport of kiln::collective (library kiln_mpi): CPU devices reduce through MPI's
// collectives on host memory; GPU devices get an NCCL communicator whose unique id rank 0
// broadcasts with MPI. Every MPI return code is checked (the communicator returns errors
// instead of aborting), and before each collective the ranks compare what they were asked
// (one small MPI_Allgather), so that a mismatch is an error rather than a hang.
#include <mpi.h>

#include <array>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "collective/comm_impl.hpp"

namespace kiln::collective::mpi {
namespace {

std::string mpi_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, static_cast<std::size_t>(len));
}

void check_mpi(int code, const std::string& where, const char* call) {
  if (code != MPI_SUCCESS) throw collective_error(where + call + " failed: " + mpi_text(code));
}

MPI_Datatype to_mpi(scalar_type t) {
  switch (t) {
    case scalar_type::i8: return MPI_INT8_T;
    case scalar_type::i16: return MPI_INT16_T;
    case scalar_type::i32: return MPI_INT32_T;
    case scalar_type::i64: return MPI_INT64_T;
    case scalar_type::u8: return MPI_UINT8_T;
    case scalar_type::u16: return MPI_UINT16_T;
    case scalar_type::u32: return MPI_UINT32_T;
    case scalar_type::u64: return MPI_UINT64_T;
    case scalar_type::f32: return MPI_FLOAT;
    case scalar_type::f64: return MPI_DOUBLE;
    case scalar_type::boolean: return MPI_BYTE;  // moved, never reduced
    case scalar_type::f16:
    case scalar_type::bf16: return MPI_UINT16_T;  // moved, never reduced (reduces())
  }
  return MPI_BYTE;
}

MPI_Op to_mpi(reduce_op op) {
  switch (op) {
    case reduce_op::prod: return MPI_PROD;
    case reduce_op::min: return MPI_MIN;
    case reduce_op::max: return MPI_MAX;
    default: return MPI_SUM;  // avg: a sum, divided here
  }
}

bool finalized() {
  int f = 0;
  MPI_Finalized(&f);
  return f != 0;
}

struct mpi_rank final : detail::comm_impl {
  MPI_Comm comm = MPI_COMM_NULL;

  ~mpi_rank() override {
    if (comm != MPI_COMM_NULL && !finalized()) MPI_Comm_free(&comm);
  }

  // MPI has no 16-bit float type: f16 and bf16 are moved as bytes, never reduced.
  bool reduces(scalar_type t) const override { return !is_reduced_float(t); }

  // Every rank sends what it was asked; a difference becomes the same error on every rank. A
  // rank whose call failed its own checks sends kind -1 (fail()), and the others throw too.
  void agree(const std::array<long long, 5>& mine, const std::string& w) const {
    std::vector<long long> all(mine.size() * static_cast<std::size_t>(size));
    check_mpi(MPI_Allgather(mine.data(), 5, MPI_LONG_LONG, all.data(), 5, MPI_LONG_LONG, comm), w,
              "MPI_Allgather (argument check)");
    for (int r = 0; r < size; ++r)
      if (all[r * 5] < 0)
        throw collective_error(w + "rank " + std::to_string(r) +
                               " could not make the call (its own error says why)");
    static const char* const fields[5] = {"operation", "element count", "dtype", "reduction",
                                          "root"};
    for (int r = 0; r < size; ++r)
      for (int f = 0; f < 5; ++f)
        if (all[r * 5 + f] != all[f])
          throw collective_error(w + "the ranks disagree: rank " + std::to_string(r) +
                                 " passed another " + fields[f] + " (" +
                                 std::to_string(all[r * 5 + f]) + ") than rank 0 (" +
                                 std::to_string(all[f]) + ")");
  }

  static std::array<long long, 5> summary(const detail::call& c) {
    const bool reduces =
        c.kind == detail::op_kind::all_reduce || c.kind == detail::op_kind::reduce_scatter;
    return {static_cast<long long>(c.kind), static_cast<long long>(c.count),
            static_cast<long long>(c.dtype), reduces ? static_cast<long long>(c.op) : 0,
            c.kind == detail::op_kind::broadcast ? c.root : 0};
  }

  void fail(const char* name, const std::string&) override {
    try {
      agree({-1, 0, 0, 0, 0}, detail::where(*this, name));
    } catch (const collective_error&) {  // expected: this rank's own error is what it throws
    }
  }

  void run(const detail::call& c) override {
    const std::string w = detail::where(*this, c.name);
    try {
      kiln::detail::check(*c.q->dev->api, c.q->dev->api->queue_finish(c.q->handle),
                          "kiln::collective: finishing the queue");
    } catch (const std::exception& e) {  // before the agreement: the others must not wait
      fail(c.name, e.what());
      throw;
    }
    agree(summary(c), w);
    if (c.count == 0) return;
    if (c.count > static_cast<std::uint64_t>(INT_MAX) / static_cast<std::uint64_t>(size))
      throw invalid_argument(w + std::to_string(c.count) +
                             " elements: MPI counts are int; split the buffer");
    const int n = static_cast<int>(c.count);
    const MPI_Datatype t = to_mpi(c.dtype);
    void* send = c.send ? detail::host_address(*c.send, c.send_off) : nullptr;
    void* recv = c.recv ? detail::host_address(*c.recv, c.recv_off) : nullptr;
    switch (c.kind) {
      case detail::op_kind::all_reduce:
        check_mpi(MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, n, t, to_mpi(c.op), comm),
                  w, "MPI_Allreduce");
        if (c.op == reduce_op::avg) detail::finish_avg(c.dtype, recv, c.count, size);
        break;
      case detail::op_kind::broadcast:
        if (rank == c.root && send != recv) std::memcpy(recv, send, c.count * size_of(c.dtype));
        check_mpi(MPI_Bcast(recv, n, t, c.root, comm), w, "MPI_Bcast");
        break;
      case detail::op_kind::all_gather: {
        // NCCL's in place form (send is this rank's block of recv) is MPI_IN_PLACE in MPI.
        const bool in_place =
            c.send == c.recv && c.send_off == c.recv_off + c.count * size_of(c.dtype) * rank;
        check_mpi(MPI_Allgather(in_place ? MPI_IN_PLACE : send, n, t, recv, n, t, comm), w,
                  "MPI_Allgather");
        break;
      }
      case detail::op_kind::reduce_scatter:
        // In place (recv is this rank's block of send): MPI forbids aliased buffers.
        if (c.send == c.recv && c.recv_off == c.send_off + c.count * size_of(c.dtype) * rank) {
          std::vector<char> block(c.count * size_of(c.dtype));
          check_mpi(MPI_Reduce_scatter_block(send, block.data(), n, t, to_mpi(c.op), comm), w,
                    "MPI_Reduce_scatter_block");
          std::memcpy(recv, block.data(), block.size());
        } else {
          check_mpi(MPI_Reduce_scatter_block(send, recv, n, t, to_mpi(c.op), comm), w,
                    "MPI_Reduce_scatter_block");
        }
        if (c.op == reduce_op::avg) detail::finish_avg(c.dtype, recv, c.count, size);
        break;
    }
  }
};

std::once_flag init_once;

void ensure_init(int* argc, char*** argv) {
  std::call_once(init_once, [&] {
    int done = 0;
    MPI_Initialized(&done);
    if (done) return;
    int provided = 0;
    check_mpi(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided),
              "kiln::collective::mpi::init: ", "MPI_Init_thread");
    std::atexit([] {
      if (!finalized()) MPI_Finalize();
    });
  });
}

}  // namespace

void init(int* argc, char*** argv) { ensure_init(argc, argv); }

int world_rank() {
  ensure_init(nullptr, nullptr);
  int r = 0;
  check_mpi(MPI_Comm_rank(MPI_COMM_WORLD, &r), "kiln::collective::mpi: ", "MPI_Comm_rank");
  return r;
}

int world_size() {
  ensure_init(nullptr, nullptr);
  int s = 0;
  check_mpi(MPI_Comm_size(MPI_COMM_WORLD, &s), "kiln::collective::mpi: ", "MPI_Comm_size");
  return s;
}

int local_rank() {
  ensure_init(nullptr, nullptr);
  MPI_Comm node = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
            "kiln::collective::mpi: ", "MPI_Comm_split_type");
  int r = 0;
  MPI_Comm_rank(node, &r);
  MPI_Comm_free(&node);
  return r;
}

device local_device() {
  const int local = local_rank();
  if (const char* env = std::getenv("KILN_DEVICE"); env && *env) {
    // A backend without an index ("cuda"): this node's rank picks one of its devices, as below.
    const std::string spec(env);
    if (spec.find(':') != std::string::npos) return device::get(spec);
    std::vector<device> of;
    for (const device& d : device::all())
      if (d.backend() == spec) of.push_back(d);
    if (of.empty()) return device::get(spec);  // the registry's error names the reason
    return of[static_cast<std::size_t>(local) % of.size()];
  }
  std::vector<device> gpus;
  for (const device& d : device::all())
    if (d.info().type == device_type::gpu && !d.impl()->portable()) gpus.push_back(d);
  if (gpus.empty()) return device::host();
  return gpus[static_cast<std::size_t>(local) % gpus.size()];
}

communicator world(const device& dev) {
  if (!dev.impl()) kiln::detail::throw_empty_handle("kiln::collective::mpi::world", "device");
  ensure_init(nullptr, nullptr);
  const int rank = world_rank(), size = world_size();
  const std::string w = "kiln::collective::mpi::world (rank " + std::to_string(rank) + " of " +
                        std::to_string(size) + " on " + dev.id() + "): ";
  // Every rank must take the same path, or some would wait in a call the others never make.
  const int host = dev.info().type == device_type::cpu && dev.backend() == device::host().backend();
  std::string why;
  const int ccl = !host && detail::has_ccl(dev, &why);
  int all_host = 0, all_ccl = 0;
  check_mpi(MPI_Allreduce(&host, &all_host, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), w,
            "MPI_Allreduce");
  check_mpi(MPI_Allreduce(&ccl, &all_ccl, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), w, "MPI_Allreduce");
  if (all_ccl) {
    // Rank 0 sends the id, or why it has none (the others would otherwise wait for it forever).
    unique_id id{};
    std::array<char, 512> error{};
    if (rank == 0) {
      try {
        id = communicator::make_unique_id(dev);
      } catch (const std::exception& e) {
        std::snprintf(error.data(), error.size(), "%s", e.what());
        if (!error[0]) error[0] = '?';
      }
    }
    check_mpi(MPI_Bcast(error.data(), static_cast<int>(error.size()), MPI_CHAR, 0, MPI_COMM_WORLD),
              w, "MPI_Bcast (NCCL unique id status)");
    if (error[0])
      throw collective_error(w + "rank 0 could not make the NCCL unique id: " + error.data());
    check_mpi(MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0, MPI_COMM_WORLD), w,
              "MPI_Bcast (NCCL unique id)");
    return communicator::create(dev, id, size, rank);
  }
  if (!all_host) {
    if (!host && !ccl) throw unsupported(w + why);
    throw invalid_argument(w +
                           "the ranks' devices differ in kind (some CPU, some GPU); every "
                           "rank of one group must use the same backend");
  }
  auto r = std::make_shared<mpi_rank>();
  r->rank = rank;
  r->size = size;
  r->dev = dev;
  r->transport = "mpi";
  check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &r->comm), w, "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(r->comm, MPI_ERRORS_RETURN), w, "MPI_Comm_set_errhandler");
  return communicator(r);
}

}  // namespace kiln::collective::mpi
