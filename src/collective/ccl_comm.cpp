// NCCL (or another vendor library) through a backend's "ccl" extension table: the plugin owns
// the library and its communicators; calls are queued on the kiln queue's stream.
#include <algorithm>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "ccl_abi.h"
#include "collective/comm_impl.hpp"

namespace kiln::collective::detail {
namespace {

const kiln_ccl_v1* table_of(const device& dev) {
  return static_cast<const kiln_ccl_v1*>(
      dev.impl()->extension(KILN_CCL_EXTENSION, KILN_CCL_VERSION));
}

kiln_dtype to_abi(scalar_type t) {
  switch (t) {
    case scalar_type::i8: return KILN_DTYPE_I8;
    case scalar_type::u8: return KILN_DTYPE_U8;
    case scalar_type::i32: return KILN_DTYPE_I32;
    case scalar_type::u32: return KILN_DTYPE_U32;
    case scalar_type::i64: return KILN_DTYPE_I64;
    case scalar_type::u64: return KILN_DTYPE_U64;
    case scalar_type::f32: return KILN_DTYPE_F32;
    case scalar_type::f64: return KILN_DTYPE_F64;
    case scalar_type::f16: return KILN_DTYPE_F16;
    case scalar_type::bf16: return KILN_DTYPE_BF16;
    default: return KILN_DTYPE_NONE;  // bool, 16-bit integers: moved as bytes, never reduced
  }
}

kiln_ccl_op to_abi(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return KILN_CCL_SUM;
    case reduce_op::prod: return KILN_CCL_PROD;
    case reduce_op::min: return KILN_CCL_MIN;
    case reduce_op::max: return KILN_CCL_MAX;
    case reduce_op::avg: return KILN_CCL_AVG;
  }
  return KILN_CCL_SUM;
}

// The ranks of one process (make_ccl_group) meet before and after every launch. An NCCL
// kernel spins until every rank's matching kernel runs; meanwhile a driver call that loads
// code (CUDA's lazy loading: cuDNN and cuBLAS kernels on their first use, a module load) may
// wait for the device to go idle, under a driver lock that the other ranks' threads need to
// launch their half: one process, two ranks, no progress (issue 23: LeNet through cuDNN on two
// GPUs). Meeting first, no rank queues a collective while another still runs the work before
// it; meeting after, no rank goes on (to code that may load kernels) before every rank has
// queued it, so a queued collective never waits for a host thread.
struct launch_gate {
  explicit launch_gate(int n) : size(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::string posted;     // this round: the first rank's failure, if any
  std::string failed;     // the last finished round's
  std::string abandoned;  // a rank left the group: every wait throws it

  // Waits for every rank; returns why a rank could not go on this round (empty: all can).
  // `mine`: this rank's own failure, told to the others.
  std::string meet(const std::string& who, const std::string& mine = {}) {
    std::unique_lock lock(mu);
    if (!abandoned.empty()) throw collective_error(who + abandoned);
    if (!mine.empty() && posted.empty()) posted = mine;
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      failed = std::move(posted);
      posted.clear();
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !abandoned.empty(); });
      if (generation == gen) throw collective_error(who + abandoned);
    }
    return failed;  // valid until the next round ends, which needs this rank
  }
  void abandon(const std::string& why) {
    std::lock_guard lock(mu);
    if (abandoned.empty()) abandoned = why;
    cv.notify_all();
  }
  void rejoin() {
    std::lock_guard lock(mu);
    abandoned.clear();
    posted.clear();
    arrived = 0;
  }
};

struct ccl_rank final : comm_impl {
  const kiln_ccl_v1* ccl = nullptr;
  kiln_ccl_comm_h comm = nullptr;
  std::shared_ptr<launch_gate> gate;  // the ranks of this process (make_ccl_group), else null

  ~ccl_rank() override {
    if (comm) ccl->comm_destroy(comm);
  }

  bool reduces(scalar_type t) const override {
    const kiln_dtype d = to_abi(t);
    return d != KILN_DTYPE_NONE && ccl->supports_dtype(d);
  }

  [[noreturn]] void raise(kiln_status st, const call& c) const {
    const std::string why = dev.impl()->api->last_error();
    const std::string msg = where(*this, c.name) + why;
    if (st == KILN_ERR_INVALID_ARGUMENT) throw invalid_argument(msg);
    if (st == KILN_ERR_UNSUPPORTED) throw unsupported(msg);
    if (st == KILN_ERR_OUT_OF_MEMORY) throw out_of_memory(msg);
    throw collective_error(msg);
  }

  void run(const call& c) override {
    if (!gate) {
      checks(c);
      return launch(c);
    }
    const std::string w = where(*this, c.name);
    if (std::shared_ptr<kiln::detail::capture_hold> h = dev.impl()->active_capture())
      join_replays(*h, w);
    try {
      checks(c);
    } catch (const std::exception& e) {
      gate->meet(w, e.what());  // the others throw instead of waiting
      throw;
    }
    if (const std::string why = gate->meet(w); !why.empty())
      throw collective_error(w + "another rank could not make the call: " + why);
    try {
      launch(c);
    } catch (const std::exception& e) {
      gate->meet(w, e.what());
      throw;
    }
    if (const std::string why = gate->meet(w); !why.empty())
      throw collective_error(w + "another rank could not queue the call: " + why);
  }

  // A captured collective (kiln::step_graph): each replay of the graph meets the other ranks.
  void join_replays(kiln::detail::capture_hold& h, const std::string& who) {
    std::lock_guard lock(h.mu);
    for (const auto& b : h.barriers)
      if (b.first == gate.get()) return;
    h.barriers.emplace_back(gate.get(), [g = gate, who](const std::string& mine) {
      return g->meet(who + "replaying a captured step: ", mine);
    });
  }

