// Text of the decoupled look-back (as CUB's single-pass scan, Merrill & Garland 2016), shared by
// the scan and compaction templates in kernels_lookback.cpp.
//
// Tile t publishes its own aggregate early (flag 1), then walks back over its predecessors 32
// at a time, combining aggregates until it meets an inclusive prefix (flag 2), and publishes its
// own inclusive prefix. Memory ordering: a value is stored, then kiln_mem_fence() (device
// scope), then the status word with a volatile store; readers load the status word with a
// volatile load, fence, then load the value through a volatile pointer (bypassing L1). Packed
// forms put flag, epoch and value in one 64-bit word stored and loaded whole (no fence). Status
// words carry an epoch (status = epoch << 2 | flag) so the arrays never need clearing between
// queries; tiles are taken in blockIdx order, which the hardware dispatches in increasing order,
// so every predecessor a tile waits for is already running.
//
// What the pieces expect in scope (names of the generated kernel):
//   kq_lb_t (struct {v; h}), kq_lb_id(), kq_lb_op(a, b), kq_lb_load(p)     the scanned value
//   kq_t (thread in the tile), kq_tile (the tile), kq_done, kq_prefix      (local memory)
//   block scans: kq_run; the warp form also kq_lane, kq_warp and kq_sh[KQ_B / 32]
//   publish / walk_*: kq_total, and the parameters of `params`
#pragma once

#include <string>

namespace kiln::detail::q::lookback {

extern const char* const block_scan_warp;    // shuffles within warps, warp totals in kq_sh
extern const char* const block_scan_local;   // local memory and barriers only (kq_sh[KQ_B])
extern const char* const publish;            // thread 0 publishes the tile's aggregate
extern const char* const walk_warp;          // warp 0 walks back: ballot, shuffle fold
extern const char* const walk_local;         // ... portable: kq_lbv / kq_lbf in local memory
extern const char* const shuffle;            // kq_lb_shfl_up / _down for the warp forms
extern const char* const fenced;             // kq_lb_put / kq_lb_get: value, fence, status word
extern const char* const packed_count;       // ... counts: 48-bit value in one 64-bit word
std::string packed32(const std::string& A);  // ... 4-byte values of type A in one 64-bit word
extern const char* const params;             // the kernel parameters the protocol reads

}  // namespace kiln::detail::q::lookback
