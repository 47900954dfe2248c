#include "tensor/fallback.hpp"

#include <unordered_map>

#include "kiln/ir/node.hpp"
#include "tensor/placement.hpp"

namespace kiln::detail {
namespace {

using clone_map = std::unordered_map<const tensor_impl*, std::shared_ptr<tensor_impl>>;

// A copy of node x for device `to`: op nodes re-pointed there with their operands copied in
// turn (each once: the expression is a DAG); stored nodes share x's storage until
// move_storage copies it. Outside kiln::automatic and the autograd graph.
std::shared_ptr<tensor_impl> clone_node(const tensor_impl& x, const device& to, clone_map& done,
                                        std::vector<tensor_impl*>& stored) {
  auto c = std::make_shared<tensor_impl>(x);
  c->ag = nullptr;
  c->automatic = false;
  if (x.kind == tensor_kind::stored) {
    stored.push_back(c.get());
    return c;
  }
  c->dev = to;
  for (auto& a : c->args) {
    auto it = done.find(a.get());
    if (it == done.end()) it = done.emplace(a.get(), clone_node(*a, to, done, stored)).first;
    a = it->second;
  }
  return c;
}

const device* operand_device(const std::vector<tensor>& xs) {
  for (const tensor& x : xs)
    if (x.impl()) return &x.get_device();
  return nullptr;
}

}  // namespace

void materialise_falling_back(tensor_impl& t, const fallback& chain,
                              void (*evaluate)(tensor_impl&)) {
  tensor_impl* target = &t;
  std::shared_ptr<tensor_impl> copy;  // the expression moved to another device
  for (;;) {
    try {
      evaluate(*target);
      break;
    } catch (const error& e) {
      const device from = target->dev;
      const device* next = chain.next(from);
      if (!fallback::moves(e) || !next) throw;
      clone_map done;
      std::vector<tensor_impl*> stored;
      copy = clone_node(*target, *next, done, stored);
      move_storage(stored, *next);  // the inputs, through the host where need be
      fallback::note_move(std::string("tensor ") + ir::info(target->o).name, from, *next, e);
      target = copy.get();
    }
  }
  if (target == &t) return;
  t.dev = target->dev;
  t.kind = tensor_kind::stored;
  t.mem = target->mem;
  t.strides = target->strides;
  t.offset = target->offset;
  t.args.clear();
}

tensor run_op_falling_back(const char* what, std::vector<tensor> xs,
                           const std::function<tensor(const std::vector<tensor>&)>& op) {
  const fallback* chain = fallback_scope::current();
  if (!chain) return op(xs);
  for (;;) {
    try {
      return op(xs);
    } catch (const error& e) {
      // Where it ran: the operands' device (kiln::automatic ones were moved there).
      const device* at = operand_device(xs);
      const device* next = at ? chain->next(*at) : nullptr;
      if (!fallback::moves(e) || !next) throw;
      const device from = *at;
      for (tensor& x : xs)
        if (x.impl()) x = x.to(*next);
      fallback::note_move(what, from, *next, e);
    }
  }
}

}  // namespace kiln::detail
