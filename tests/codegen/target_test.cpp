// Codegen targets: each backend's dialect name finds its target; what a target offers (warp
// primitives, ring primitives) is what generators branch on; the CUDA forms compile with NVRTC.
#include "codegen/target.hpp"

#include <gtest/gtest.h>

#include <kiln/kiln.hpp>

#include "runtime/runtime.hpp"

namespace {
using namespace kiln::codegen;

TEST(Target, EveryLoadedBackendHasItsTarget) {
  for (const auto* b : {&cpp_target, &cuda_target, &opencl_target})
    EXPECT_EQ(&target_for(b->name), b) << b->name;
  for (const auto& b : kiln::detail::registry::get().backends) {
    if (!b->api) continue;
    EXPECT_NO_THROW(target_for(b->api->dialect)) << b->name << " names " << b->api->dialect;
  }
}

TEST(Target, CapabilitiesAreTheTargets) {
  // Warp forms only where 32-lane warp primitives exist; rings only where the ring protocol's
  // primitives exist (OpenCL has no system-scope atomics on mapped host memory).
  ASSERT_NE(cuda_target.warp, nullptr);
  EXPECT_EQ(cuda_target.warp->lanes, 32u);
  ASSERT_NE(opencl_target.warp, nullptr);  // used where a device reports feature::warp32
  EXPECT_EQ(opencl_target.warp->lanes, 32u);
  EXPECT_EQ(cpp_target.warp, nullptr);
  ASSERT_NE(cuda_target.ring, nullptr);
  ASSERT_NE(cpp_target.ring, nullptr);
  EXPECT_EQ(cuda_target.ring->lanes, 32u);
  EXPECT_EQ(cpp_target.ring->lanes, 1u);
  EXPECT_EQ(opencl_target.ring, nullptr);
  EXPECT_NE(cuda_target.ring->open_entry(512).find("[512]"), std::string::npos);
}

TEST(Target, TilePolicyIsConsistent) {
  for (const auto* t : {&cpp_target, &cuda_target, &opencl_target}) {
    const tile_policy& p = t->tiles;
    EXPECT_EQ(p.compact_tile(), std::uint64_t(p.group) * p.compact_items) << t->name;
    EXPECT_EQ(p.scan_tile(), std::uint64_t(p.group) * p.scan_items) << t->name;
    // The warp forms of the block scan need whole warps in a group.
    if (t->warp) {
      EXPECT_EQ(p.group % t->warp->lanes, 0u) << t->name;
    }
    EXPECT_GT(p.stage_bytes, 0u);
  }
}

// The warp primitives compile with NVRTC (CI has NVRTC without a GPU).
TEST(Target, CudaWarpPrimitivesCompile) {
  bool cuda = false;
  for (const kiln::backend_status& b : kiln::backends()) cuda |= b.name == "cuda" && b.loaded;
  if (!cuda) GTEST_SKIP() << "the CUDA plugin (NVRTC) is not loaded";
  const std::string src = std::string(cuda_target.warp->definitions) + R"(
KILN_KERNEL void warp_ops(KILN_GLOBAL uint64_t* out, KILN_GLOBAL const double* in) {
  const uint64_t i = kiln_global_id(0);
  const double up = kiln__warp_shfl_up(in[i], 1u);
  const uint64_t down = kiln__warp_shfl_down(out[i], 2u);
  const uint32_t m = kiln__warp_ballot(up > 0.0);
  out[i] = down + kiln__warp_ffs(m);
})";
  EXPECT_NO_THROW(kiln::compile_only("cuda", "sm_90", src));
}

}  // namespace

// KILN_TILE_POLICY's parser: known keys set their fields; anything else is refused by name.
TEST(Target, TilePolicyOverrides) {
  kiln::codegen::tile_policy p;
  kiln::codegen::apply_tile_policy(
      p, "group=512,compact_items=24,scan_items=12,lookback_window=64,spin_ns=0");
  EXPECT_EQ(p.group, 512u);
  EXPECT_EQ(p.compact_items, 24u);
  EXPECT_EQ(p.scan_items, 12u);
  EXPECT_EQ(p.lookback_window, 64u);
  EXPECT_EQ(p.spin_ns, 0u);
  for (const char* bad : {"tiles=4", "group=100", "group=0", "scan_items=2000", "scan_items=x",
                          "compact_items=-1", "spin_ns=", "lookback_window=48", "group"}) {
    kiln::codegen::tile_policy q;
    try {
      kiln::codegen::apply_tile_policy(q, bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const kiln::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
    }
  }
}
