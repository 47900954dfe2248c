// In-process groups of CPU devices: each rank is a thread of this process, and a collective is
// a rendezvous in host memory. Every rank posts its call, then computes its whole result from
// every rank's input in rank order (so the result is bitwise the same on every rank), then,
// after all have read the inputs, writes its output (send may be recv: in place is safe).
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "collective/comm_impl.hpp"

namespace kiln::collective::detail {
namespace {

struct post {
  op_kind kind;
  std::uint64_t count;
  scalar_type dtype;
  reduce_op op;
  int root;
  const char* send;
  std::string failed;  // not empty: this rank's call failed its own checks, and why
};

struct rendezvous {
  explicit rendezvous(int n) : size(n), posts(n) {}
  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::uint64_t generation = 0;
  std::vector<post> posts;
  std::string abandoned;  // not empty: a rank left the group; every wait throws this

  // `who` prefixes the error a rank gets when the group was abandoned.
  void barrier(const std::string& who) {
    std::unique_lock lock(mu);
    if (!abandoned.empty()) throw collective_error(who + abandoned);
    const std::uint64_t gen = generation;
    if (++arrived == size) {
      arrived = 0;
      ++generation;
      cv.notify_all();
    } else {
      cv.wait(lock, [&] { return generation != gen || !abandoned.empty(); });
      if (generation == gen) throw collective_error(who + abandoned);
    }
  }

  void abandon(const std::string& why) {
    std::lock_guard lock(mu);
    if (abandoned.empty()) abandoned = why;
    cv.notify_all();
  }

  void rejoin() {
    std::lock_guard lock(mu);
    abandoned.clear();
    arrived = 0;
  }
};

const char* kind_name(op_kind k) {
  switch (k) {
    case op_kind::all_reduce: return "all_reduce";
    case op_kind::broadcast: return "broadcast";
    case op_kind::all_gather: return "all_gather";
    case op_kind::reduce_scatter: return "reduce_scatter";
  }
  return "?";
}

// Empty when every rank posted the same call as rank 0; else the first difference.
std::string mismatch(const std::vector<post>& p) {
  for (std::size_t r = 0; r < p.size(); ++r)
    if (!p[r].failed.empty())
      return "rank " + std::to_string(r) + " could not make the call: " + p[r].failed;
  for (std::size_t r = 1; r < p.size(); ++r) {
    const post &a = p[0], &b = p[r];
    std::string what;
    if (a.kind != b.kind)
      what = std::string("rank 0 called ") + kind_name(a.kind) + ", rank " + std::to_string(r) +
             " " + kind_name(b.kind);
    else if (a.count != b.count)
      what = "rank 0 passed " + std::to_string(a.count) + " elements, rank " + std::to_string(r) +
             " " + std::to_string(b.count);
    else if (a.dtype != b.dtype)
      what = std::string("rank 0 passed ") + type_name(a.dtype) + ", rank " + std::to_string(r) +
             " " + type_name(b.dtype);
    else if (a.kind != op_kind::broadcast && a.kind != op_kind::all_gather && a.op != b.op)
      what = std::string("rank 0 asked for ") + to_string(a.op) + ", rank " + std::to_string(r) +
             " " + to_string(b.op);
    else if (a.kind == op_kind::broadcast && a.root != b.root)
      what = "rank 0 named root " + std::to_string(a.root) + ", rank " + std::to_string(r) +
             " root " + std::to_string(b.root);
    if (!what.empty()) return "the ranks disagree: " + what;
  }
  return {};
}

struct host_rank final : comm_impl {
  std::shared_ptr<rendezvous> group;

  bool reduces(scalar_type) const override { return true; }

  void run(const call& c) override {
    const std::size_t esize = size_of(c.dtype);
    const char* send = nullptr;
    char* recv = nullptr;
    try {
      // Work queued before on this rank's queue (fills, kernels writing send) completes first.
      kiln::detail::check(*c.q->dev->api, c.q->dev->api->queue_finish(c.q->handle),
                          "kiln::collective: finishing the queue");
      send = c.send ? static_cast<const char*>(host_address(*c.send, c.send_off)) : nullptr;
      recv = c.recv ? static_cast<char*>(host_address(*c.recv, c.recv_off)) : nullptr;
    } catch (const std::exception& e) {  // before the rendezvous: the others must not wait
      fail(c.name, e.what());
      throw;
    }
    const std::string w = where(*this, c.name);
    group->posts[rank] = {c.kind, c.count, c.dtype, c.op, c.root, send, {}};
    group->barrier(w);
    const std::string bad = mismatch(group->posts);
    std::vector<char> out;
    if (bad.empty()) out = compute(c, esize);
    group->barrier(w);  // everyone has read every input: outputs may overwrite them
    if (!bad.empty()) throw collective_error(w + bad);
    if (!out.empty()) std::memcpy(recv, out.data(), out.size());
  }

  // Takes part in both rendezvous of the call, so the others see why and throw.
  void fail(const char* name, const std::string& why) override {
    const std::string w = where(*this, name);
    group->posts[rank] = {op_kind::all_reduce,
                          0,
                          scalar_type::f32,
                          reduce_op::sum,
                          0,
                          nullptr,
                          why.empty() ? std::string("(no reason given)") : why};
    try {
      group->barrier(w);
      group->barrier(w);
    } catch (const collective_error&) {  // abandoned: the caller throws its own error anyway
    }
  }

  void abandon(const std::string& why) override { group->abandon(why); }
  void rejoin() override { group->rejoin(); }

  std::vector<char> compute(const call& c, std::size_t esize) const {
    const auto& p = group->posts;
    const std::uint64_t n = c.count, bytes = n * esize;
    std::vector<char> out;
    switch (c.kind) {
      case op_kind::broadcast: out.assign(p[c.root].send, p[c.root].send + bytes); break;
      case op_kind::all_gather:
        out.resize(bytes * size);
        for (int r = 0; r < size; ++r)
          if (bytes) std::memcpy(out.data() + r * bytes, p[r].send, bytes);
        break;
      case op_kind::all_reduce:
      case op_kind::reduce_scatter: {
        // all_reduce: the whole buffer; reduce_scatter: this rank's block of each send.
        const std::uint64_t from = c.kind == op_kind::reduce_scatter ? rank * bytes : 0;
        out.assign(p[0].send + from, p[0].send + from + bytes);
        for (int r = 1; r < size; ++r) reduce_into(c.dtype, c.op, out.data(), p[r].send + from, n);
        if (c.op == reduce_op::avg) finish_avg(c.dtype, out.data(), n, size);
        break;
      }
    }
    return out;
  }
};

}  // namespace

std::vector<std::shared_ptr<comm_impl>> make_host_group(const std::vector<device>& devices) {
  auto group = std::make_shared<rendezvous>(static_cast<int>(devices.size()));
  std::vector<std::shared_ptr<comm_impl>> out;
  for (std::size_t i = 0; i < devices.size(); ++i) {
    auto r = std::make_shared<host_rank>();
    r->rank = static_cast<int>(i);
    r->size = static_cast<int>(devices.size());
    r->dev = devices[i];
    r->transport = "host";
    r->group = group;
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace kiln::collective::detail
