// CPU backend specifics: kernels loaded from memory stay distinct, the pool runs every group.
#include <gtest/gtest.h>

#include "kiln/kiln.hpp"

namespace {
std::string source(int value) {
  return "KILN_KERNEL void k(KILN_GLOBAL int32_t* out) { out[kiln_global_id(0)] = " +
         std::to_string(value) + "; }\n";
}
}  // namespace

// Regression: programs loaded through /proc/self/fd/N once aliased when N was reused, so a second
// program with the same kernel name silently ran the first one's code.
TEST(CpuProgram, ProgramsLoadedFromMemoryStayDistinct) {
  kiln::device cpu = kiln::device::get("cpu");
  kiln::queue q(cpu);
  std::vector<kiln::kernel> kernels;
  for (int v = 1; v <= 5; ++v)
    kernels.push_back(kiln::program::compile(cpu, source(v), "-DKILN_TEST_UNIQUE=" + std::to_string(v))
                          .get_kernel("k"));
  kiln::buffer<int32_t> out(cpu, 64);
  for (int v = 1; v <= 5; ++v) {
    out.fill(-1);
    kernels[static_cast<std::size_t>(v - 1)].launch(q, kiln::range(64), out);
    for (int32_t x : out.to_vector()) ASSERT_EQ(x, v);
  }
}

TEST(CpuProgram, EveryWorkGroupRunsOnTheThreadPool) {
  kiln::device cpu = kiln::device::get("cpu");
  kiln::queue q(cpu);
  auto k = kiln::program::compile(cpu, R"(
    KILN_KERNEL void count(KILN_GLOBAL uint64_t* hits, KILN_GLOBAL uint32_t* seen) {
      kiln_atomic_add(hits, (uint64_t)1);
      seen[kiln_global_id(0)] += 1;
    })").get_kernel("count");
  const std::uint64_t n = 1000003;  // prime: the last group is partial
  kiln::buffer<uint64_t> hits(cpu, 1);
  kiln::buffer<uint32_t> seen(cpu, n);
  hits.fill(0);
  seen.fill(0);
  k.launch(q, kiln::range(n), kiln::local_size(7), hits, seen);
  EXPECT_EQ(hits.to_vector()[0], n);
  for (uint32_t s : seen.to_vector()) ASSERT_EQ(s, 1u);
}
