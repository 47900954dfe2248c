// The row kernels behind layer_norm and rms_norm (cache "tensor_layer_norm"), in the kernel
// language. Statistics are computed in the accumulation type (float; double for f64) whatever
// the storage type: 16-bit values are loaded as float and rounded once at the store.
//
//   forward:  per row, mean (layer norm only) and then the variance about it (two passes over
//             the row), rstd = 1 / sqrt(var + eps), then the output. With lanes, rows of up to
//             32 elements per lane are kept in registers (read once), else re-read from cache;
//             rows of one warp fold by shuffles alone;
//   backward: per row, sum(g xhat) and sum(g) with g = dy w, then dx = rstd (g - (sum(g) +
//             xhat sum(g xhat)) / n) (rms: without sum(g));
//   params:   dweight / dbias partial column sums over chunks of rows (no atomics: the
//             partials are summed in a fixed order, so runs repeat): one item per (chunk,
//             column) where lanes > 1 (coalesced on a GPU), else one item per chunk walking its
//             rows in order (sequential, vectorisable on the CPU). On warp32 devices the
//             backward writes them itself (norm_kernel_key::fuse);
//   params_sum: the partials' columns summed into dweight / dbias in a fixed order (has_w /
//             has_b say which): one item per column (lanes 1), or 32 columns per group of 256
//             (lanes > 1, devices with barriers).
//
// Rows are folded by `lanes` work-items of a 256-item group through local memory on devices
// with barriers (rows of 64 elements or more), else by one work-item per row.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "kiln/kernel.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

enum class norm_kernel_kind : std::uint8_t { forward, backward, params, params_sum };

struct norm_kernel_key {
  norm_kernel_kind kind;
  scalar_type x;        // input / output / gradient storage
  scalar_type w;        // weight and bias storage (x's, or f32 with 16-bit x)
  bool rms;             // rms_norm: no mean
  bool has_w;           // forward, backward: a weight; params: dweight wanted
  bool has_b;           // forward: a bias; params: dbias wanted
  std::uint32_t lanes;  // work-items per row (1: no barriers); params: the form, as above
  // forward, backward with lanes > 1: elements per lane kept in registers (the row read once
  // from memory), 0: re-read for each pass (from cache)
  std::uint32_t cap = 0;
  // cached forms with 16-bit x: 8 when each lane moves x, dy, y and dx as 16-byte words of 8
  // consecutive elements (rows of a multiple of 8, starting on a word), 1: element by element
  std::uint32_t vec = 1;
  // forward, backward with lanes > 1 on warp32 devices: rows folded by warp shuffles, then one
  // barrier (prepend the target's warp definitions), else by a tree in local memory
  bool warp = false;
  // cached forward with vec 8: the weight and bias also read as words (8 elements per word:
  // one uint4 of 16-bit or two float4 of f32 parameters; their offsets on a word boundary)
  bool wvec = false;
  // cached backward with lanes > 1: also the parameter gradients' partial column sums, in the
  // same pass over dy and x (bit 1: dweight, sum dy xhat; bit 2: dbias, sum dy). The kernel
  // runs on G groups (norm_fused_groups) that walk row blocks g, g + G, ...; each writes
  // partial row g of [G, n].
  std::uint8_t fuse = 0;
};

// The accumulation type of x's storage (f64 for f64, else f32): mean and rstd have it.
scalar_type norm_acc_type(scalar_type x);
// Work-items per row for rows of n elements on dev.
std::uint32_t norm_lanes(const device& dev, std::int64_t n);
// The forward's work-items per row: norm_lanes, but one warp (32) for 16-bit rows of 513-1024
// read in words, each lane keeping its 32 elements (4 words) in registers: no barrier, and
// twice the rows in flight per work-group (H200: [65536, 1024] bf16 1,743-1,803 -> 2,149-2,230
// GB/s); f32 rows of 1024 too on warp32 devices.
std::uint32_t norm_forward_lanes(const device& dev, scalar_type x, std::int64_t n,
                                 std::int64_t offset);
// Elements per lane to keep in registers for rows of n over `lanes` (0: too long to keep), in
// whole words of `vec`.
std::uint32_t norm_cap(std::uint32_t lanes, std::int64_t n, std::uint32_t vec = 1);
// Whether forward and backward kernels over `lanes` lanes fold rows by warp shuffles on dev.
bool norm_warp(const device& dev, std::uint32_t lanes);
// The cached forms' word size for x of type x, rows of n over `lanes` (norm_lanes), and the
// element offsets of the 16-bit arrays read (8 or 1, as norm_kernel_key::vec).
std::uint32_t norm_vec(scalar_type x, std::uint32_t lanes, std::int64_t n,
                       std::initializer_list<std::int64_t> offsets);
// The fused backward's (norm_kernel_key::fuse) work-items per row for rows of n elements of x
// starting at the element offsets given, or 0 where the two-kernel form stays: norm_lanes
// widened until each lane keeps at most 8 slots (16 over 256 lanes where the sums are f32 and
// the row is read element by element), as each item keeps two partial sums per slot in local
// memory. Warp32 devices only (see the source).
std::uint32_t norm_fused_lanes(const device& dev, scalar_type x, std::int64_t n,
                               std::initializer_list<std::int64_t> offsets);
// The fused backward's groups for `rows` rows over `lanes` lanes: about four per compute unit
// (fewer partial rows to sum), never more than the row blocks.
std::int64_t norm_fused_groups(const device& dev, std::uint32_t lanes, std::int64_t rows);
std::string norm_source(const norm_kernel_key& k);
// The params and params_sum kinds' texts (layer_norm_params.cpp).
std::string norm_params_source(const norm_kernel_key& k);

// Launches the kernel k over `rows` rows (forward, backward), `items` items (params) or
// `groups` groups (a fused backward) with the arguments in the order of its parameters
// (buffers, then the scalars).
void launch_norm(const device& dev, const norm_kernel_key& k, std::vector<arg_binding> args,
                 std::int64_t rows_or_items);

}  // namespace kiln::detail
