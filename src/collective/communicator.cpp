// kiln::collective::communicator: argument checks shared by every transport, the tensor forms,
// and run_per_rank. Transports see only calls that passed these checks.
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "collective/comm_impl.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::collective {

const char* to_string(reduce_op op) noexcept {
  switch (op) {
    case reduce_op::sum: return "sum";
    case reduce_op::prod: return "prod";
    case reduce_op::min: return "min";
    case reduce_op::max: return "max";
    case reduce_op::avg: return "avg";
  }
  return "?";
}

namespace detail {

std::string where(const comm_impl& c, const char* op) {
  return std::string("kiln::collective::") + op + " (rank " + std::to_string(c.rank) + " of " +
         std::to_string(c.size) + " on " + c.dev.id() + ", " + c.transport + "): ";
}

void* host_address(kiln::detail::memory_impl& m, std::uint64_t off) {
  void* p = nullptr;
  kiln::detail::check(*m.dev->api, m.dev->api->mem_address(m.dev->handle(), {m.handle, 0}, &p),
                      "kiln::collective: host address of a buffer");
  return static_cast<char*>(p) + off;
}

namespace {

kiln::detail::memory_impl* checked_memory(const comm_impl& c, const call_args& a,
                                          const std::shared_ptr<kiln::detail::memory_impl>& m,
                                          const char* which, std::uint64_t count) {
  if (!m) {
    if (count == 0) return nullptr;
    throw invalid_argument(where(c, a.name) + which + " is an empty buffer");
  }
  if (m->dev != c.dev.impl())
    throw device_mismatch(where(c, a.name) + which + " lives on " + m->dev->id + ", not on " +
                          c.dev.id() + " (this rank's device)");
  return m.get();
}

// Runs a rank's own checks; when one throws, tells the group (comm_impl::fail) and rethrows.
template <class F>
auto guarded(comm_impl& c, const char* name, F&& f) {
  try {
    return f();
  } catch (const std::exception& e) {
    c.fail(name, e.what());
    throw;
  }
}

std::string count_text(std::uint64_t n) { return std::to_string(n) + " elements"; }

// The queue a call runs on: q, else the device's default queue; it must be the rank's device's.
const queue& rank_queue(const comm_impl& c, const queue* q, const char* name) {
  const queue& r = q ? *q : c.dev.default_queue();
  if (!r.impl()) kiln::detail::throw_empty_handle(name, "queue");
  if (r.impl()->dev != c.dev.impl())
    throw device_mismatch(where(c, name) + "the queue belongs to " + r.impl()->dev->id +
                          ", not to " + c.dev.id());
  return r;
}

// The per-rank element count of a call, after its size rule (see the table in collective.hpp).
std::uint64_t checked_count(const comm_impl& c, op_kind kind, const call_args& a) {
  const auto size = static_cast<std::uint64_t>(c.size);
  switch (kind) {
    case op_kind::all_reduce:
    case op_kind::broadcast:
      if (a.send_count != a.recv_count)
        throw invalid_argument(where(c, a.name) + "send has " + count_text(a.send_count) +
                               ", recv " + count_text(a.recv_count));
      return a.send_count;
    case op_kind::all_gather:
      if (a.recv_count != a.send_count * size)
        throw invalid_argument(where(c, a.name) + "recv has " + count_text(a.recv_count) +
                               "; it needs size * send = " + std::to_string(c.size) + " * " +
                               std::to_string(a.send_count));
      return a.send_count;
    case op_kind::reduce_scatter:
      if (a.send_count != a.recv_count * size)
        throw invalid_argument(where(c, a.name) + "send has " + count_text(a.send_count) +
                               "; it needs size * recv = " + std::to_string(c.size) + " * " +
                               std::to_string(a.recv_count));
      return a.recv_count;
  }
  return 0;
}

call prepare(comm_impl& c, op_kind kind, const call_args& a) {
  const std::uint64_t count = checked_count(c, kind, a);
  call k;
  k.kind = kind;
  k.name = a.name;
  k.count = count;
  k.dtype = a.dtype;
  k.op = a.op;
  k.root = a.root;
  k.send = checked_memory(c, a, a.send, "send", a.send_count);
  k.recv = checked_memory(c, a, a.recv, "recv", a.recv_count);
  k.send_off = a.send_off;
  k.recv_off = a.recv_off;
  const bool reduces = kind == op_kind::all_reduce || kind == op_kind::reduce_scatter;
  if (reduces && a.dtype == scalar_type::boolean)
    throw dtype_error(where(c, a.name) + "bool has no " + to_string(a.op) +
                      " (reduce an integer type)");
  if (reduces && !c.reduces(a.dtype))
    throw unsupported(where(c, a.name) + c.transport + " cannot reduce " + type_name(a.dtype));
  if (kind == op_kind::broadcast && (a.root < 0 || a.root >= c.size))
    throw invalid_argument(where(c, a.name) + "root " + std::to_string(a.root) +
                           " is not a rank of a group of " + std::to_string(c.size));
  k.q = rank_queue(c, a.q, a.name).impl().get();
  return k;
}

// The rank's own checks (guarded: a failure reaches the group), then the transport.
void run_call(comm_impl& c, op_kind kind, const call_args& a) {
  c.run(guarded(c, a.name, [&] { return prepare(c, kind, a); }));
}

}  // namespace

void all_reduce(comm_impl& c, call_args a) { run_call(c, op_kind::all_reduce, a); }
void broadcast(comm_impl& c, call_args a) { run_call(c, op_kind::broadcast, a); }
void all_gather(comm_impl& c, call_args a) { run_call(c, op_kind::all_gather, a); }
void reduce_scatter(comm_impl& c, call_args a) { run_call(c, op_kind::reduce_scatter, a); }

}  // namespace detail

