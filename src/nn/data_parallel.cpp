// kiln::nn::data_parallel: buckets over the optimizer's flat gradient buffers, all-reduced
// (avg) in bucket order as backward completes them (kiln/nn/data_parallel.hpp).
#include "kiln/nn/data_parallel.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "autograd/graph.hpp"
#include "collective/comm_impl.hpp"
#include "optim/flat.hpp"
#include "optim/optim_impl.hpp"

namespace kiln::nn {

struct data_parallel::impl {
  module* model = nullptr;
  optim::optimizer opt;
  collective::communicator comm;
  data_parallel_options options;
  struct bucket {
    std::size_t group = 0;
    std::int64_t lo = 0, hi = 0;  // element range of the group's flat gradient buffer
    std::vector<std::size_t> params;
    std::size_t pending = 0;  // gradients not accumulated yet in this backward
  };
  std::vector<bucket> buckets;
  std::vector<std::size_t> bucket_of;  // per optimizer parameter
  std::vector<std::uint64_t> hook_ids;
  std::size_t next = 0;       // the first bucket not launched in this iteration
  bool async = false;         // the transport queues work (NCCL): buckets run on comm_queue
  bool synchronized = false;  // synchronize_gradients() ran since the last step()
  std::optional<queue> comm_queue;

  void launch(bucket& b) {
    // One rank: the average is the gradient itself (NCCL would still run a kernel per bucket:
    // ~5% of the wide MLP's step on one H200).
    if (comm.size() == 1) return;
    const auto& g = opt.impl()->groups[b.group];
    collective::detail::call_args a;
    a.name = "all_reduce";
    a.send = a.recv = g.grads;
    const std::uint64_t es = size_of(g.dtype);
    a.send_off = a.recv_off = static_cast<std::uint64_t>(b.lo) * es;
    a.send_count = a.recv_count = static_cast<std::uint64_t>(b.hi - b.lo);
    a.dtype = g.dtype;
    a.op = collective::reduce_op::avg;
    if (async) {
      // After the gradient kernels queued so far on the default queue.
      comm_queue->wait(g.dev.default_queue().record());
      a.q = &*comm_queue;
    }
    collective::detail::all_reduce(*comm.impl(), std::move(a));
  }

  // Launches ready buckets in order: every rank issues the same sequence of collectives.
  void launch_ready() {
    while (next < buckets.size() && buckets[next].pending == 0) launch(buckets[next++]);
  }

  void on_accumulated(std::size_t param) {
    auto& o = *opt.impl();
    const auto& s = o.slots[param];
    // A gradient that is not the flat slot (replaced by set_grad) goes into it first.
    if (o.params[param].grad().impl() != s.grad) {
      const auto& grp = o.groups[s.group];
      optim::detail::write_slot(grp, *grp.grads, s.offset, o.params[param].grad());
      o.params[param].set_grad(tensor(s.grad));
    }
    bucket& b = buckets[bucket_of[param]];
    // A bucket already complete this step: a second backward before step(). Its gradients would
    // be added after the average and the ranks would drift apart, silently.
    if (b.pending == 0)
      throw invalid_argument(
          "kiln::nn::data_parallel: a second backward before step(); call step() (or "
          "synchronize_gradients()) after each backward: accumulating gradients over several "
          "backwards is not supported");
    if (--b.pending == 0) launch_ready();
  }