  // A rank failing its own checks before run() (communicator.cpp) meets the others once.
  void fail(const char* name, const std::string& why) override {
    if (gate) gate->meet(where(*this, name), why);
  }
  void abandon(const std::string& why) override {
    if (gate) gate->abandon(why);
  }
  void rejoin() override {
    if (gate) gate->rejoin();
  }

  void checks(const call& c) const {
    dev.impl()->check_alive(c.q->gen, c.name);
    // Buffers from before a device reset would reach NCCL as dangling pointers.
    if (c.send) dev.impl()->check_alive(c.send->gen, c.name);
    if (c.recv) dev.impl()->check_alive(c.recv->gen, c.name);
  }

  void launch(const call& c) {
    if (c.count == 0) return;
    kiln_mem_ref s{c.send ? c.send->handle : nullptr, c.send_off};
    kiln_mem_ref r{c.recv ? c.recv->handle : nullptr, c.recv_off};
    // Types the library cannot reduce still move: as bytes.
    kiln_dtype t = to_abi(c.dtype);
    std::uint64_t n = c.count;
    if (c.kind == op_kind::broadcast || c.kind == op_kind::all_gather) {
      if (t == KILN_DTYPE_NONE || !ccl->supports_dtype(t)) {
        t = KILN_DTYPE_U8;
        n *= size_of(c.dtype);
      }
    }
    kiln_status st = KILN_OK;
    switch (c.kind) {
      case op_kind::all_reduce:
        st = ccl->all_reduce(comm, s, r, n, t, to_abi(c.op), c.q->handle);
        break;
      case op_kind::broadcast: st = ccl->broadcast(comm, s, r, n, t, c.root, c.q->handle); break;
      case op_kind::all_gather: st = ccl->all_gather(comm, s, r, n, t, c.q->handle); break;
      case op_kind::reduce_scatter:
        st = ccl->reduce_scatter(comm, s, r, n, t, to_abi(c.op), c.q->handle);
        break;
    }
    if (st != KILN_OK) raise(st, c);
    // Frees of these buffers wait for this queue's work (stream-ordered).
    if (c.send) kiln::detail::note_queue_use(*c.send, *c.q);
    if (c.recv) kiln::detail::note_queue_use(*c.recv, *c.q);
  }
};

[[noreturn]] void init_failed(const device& dev, const char* what) {
  throw collective_error(std::string("kiln::collective::communicator::create (") + dev.id() +
                         "): " + what + ": " + dev.impl()->api->last_error());
}

}  // namespace

bool has_ccl(const device& dev, std::string* why) {
  if (table_of(dev)) return true;
  if (why)
    *why = "the " + dev.backend() +
           " backend has no \"ccl\" extension (collectives on GPUs need NCCL: libnccl.so.2 was "
           "not found or failed to load; set KILN_NCCL_LIBRARY to its path)";
  return false;
}

std::vector<std::shared_ptr<comm_impl>> make_ccl_group(const std::vector<device>& devices) {
  for (std::size_t i = 0; i < devices.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (devices[i] == devices[j])
        throw invalid_argument("kiln::collective::communicator::create: " + devices[i].id() +
                               " is listed twice; NCCL runs one rank per GPU");
  const kiln_ccl_v1* ccl = table_of(devices.front());
  std::vector<kiln_device_h> handles;
  for (const device& d : devices) handles.push_back(d.impl()->handle());
  std::vector<kiln_ccl_comm_h> comms(devices.size());
  const kiln_status st =
      ccl->comm_init_all(handles.data(), static_cast<int>(handles.size()), comms.data());
  if (st != KILN_OK) init_failed(devices.front(), "ncclCommInitAll");
  std::vector<std::shared_ptr<comm_impl>> out;
  // KILN_CCL_GATE=0 leaves the ranks unsynchronised (to show the hang the gate prevents).
  const char* gate_env = std::getenv("KILN_CCL_GATE");
  const bool gated = devices.size() > 1 && !(gate_env && std::strcmp(gate_env, "0") == 0);
  auto gate = gated ? std::make_shared<launch_gate>(static_cast<int>(devices.size())) : nullptr;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    auto r = std::make_shared<ccl_rank>();
    r->gate = gate;
    r->rank = static_cast<int>(i);
    r->size = static_cast<int>(devices.size());
    r->dev = devices[i];
    r->transport = "nccl";
    r->ccl = ccl;
    r->comm = comms[i];
    out.push_back(std::move(r));
  }
  return out;
}

std::shared_ptr<comm_impl> make_ccl_rank(const device& dev, const unique_id& id, int size,
                                         int rank) {
  const kiln_ccl_v1* ccl = table_of(dev);
  auto r = std::make_shared<ccl_rank>();
  r->rank = rank;
  r->size = size;
  r->dev = dev;
  r->transport = "nccl";
  r->ccl = ccl;
  if (ccl->comm_init_rank(dev.impl()->handle(), id.data(), size, rank, &r->comm) != KILN_OK)
    init_failed(dev, "ncclCommInitRank");
  return r;
}

unique_id make_ccl_unique_id(const device& dev) {
  unique_id id{};
  static_assert(sizeof(unique_id) == KILN_CCL_UNIQUE_ID_BYTES);
  if (table_of(dev)->unique_id(id.data()) != KILN_OK) init_failed(dev, "ncclGetUniqueId");
  return id;
}

}  // namespace kiln::collective::detail
