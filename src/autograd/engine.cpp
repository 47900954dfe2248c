// backward(): the reverse sweep. The nodes reachable from the root are ordered so each runs
// after every consumer of its output has handed it a gradient; gradients meeting at a tensor
// are summed lazily, and each node's backward builds lazy expressions, so elementwise chains
// fuse into one kernel per fusion boundary (a product, a reduction, a gradient used twice).
#include <atomic>
#include <exception>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "autograd/graph.hpp"
#include "kiln/tensor/inplace.hpp"
#include "runtime/log.hpp"
#include "tensor/shape.hpp"

namespace kiln {
namespace detail {
namespace {

using impl_ptr = std::shared_ptr<tensor_impl>;

// Nodes of a lazy expression, counted up to `cap` (a bound on the kernels backward builds).
std::size_t expression_size(const tensor_impl& t, std::size_t cap) {
  if (t.kind != tensor_kind::op) return 0;
  std::size_t n = 1;
  for (const auto& a : t.args) {
    if (n >= cap) break;
    n += expression_size(*a, cap - n);
  }
  return n;
}

// A gradient read by more than one input's formula is evaluated once rather than recomputed in
// each; so is one grown past a size that would make the fused kernel unwieldy.
tensor settle(tensor g, std::size_t readers) {
  constexpr std::size_t max_fused_nodes = 48;
  if (g.is_lazy() &&
      (readers > 1 || expression_size(*g.impl(), max_fused_nodes + 1) > max_fused_nodes))
    g.eval();
  return g;
}

void add_into(tensor& slot, const tensor& g) { slot = slot.defined() ? slot + g : g; }

// Leaves accumulate: into their existing gradient's storage when it has its own contiguous
// storage (optimizers hand out gradients that live in one flat buffer), else a new tensor.
void accumulate_leaf(grad_meta& m, const tensor& g, const tensor_impl& leaf) {
  tensor v = g.dtype() == leaf.dtype ? g : g.to(leaf.dtype);
  if (m.grad.defined() && !m.grad.is_lazy() && m.grad.is_contiguous()) {
    copy_(m.grad, m.grad + v);
    return;
  }
  m.grad = m.grad.defined() ? m.grad + v : v;
  m.grad.eval();
}

}  // namespace

// One backward(): consumer counts, the gradients waiting at each tensor, and the node whose
// backward is running (so deliver_early can reach it).
namespace {
std::atomic<std::uint64_t> next_pass{1};
thread_local std::uint64_t t_pass = 0;  // the backward() sweep running on this thread
}  // namespace

std::uint64_t backward_pass() { return t_pass; }

class sweep {
  struct pass_scope {  // this sweep's id while it runs (restored after: sweeps may nest)
    std::uint64_t outer = std::exchange(t_pass, next_pass.fetch_add(1));
    ~pass_scope() { t_pass = outer; }
  } pass_;

 public:
  sweep(const impl_ptr& root, bool retain_graph) : retain_graph_(retain_graph) {
    // Consumers per tensor within the graph (depth-first, iterative: graphs can be deep).
    std::vector<impl_ptr> stack{root};
    std::unordered_set<tensor_impl*> seen{root.get()};
    while (!stack.empty()) {
      impl_ptr t = std::move(stack.back());
      stack.pop_back();
      order_.push_back(t);
      const auto& fn = t->ag->fn;
      if (!fn) continue;
      if (fn->released)
        throw invalid_argument("kiln::tensor::backward: the graph through " + fn->name +
                               " was freed by an earlier backward(); pass retain_graph = true to "
                               "the first call to go through it twice");
      for (const impl_ptr& in : fn->inputs) {
        if (!in) continue;
        consumers_[in.get()]++;
        if (seen.insert(in.get()).second) stack.push_back(in);
      }
    }
  }

  void run(const impl_ptr& root, const tensor& seed) {
    pending_[root.get()] = seed;
    drain(root);
    if (!retain_graph_)
      for (const impl_ptr& t : order_)
        if (t->ag && t->ag->fn) t->ag->fn->inputs.clear();
  }

  // deliver_early's work: input k of the running node gets its gradient now; if that was its
  // last consumer, everything it makes ready runs before the node's backward goes on.
  bool deliver(std::size_t k, const tensor& g) {
    if (!running_ || k >= running_->node->inputs.size() || running_->handed[k]) return false;
    const impl_ptr in = running_->node->inputs[k];
    if (!in) return false;
    running_->handed[k] = true;
    if (g.defined()) give(*running_->node, k, g);
    if (--consumers_[in.get()] == 0) {
      try {
        drain(in);
      } catch (...) {
        // Thrown by what the gradient completed (an accumulation, a hook, a later node's
        // backward, which named itself already), not by the running node: visit() rethrows
        // it as it is rather than as an error in the running node's gradient.
        early_error_ = std::current_exception();
        throw;
      }
    }
    return true;
  }

 private:
  struct running {
    const grad_node* node;
    std::vector<bool> handed;  // inputs whose gradient deliver() took already
  };

  // Runs `start` and whatever becomes ready after it, depth-first (last ready first).
  void drain(const impl_ptr& start) {
    std::vector<impl_ptr> ready{start};
    while (!ready.empty()) {
      impl_ptr t = std::move(ready.back());
      ready.pop_back();
      visit(t, ready);
    }
  }