std::vector<communicator> communicator::create(const std::vector<device>& devices) {
  if (devices.empty()) throw invalid_argument("kiln::collective::communicator::create: no devices");
  for (const device& d : devices)
    if (!d.impl()) kiln::detail::throw_empty_handle("communicator::create", "device");
  const device& first = devices.front();
  for (const device& d : devices)
    if (d.backend() != first.backend())
      throw invalid_argument("kiln::collective::communicator::create: one group spans " +
                             first.id() + " and " + d.id() + "; a group is one backend's devices");
  std::vector<std::shared_ptr<detail::comm_impl>> impls;
  std::string why;
  if (first.info().type == device_type::cpu && first.backend() == device::host().backend())
    impls = detail::make_host_group(devices);
  else if (detail::has_ccl(first, &why))
    impls = detail::make_ccl_group(devices);
  else
    throw unsupported("kiln::collective::communicator::create: " + first.id() + ": " + why);
  std::vector<communicator> out;
  for (auto& i : impls) out.emplace_back(std::move(i));
  return out;
}

communicator communicator::create(const device& dev, const unique_id& id, int size, int rank) {
  if (!dev.impl()) kiln::detail::throw_empty_handle("communicator::create", "device");
  if (size < 1 || rank < 0 || rank >= size)
    throw invalid_argument("kiln::collective::communicator::create: rank " + std::to_string(rank) +
                           " of a group of " + std::to_string(size));
  std::string why;
  if (!detail::has_ccl(dev, &why))
    throw unsupported("kiln::collective::communicator::create: " + dev.id() + ": " + why);
  return communicator(detail::make_ccl_rank(dev, id, size, rank));
}

unique_id communicator::make_unique_id(const device& dev) {
  if (!dev.impl()) kiln::detail::throw_empty_handle("communicator::make_unique_id", "device");
  std::string why;
  if (!detail::has_ccl(dev, &why))
    throw unsupported("kiln::collective::communicator::make_unique_id: " + dev.id() + ": " + why);
  return detail::make_ccl_unique_id(dev);
}

detail::comm_impl& communicator::checked_impl(const char* what) const {
  if (!impl_) kiln::detail::throw_empty_handle(what, "communicator");
  return *impl_;
}

int communicator::rank() const { return checked_impl("communicator::rank").rank; }
int communicator::size() const { return checked_impl("communicator::size").size; }
const device& communicator::get_device() const {
  return checked_impl("communicator::get_device").dev;
}
const std::string& communicator::transport() const {
  return checked_impl("communicator::transport").transport;
}

namespace {

// The tensor's storage as call arguments (it must be stored and contiguous).
kiln::detail::tensor_impl& stored(const detail::comm_impl& c, const tensor& t, const char* op) {
  if (!t.defined()) throw invalid_argument(detail::where(c, op) + "the tensor is undefined");
  t.eval();
  kiln::detail::tensor_impl& x = kiln::detail::impl_of(t, op);
  if (!t.is_contiguous() || !x.mem)
    throw invalid_argument(detail::where(c, op) +
                           "the tensor must be contiguous (call contiguous() first)");
  return x;
}

detail::call_args tensor_args(const char* name, const kiln::detail::tensor_impl& s,
                              const kiln::detail::tensor_impl& r, reduce_op op, int root,
                              const queue* q) {
  detail::call_args a;
  a.name = name;
  a.send = s.mem;
  a.recv = r.mem;
  a.send_off = static_cast<std::uint64_t>(s.offset) * size_of(s.dtype);
  a.recv_off = static_cast<std::uint64_t>(r.offset) * size_of(r.dtype);
  a.send_count = static_cast<std::uint64_t>(kiln::detail::numel_of(s.shape));
  a.recv_count = static_cast<std::uint64_t>(kiln::detail::numel_of(r.shape));
  a.dtype = s.dtype;
  a.op = op;
  a.root = root;
  a.q = q;
  return a;
}

}  // namespace

