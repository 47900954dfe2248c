// Queries under a kiln::fallback_scope: a failure that moves re-runs the query on the next
// device of the chain, its device-resident inputs copied there through the host.
#include "query/fallback.hpp"

#include <vector>

#include "kiln/buffer.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {

namespace {

// One copy per distinct allocation: zipped inputs may share one.
void move_inputs(query_desc& d, const device& to) {
  std::vector<std::pair<memory_impl*, std::shared_ptr<memory_impl>>> moved;
  for (input& in : d.inputs) {
    if (in.on_host || !in.mem || in.mem->dev == to.impl()) continue;
    std::shared_ptr<memory_impl> copy;
    for (auto& [from, made] : moved)
      if (from == in.mem.get()) copy = made;
    if (!copy) {
      memory_impl& src = *in.mem;
      std::vector<std::byte> host(src.bytes);
      try {
        finish_users(src);
        queue& q = src.public_device.default_queue();
        copy_d2h(*q.impl(), host.data(), src, 0, src.bytes);
        q.finish();
      } catch (const device_lost& e) {
        throw device_lost(std::string("kiln::fallback: the query's input lives on ") + src.dev->id +
                          ", which is lost; its data cannot be copied to " + to.id() + " (" +
                          e.what() + ")");
      }
      copy = allocate(to, src.bytes);
      copy_h2d(*to.default_queue().impl(), *copy, 0, host.data(), src.bytes);
      to.default_queue().finish();
      moved.emplace_back(&src, copy);
    }
    in.mem = copy;
  }
  d.dev = to;
  d.where = placement::fixed;
}

}  // namespace

void run_falling_back(query_desc& d, const fallback& chain,
                      const std::function<void(query_desc&)>& run) {
  query_desc original = d;  // prepare() rewrites d (staged host inputs, the chosen device)
  for (;;) {
    try {
      run(d);
      return;
    } catch (const error& e) {
      if (!fallback::moves(e)) throw;
      const device from = d.dev.impl() ? d.dev : original.dev;
      const device* to = from.impl() ? chain.next(from) : nullptr;
      if (!to) throw;
      fallback::note_move("kiln::query", from, *to, e);
      d = original;
      move_inputs(d, *to);
      original = d;
    }
  }
}

}  // namespace kiln::detail::q
