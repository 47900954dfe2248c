#include "kiln/query/host_output.hpp"

#include <algorithm>
#include <deque>
#include <utility>

#include "query/host_staging.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {
namespace {

// Later work on `q` waits for everything queued so far on src's other queues (its producers).
void after_users(memory_impl& src, queue& q) {
  std::vector<std::shared_ptr<queue_impl>> users;
  {
    std::lock_guard lock(src.mu);
    users = src.users;
  }
  for (auto& u : users)
    if (u != q.impl()) q.wait(queue(u).record());
}

struct in_flight {
  slot_lease slot;
  std::uint64_t off, len;  // of the chunk, from the start of the transfer
};

}  // namespace

void read_to_host(memory_impl& src, std::uint64_t offset, std::uint64_t bytes,
                  void* (*destination)(void* ctx), void* ctx) {
  const host_transfer_config c = host_transfer();
  if (bytes == 0) {
    destination(ctx);
    return;
  }
  if (const void* p = host_address(src, c)) {  // device memory is host memory: one copy
    finish_users(src);
    parallel_copy(destination(ctx), static_cast<const char*>(p) + offset, bytes, c);
    return;
  }
  const device& dev = memory_device(src);
  staging_pool& pool = staging_pool::of(dev);
  queue& cq = pool.d2h();
  after_users(src, cq);
  if (direct_device(dev, c)) {  // a CPU device's "DMA" is a memcpy: staging would add one
    copy_d2h(*cq.impl(), destination(ctx), src, offset, bytes);
    cq.record().wait();
    return;
  }
  const std::uint64_t chunk =
      std::min(std::max<std::uint64_t>(c.chunk_bytes, 1), pool.slot_bytes());
  std::uint64_t next = 0;  // the first byte no DMA has been asked for
  std::deque<in_flight> chunks;
  const auto issue = [&](slot_lease s) {
    const std::uint64_t len = std::min(chunk, bytes - next);
    s.submitted(cq);
    copy_d2h(*cq.impl(), s->p, src, offset + next, len);
    s.done(cq);
    chunks.push_back(in_flight{std::move(s), next, len});
    next += len;
  };
  // As many chunks in flight as free slots allow (at least one: no waiting on other queries
  // while holding slots), then the caller allocates its result meanwhile.
  issue(slot_lease(pool, pool.acquire()));
  while (next < bytes && chunks.size() < staging_pool::max_slots)
    if (staging_slot* s = pool.try_acquire())
      issue(slot_lease(pool, s));
    else
      break;
  auto* dst = static_cast<char*>(destination(ctx));
  while (!chunks.empty()) {
    in_flight f = std::move(chunks.front());
    chunks.pop_front();
    f.slot->busy->wait();
    parallel_copy(dst + f.off, f.slot->p, f.len, c);
    if (next < bytes) issue(std::move(f.slot));  // the slot's next chunk
  }
}

void copy_to_host(memory_impl& src, std::uint64_t offset, void* dst, std::uint64_t bytes) {
  const device& dev = memory_device(src);
  const host_transfer_config c = host_transfer();
  if (bytes && !host_address(src, c) && (pinned_for(dev, dst, bytes) || direct_device(dev, c))) {
    queue& cq = staging_pool::of(dev).d2h();
    after_users(src, cq);
    copy_d2h(*cq.impl(), dst, src, offset, bytes);
    cq.record().wait();
    return;
  }
  read_to_host(
      src, offset, bytes, [](void* p) { return p; }, dst);
}

}  // namespace kiln::detail::q