namespace {

// The tensor forms evaluate on the device's default queue. A caller's queue `q` waits for that
// first, and the default queue (which later tensor work uses) waits for q's collective after.
struct queue_join {
  queue def;
  std::optional<queue> other;
  queue_join(const detail::comm_impl& c, const queue* q, const char* name)
      : def(c.dev.default_queue()) {
    if (!q) return;
    detail::rank_queue(c, q, name);  // checked here, before waiting on it
    if (q->impl() != def.impl()) {
      other.emplace(*q);
      other->wait(def.record());
    }
  }
  void after() {
    if (other) def.wait(other->record());
  }
};

}  // namespace

void communicator::all_reduce(const tensor& t, reduce_op op, const queue* q) const {
  detail::comm_impl& c = checked_impl("all_reduce");
  std::optional<queue_join> join;
  auto& x = *detail::guarded(c, "all_reduce", [&] {
    auto* s = &stored(c, t, "all_reduce");
    join.emplace(c, q, "all_reduce");
    return s;
  });
  detail::all_reduce(c, tensor_args("all_reduce", x, x, op, 0, q));
  join->after();
}

void communicator::broadcast(const tensor& t, int root, const queue* q) const {
  detail::comm_impl& c = checked_impl("broadcast");
  std::optional<queue_join> join;
  auto& x = *detail::guarded(c, "broadcast", [&] {
    auto* s = &stored(c, t, "broadcast");
    join.emplace(c, q, "broadcast");
    return s;
  });
  detail::broadcast(c, tensor_args("broadcast", x, x, reduce_op::sum, root, q));
  join->after();
}

tensor communicator::all_gather(const tensor& t, const queue* q) const {
  detail::comm_impl& c = checked_impl("all_gather");
  std::optional<queue_join> join;
  tensor out;
  auto& x = *detail::guarded(c, "all_gather", [&] {
    auto* s = &stored(c, t, "all_gather");
    shape_t shape = s->shape.empty() ? shape_t{1} : s->shape;
    shape[0] *= c.size;
    out = tensor::empty(c.dev, shape, s->dtype);
    join.emplace(c, q, "all_gather");
    return s;
  });
  detail::all_gather(c, tensor_args("all_gather", x, kiln::detail::impl_of(out, "all_gather"),
                                    reduce_op::sum, 0, q));
  join->after();
  return out;
}

tensor communicator::reduce_scatter(const tensor& t, reduce_op op, const queue* q) const {
  detail::comm_impl& c = checked_impl("reduce_scatter");
  std::optional<queue_join> join;
  tensor out;
  auto& x = *detail::guarded(c, "reduce_scatter", [&] {
    auto* s = &stored(c, t, "reduce_scatter");
    if (s->shape.empty() || s->shape[0] % c.size != 0)
      throw shape_error(detail::where(c, "reduce_scatter") + "the first dimension of " +
                        kiln::to_string(s->shape) + " must divide by the group's size " +
                        std::to_string(c.size));
    shape_t shape = s->shape;
    shape[0] /= c.size;
    out = tensor::empty(c.dev, shape, s->dtype);
    join.emplace(c, q, "reduce_scatter");
    return s;
  });
  detail::reduce_scatter(
      c, tensor_args("reduce_scatter", x, kiln::detail::impl_of(out, "reduce_scatter"), op, 0, q));
  join->after();
  return out;
}

void run_per_rank(std::vector<communicator>& comms, const std::function<void(communicator&)>& fn) {
  std::vector<std::exception_ptr> errors(comms.size());
  std::vector<std::thread> threads;
  threads.reserve(comms.size());
  for (std::size_t i = 0; i < comms.size(); ++i)
    threads.emplace_back([&, i] {
      try {
        fn(comms[i]);
        // Ranks still calling would wait for this one forever.
        if (comms[i].impl()) comms[i].impl()->abandon("rank " + std::to_string(i) + " returned");
      } catch (const std::exception& e) {
        errors[i] = std::current_exception();
        // The others may be waiting for this rank in a collective: wake them with an error.
        if (comms[i].impl())
          comms[i].impl()->abandon("rank " + std::to_string(i) + " stopped: " + e.what());
      } catch (...) {
        errors[i] = std::current_exception();
        if (comms[i].impl()) comms[i].impl()->abandon("rank " + std::to_string(i) + " stopped");
      }
    });
  for (auto& t : threads) t.join();
  for (auto& c : comms)  // nobody waits now: the group may run again
    if (c.impl()) c.impl()->rejoin();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace kiln::collective
