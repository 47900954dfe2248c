// Copies between buffers of two devices (queue::copy with a buffer of each): the backend's
// peer copy where the hardware allows (CUDA: cuMemcpyPeerAsync over NVLink/PCIe once
// cuCtxEnablePeerAccess succeeded), else staged through pinned host memory.
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/buffer.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {
namespace {

constexpr std::uint64_t stage_chunk = 32ull << 20;  // bounds the pinned staging buffer

struct pinned_block {
  device dev;
  void* p = nullptr;
  pinned_block(const device& d, std::uint64_t bytes) : dev(d), p(host_alloc(d, bytes)) {}
  ~pinned_block() { host_free(dev, p); }
  pinned_block(const pinned_block&) = delete;
  pinned_block& operator=(const pinned_block&) = delete;
};

// Same backend and the plugin copies peer to peer, on q. Kiln has no event wait across devices,
// so the other device's side is ordered here: its queues that used the other buffer finish
// first, and when the destination is the other device's the copy is complete on return (its
// later work needs no wait), as with the staged path. A copy into q's own device stays
// asynchronous on q.
bool try_peer(queue_impl& q, memory_impl& dst, std::uint64_t dst_off, memory_impl& src,
              std::uint64_t src_off, std::uint64_t bytes) {
  const kiln_backend& api = *q.dev->api;
  if (dst.dev->api != src.dev->api || !KILN_BACKEND_HAS(&api, copy_peer)) return false;
  memory_impl& other = q.dev == src.dev ? dst : src;
  finish_users(other);  // the staged path, if this falls back, finds them idle
  const kiln_status st = api.copy_peer(q.handle, dst.dev->handle(), {dst.handle, dst_off},
                                       src.dev->handle(), {src.handle, src_off}, bytes);
  if (st == KILN_ERR_UNSUPPORTED) return false;  // no peer path: stage
  check(api, st, "copying between devices (peer to peer)");
  note_queue_use(dst, q);
  note_queue_use(src, q);
  if (&other == &dst)
    check(api, api.queue_finish(q.handle), "copying between devices (peer to peer)");
  return true;
}

// Through pinned host memory, chunk by chunk: q does its own device's half; the other device's
// default queue the other half, after every queue that used that buffer. Complete on return.
void staged(queue_impl& q, memory_impl& dst, std::uint64_t dst_off, memory_impl& src,
            std::uint64_t src_off, std::uint64_t bytes) {
  const bool q_is_src = q.dev == src.dev;
  memory_impl& other = q_is_src ? dst : src;
  finish_users(other);
  queue_impl& oq = *other.public_device.default_queue().impl();
  queue_impl& sq = q_is_src ? q : oq;
  queue_impl& dq = q_is_src ? oq : q;
  pinned_block stage(src.public_device, std::min(bytes, stage_chunk));
  for (std::uint64_t done = 0; done < bytes;) {
    const std::uint64_t n = std::min(bytes - done, stage_chunk);
    copy_d2h(sq, stage.p, src, src_off + done, n);
    check(*sq.dev->api, sq.dev->api->queue_finish(sq.handle), "copying between devices (staged)");
    copy_h2d(dq, dst, dst_off + done, stage.p, n);
    check(*dq.dev->api, dq.dev->api->queue_finish(dq.handle), "copying between devices (staged)");
    done += n;
  }
}

}  // namespace

void copy_between_devices(queue_impl& q, memory_impl& dst, std::uint64_t dst_off, memory_impl& src,
                          std::uint64_t src_off, std::uint64_t bytes) {
  if (q.dev != dst.dev && q.dev != src.dev)
    throw invalid_argument("copy between devices: the queue belongs to " + q.dev->id +
                           ", neither the source's " + src.dev->id + " nor the destination's " +
                           dst.dev->id);
  q.dev->check_alive(q.gen, "copy between devices");
  src.dev->check_alive(src.gen, "copy between devices");
  dst.dev->check_alive(dst.gen, "copy between devices");
  if (!try_peer(q, dst, dst_off, src, src_off, bytes)) staged(q, dst, dst_off, src, src_off, bytes);
}

bool peer_access(device_impl& a, device_impl& b) {
  if (&a == &b) return true;
  if (a.api != b.api || !KILN_BACKEND_HAS(a.api, peer_access)) return false;
  const kiln_status st = a.api->peer_access(a.handle(), b.handle());
  if (st == KILN_ERR_UNSUPPORTED) return false;
  check(*a.api, st, "enabling peer access");
  return true;
}

}  // namespace kiln::detail

namespace kiln {
bool peer_access(const device& a, const device& b) {
  if (!a.impl() || !b.impl()) detail::throw_empty_handle("kiln::peer_access", "device");
  return detail::peer_access(*a.impl(), *b.impl());
}
}  // namespace kiln