  void finish_iteration() {
    // Ready for the next backward even when this throws (a failed capture is retried eagerly).
    struct reset_buckets {
      impl& d;
      ~reset_buckets() {
        d.next = 0;
        for (bucket& b : d.buckets) b.pending = b.params.size();
      }
    } reset{*this};
    while (next < buckets.size()) launch(buckets[next++]);
    // With one rank nothing ran on comm_queue: no wait (inside a capture, a wait on its event,
    // recorded outside the capture, would end the capture).
    if (async && comm.size() > 1)
      for (const auto& g : opt.impl()->groups) g.dev.default_queue().wait(comm_queue->record());
  }
};

data_parallel::data_parallel(module& model, optim::optimizer& opt, collective::communicator comm,
                             const data_parallel_options& o)
    : impl_(std::make_shared<impl>()) {
  impl& d = *impl_;
  d.model = &model;
  d.opt = opt;
  d.comm = comm;
  d.options = o;
  auto& oi = optim::detail::impl_of(opt.impl());
  const device dev = comm.get_device();
  for (const auto& g : oi.groups)
    if (!(g.dev == dev))
      throw device_mismatch("kiln::nn::data_parallel: parameters live on " + g.dev.id() +
                            ", the communicator's rank " + std::to_string(comm.rank()) + " on " +
                            dev.id());
  if (model.parameters().size() != oi.params.size())
    throw invalid_argument("kiln::nn::data_parallel: the model has " +
                           std::to_string(model.parameters().size()) +
                           " parameters, the optimizer " + std::to_string(oi.params.size()));
  d.async = comm.transport() == "nccl";
  if (d.async) d.comm_queue.emplace(dev);

  if (o.broadcast_parameters) {
    for (const auto& g : oi.groups) {
      if (g.n == 0) continue;
      collective::detail::call_args a;
      a.name = "broadcast";
      a.send = a.recv = g.params;
      a.send_count = a.recv_count = static_cast<std::uint64_t>(g.n);
      a.dtype = g.dtype;
      a.root = 0;
      collective::detail::broadcast(*comm.impl(), std::move(a));
    }
    for (auto& [name, t] : model.named_buffers()) comm.broadcast(t, 0);
  }

  // Buckets: per group, members in reverse order (backward's order), cut at bucket_bytes (the
  // very first at first_bucket_bytes: backward's first gradients start communicating early).
  d.bucket_of.assign(oi.params.size(), 0);
  std::uint64_t cap = o.bucket_bytes;
  if (cap == 0) {
    std::uint64_t total = 0;
    for (const auto& g : oi.groups) total += static_cast<std::uint64_t>(g.n) * size_of(g.dtype);
    cap = std::clamp<std::uint64_t>(total / 4, 1ull << 20, 25ull << 20);
  }
  for (std::size_t gi = 0; gi < oi.groups.size(); ++gi) {
    const auto& g = oi.groups[gi];
    const std::uint64_t es = size_of(g.dtype);
    std::vector<std::size_t> members = g.members;
    std::sort(members.begin(), members.end(), [&](std::size_t a, std::size_t b) {
      return oi.slots[a].offset > oi.slots[b].offset;
    });
    std::optional<impl::bucket> cur;
    std::int64_t upper = g.n;  // a slot runs to the next slot's start (padding included)
    for (std::size_t p : members) {
      if (!cur) cur = impl::bucket{gi, upper, upper, {}, 0};
      cur->lo = oi.slots[p].offset;
      cur->params.push_back(p);
      const std::uint64_t limit = d.buckets.empty() ? std::min(o.first_bucket_bytes, cap) : cap;
      if (static_cast<std::uint64_t>(cur->hi - cur->lo) * es >= limit) {
        upper = cur->lo;
        d.buckets.push_back(*cur);
        cur.reset();
      }
    }
    if (cur) d.buckets.push_back(*cur);
  }
  for (std::size_t b = 0; b < d.buckets.size(); ++b) {
    d.buckets[b].pending = d.buckets[b].params.size();
    for (std::size_t p : d.buckets[b].params) d.bucket_of[p] = b;
  }
  // A group's last bucket also covers anything before its lowest slot (none today).
  for (std::size_t b = 0; b < d.buckets.size(); ++b)
    if (b + 1 == d.buckets.size() || d.buckets[b + 1].group != d.buckets[b].group)
      d.buckets[b].lo = 0;

  if (o.overlap) {
    std::weak_ptr<impl> weak = impl_;
    for (std::size_t i = 0; i < oi.params.size(); ++i)
      d.hook_ids.push_back(
          detail::register_gradient_only_hook(oi.params[i], [weak, i](const tensor&) {
            if (auto s = weak.lock()) s->on_accumulated(i);
          }));
  }
}

data_parallel::~data_parallel() {
  if (!impl_) return;
  auto& oi = *impl_->opt.impl();
  for (std::size_t i = 0; i < impl_->hook_ids.size(); ++i)
    autograd::remove_hook(oi.params[i], impl_->hook_ids[i]);
}

tensor data_parallel::forward(const tensor& x) const { return impl_->model->forward(x); }

void data_parallel::synchronize_gradients() {
  impl_->finish_iteration();
  impl_->synchronized = true;
}

void data_parallel::step() {
  // After synchronize_gradients() (to clip, say) the gradients are final: not all-reduced again.
  if (!std::exchange(impl_->synchronized, false)) impl_->finish_iteration();
  impl_->opt.step();
}

const collective::communicator& data_parallel::communicator() const { return impl_->comm; }
std::size_t data_parallel::bucket_count() const { return impl_->buckets.size(); }

}  // namespace kiln::nn
