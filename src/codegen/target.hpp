// A codegen target: everything that differs between the dialects Kiln renders into, in one
// object per dialect (tinygrad's language classes). A backend names its target in its ABI table
// (kiln_backend::dialect); generators ask the target, never the backend's name.
//
//   const codegen::target& t = codegen::target_for(dev.impl()->api->dialect);
//   if (t.warp) source += t.warp->definitions;       // warp-level forms of a template
//   const std::uint64_t tile = t.tiles.group * t.tiles.scan_items;   // the launcher's view
//
// What a target holds:
//   - the kernel-language spelling: prelude of builtins, the hidden parameter of kernel bodies,
//     the entry emitter (or the inline-entry hooks for OpenCL C) and a respelling pass;
//   - warp primitives for generated kernels (null: templates take their local-memory forms);
//   - the ring-kernel primitive table (null: the target cannot host ring kernels);
//   - the tile policy that generated GPU kernels and their launchers share (CUB's policy types).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kernel_lang/parser.hpp"

namespace kiln::codegen {

// Tile and launch shapes of generated kernels. Templates print these numbers into the kernels
// and launchers size their grids from the same object, so the two cannot disagree.
struct tile_policy {
  std::uint32_t group = 256;                 // work-items per work-group (GPU templates)
  std::uint32_t map_items = 4;               // consecutive tiles of `group` elements per map group
  std::uint32_t reduce_items = 8;            // loads in flight per item in a reduction
  std::uint32_t reduce_group_elems = 1024;   // a reduction starts one group per this many
  std::uint32_t reduce_groups_per_unit = 8;  // ... and at most this many per compute unit
  std::uint32_t compact_items = 16;          // elements per item in look-back compaction
  std::uint32_t scan_items = 16;             // elements per item in look-back scans
  std::uint32_t lookback_window = 32;        // predecessors one look-back step reads (32s)
  std::uint32_t spin_ns = 256;        // look-back polling backs off up to this (where it can sleep)
  std::uint32_t stage_bytes = 40960;  // local memory for staging a tile's outputs
  std::uint32_t cpu_chunk_elems = 16384;  // CPU templates: elements per chunk, at least
  std::uint32_t cpu_chunks_per_unit = 4;  // ... and at most this many chunks per core

  std::uint64_t map_tile() const { return std::uint64_t(group) * map_items; }
  std::uint64_t compact_tile() const { return std::uint64_t(group) * compact_items; }
  std::uint64_t scan_tile() const { return std::uint64_t(group) * scan_items; }
};

// Applies "key=value,..." (KILN_TILE_POLICY, docs/query.md) to p; kiln::invalid_argument naming
// the item for an unknown key or a value out of range. target_for applies the environment's.
void apply_tile_policy(tile_policy& p, std::string_view spec);

// Warp-level primitives for generated kernels. `definitions` defines, for a full warp:
//   kiln__warp_shfl_up(x, d), kiln__warp_shfl_down(x, d), kiln__warp_shfl_xor(x, lane_mask)
//     (32- and 64-bit scalars)
//   kiln__warp_ballot(pred) -> uint32_t mask, kiln__warp_ffs(mask) -> 1-based lowest set bit
//   kiln__warp_popc(mask) -> set bits, kiln__warp_sync() (orders the warp's local memory)
//   kiln__backoff(ns): sleep about ns nanoseconds in a polling loop (spares the memory system)
struct warp_ops {
  std::uint32_t lanes;
  const char* definitions;
};

// Ring kernels (src/ring/): the protocol's loads, stores, fences and unit operations
// (ring_source.cpp lists them), and the opening of the entry point, which declares `unit` (this
// unit's number) and `staging` (`staging_bytes` of scratch per unit, or null).
struct ring_ops {
  std::uint32_t lanes;  // 32: a unit is a warp with shared staging; 1: a unit is a host thread
  const char* primitives;
  std::string (*open_entry)(std::uint64_t staging_bytes);
  bool has_offsetof;  // message layouts are also checked by static_assert on offsetof
};

struct target {
  const char* name;        // what a backend's ABI table names
  const char* prelude;     // the kernel language's builtins
  const char* body_param;  // inserted first in every kernel body's parameter list
  // Appends the backend entry point for kernel k to out. `checked`: the program is compiled
  // in checked mode, and the entry takes the hidden counts and error buffer after the range
  // (checked_params) and passes them to the body after body_param.
  void (*emit_entry)(std::string& out, const kernel_lang::kernel_decl& k, bool checked);
  // Targets whose kernels are their own entry points (OpenCL C: __local variables may only be
  // declared in a kernel function) leave emit_entry null. Instead the renderer replaces each
  // kernel's parameter list with emit_params and opens its body with emit_prologue, which
  // rebuilds the user's parameters and guards the launch range. Neither may emit a newline.
  void (*emit_params)(std::string& out, const kernel_lang::kernel_decl& k, bool checked) = nullptr;
  void (*emit_prologue)(std::string& out, const kernel_lang::kernel_decl& k,
                        bool checked) = nullptr;
  // Respells what the dialect lacks in the user's source, keeping every offset and line:
  // `blank` is the source with comments and literals blanked (same length).
  void (*respell)(std::string& source, const std::string& blank) = nullptr;
  // Checked mode: defines kiln__ck (kernel_lang/checked_access.hpp) for every pointer type.
  const char* checked_prelude = nullptr;
  const warp_ops* warp = nullptr;
  const ring_ops* ring = nullptr;
  tile_policy tiles{};
};

// The target named `name` (a backend's kiln_backend::dialect); kiln::unsupported naming it
// when there is none.
const target& target_for(std::string_view name);

// Each target file registers its target, so no list of targets exists in core code; a new
// dialect is one file. libkiln is a shared library: every registration runs when it loads.
//
//   const target_registration registered{cuda_target};
struct target_registration {
  explicit target_registration(const target& t) noexcept;
};

extern const target cuda_target;
extern const target cpp_target;
extern const target opencl_target;

// Name of the renamed kernel body: "kiln__body_<name>".
std::string body_name(const std::string& kernel);
// Checked mode's hidden parameters of a kernel body, after body_param: the error buffer, then
// one element count per pointer parameter ("KILN_GLOBAL uint64_t* kiln__err, uint64_t
// kiln__n0, ..."), and the same names as call arguments ("kiln__err, kiln__n0, ...").
std::string checked_params(const kernel_lang::kernel_decl& k);
std::string checked_args(const kernel_lang::kernel_decl& k);

// Name of the CPU backend's entry symbol for a kernel: "kiln_cpu_<name>".
std::string cpu_entry_name(const std::string& kernel);

}  // namespace kiln::codegen