  void give(const grad_node& fn, std::size_t k, const tensor& g) {
    const impl_ptr& in = fn.inputs[k];
    if (g.shape() != in->shape)
      throw shape_error("kiln::tensor::backward: the gradient of " + fn.name + " for input " +
                        std::to_string(k) + " has shape " + to_string(g.shape()) + ", the input " +
                        to_string(in->shape));
    add_into(pending_[in.get()], g.dtype() == in->dtype ? g : g.to(in->dtype));
  }

  void visit(const impl_ptr& t, std::vector<impl_ptr>& ready) {
    auto it = pending_.find(t.get());
    tensor g = it != pending_.end() ? std::move(it->second) : tensor();
    if (it != pending_.end()) pending_.erase(it);
    grad_meta& m = *t->ag;
    const std::shared_ptr<grad_node> fn = m.fn;
    if (!fn) {
      // Every consumer of the leaf ran: its gradient is complete. Accumulated now, not after
      // the whole graph, so post-accumulate hooks (data_parallel's bucket all-reduces) start
      // while the rest of backward is still being queued (PyTorch's AccumulateGrad does the
      // same). The order stays the engine's, the same on every run of the same graph.
      if (g.defined()) {
        accumulate_leaf(m, g, *t);
        // A copy: a hook may register or remove hooks.
        if (!m.post_accumulate.empty()) {
          const auto hooks = m.post_accumulate;
          for (const auto& h : hooks) h.fn(tensor(t));
        }
      }
      return;
    }
    running self{fn.get(), std::vector<bool>(fn->inputs.size(), false)};
    if (g.defined()) {
      if (log_enabled(log_level::trace))  // the arguments cost even when not logged
        logf(log_level::trace, "backward {} {}", fn->name, to_string(g.shape()));
      std::size_t readers = 0;
      for (const impl_ptr& in : fn->inputs) readers += in != nullptr;
      g = settle(g, readers);
      if (m.retain) m.grad = g.is_lazy() ? tensor(g).eval() : g;
      std::vector<tensor> gi;
      running* outer = std::exchange(running_, &self);
      try {
        gi = fn->backward(g, tensor(t));
      } catch (const error& e) {
        running_ = outer;
        if (early_error_) std::rethrow_exception(std::exchange(early_error_, nullptr));
        throw invalid_argument("kiln::tensor::backward: in the gradient of " + fn->name + ": " +
                               e.what());
      } catch (...) {
        running_ = outer;
        early_error_ = nullptr;
        throw;
      }
      running_ = outer;
      if (gi.size() != fn->inputs.size())
        throw invalid_argument("kiln::tensor::backward: the gradient of " + fn->name + " gave " +
                               std::to_string(gi.size()) + " gradients for " +
                               std::to_string(fn->inputs.size()) + " inputs");
      for (std::size_t k = 0; k < gi.size(); ++k)
        if (fn->inputs[k] && gi[k].defined() && !self.handed[k]) give(*fn, k, gi[k]);
    }
    for (std::size_t k = 0; k < fn->inputs.size(); ++k) {
      const impl_ptr& in = fn->inputs[k];
      if (in && !self.handed[k] && --consumers_[in.get()] == 0) ready.push_back(in);
    }
    if (!retain_graph_) {
      fn->released = true;
      fn->backward = nullptr;  // frees the saved tensors
    }
  }

  bool retain_graph_;
  std::unordered_map<tensor_impl*, int> consumers_;
  std::unordered_map<tensor_impl*, tensor> pending_;
  std::vector<impl_ptr> order_;  // every tensor of the graph, discovered once
  running* running_ = nullptr;
  std::exception_ptr early_error_;  // what deliver()'s drain threw, on its way out
};

thread_local sweep* t_sweep = nullptr;

bool deliver_early(std::size_t input, const tensor& gradient) {
  return t_sweep && t_sweep->deliver(input, gradient);
}

void run_backward(const tensor& root, const tensor& gradient, bool retain_graph) {
  tensor_impl& r = impl_of(root, "backward");
  if (!needs_grad(&r))
    throw invalid_argument(
        "kiln::tensor::backward: the tensor does not require a gradient (no input of the "
        "operations that made it was marked requires_grad_, or they ran under no_grad)");
  tensor seed = gradient;
  if (!seed.defined()) {
    if (numel_of(r.shape) != 1)
      throw shape_error("kiln::tensor::backward: a gradient is needed for a tensor of shape " +
                        to_string(r.shape) + " (only a single element implies 1)");
    seed = tensor::ones(r.dev, r.shape, r.dtype);
  } else if (seed.shape() != r.shape) {
    throw shape_error("kiln::tensor::backward: the gradient has shape " + to_string(seed.shape()) +
                      ", the tensor " + to_string(r.shape));
  }
  if (seed.dtype() != r.dtype) seed = seed.to(r.dtype);

  sweep s(root.impl(), retain_graph);
  no_grad off;  // the backward formulas are not recorded (no higher-order gradients)
  sweep* outer = std::exchange(t_sweep, &s);
  try {
    s.run(root.impl(), seed);
  } catch (...) {
    t_sweep = outer;
    throw;
  }
  t_sweep = outer;
}

}  // namespace detail

void tensor::backward(const tensor& gradient, bool retain_graph) const {
  detail::run_backward(*this, gradient, retain_graph);
}

}  // namespace kiln
