// Pieces shared by the GPU kernel templates (kernels_gpu.cpp: map and reduce, and the
// dispatch; kernels_lookback.cpp: scan and compaction).
#pragma once

#include <cstdint>
#include <string>

#include "query/codegen.hpp"

namespace kiln::detail::q {

// "T0 o0[N]; T1 o1[N]; ": the element function's outputs, N items per work-item.
std::string out_arrays(const segment& seg, const char* n);
// ", &o0[idx], &o1[idx]"
std::string out_refs(const segment& seg, const char* idx);

// Items per work-item of the look-back kernel of seg (KQ_IT), from the policy.
std::uint32_t lookback_items(const segment& seg, const codegen::tile_policy& p);
// The kq_compact and kq_scan kernels in the target's best form.
// warp32: the device runs the target's warp primitives.
std::string compact_kernel(const segment& seg, const common_code& p, const codegen::target& t,
                           bool warp32);
std::string scan_kernel(const segment& seg, const common_code& p, const codegen::target& t,
                        bool warp32);

}  // namespace kiln::detail::q
