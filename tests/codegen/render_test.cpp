#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

#include "codegen/render_source.hpp"
#include "codegen/target.hpp"

using namespace kiln::codegen;
using kiln::kernel_lang::parse;
using testing::HasSubstr;

namespace {
constexpr const char* source =
    "// axpy\nKILN_KERNEL void axpy(KILN_GLOBAL float* y, float a) {\n  y[kiln_global_id(0)] *= "
    "a;\n}\n"
    "KILN_KERNEL void none() {}\n";
}

TEST(Render, CudaRenamesBodiesAndEmitsRangeGuardedEntries) {
  const std::string out = render(source, parse(source), "cuda");
  EXPECT_THAT(out, HasSubstr("KILN_KERNEL void kiln__body_axpy(const kiln_range_t& kiln__range, "
                             "KILN_GLOBAL float* y, float a)"));
  EXPECT_THAT(out, HasSubstr("KILN_KERNEL void kiln__body_none(const kiln_range_t& kiln__range)"));
  EXPECT_THAT(out, HasSubstr("extern \"C\" __global__ void axpy(KILN_GLOBAL float* kiln__p0, float "
                             "kiln__p1, kiln_range_t kiln__range)"));
  EXPECT_THAT(out, HasSubstr("kiln_global_id(0) >= kiln__range.n[0]"));
  EXPECT_THAT(out, HasSubstr("#line 1 \"kernel.kiln\"\n// axpy\n"));
}

TEST(Render, CppEmitsVisibleEntriesWithHiddenItem) {
  const std::string out = render(source, parse(source), "cpp");
  EXPECT_THAT(out, HasSubstr("kiln__body_axpy(const kiln_item& kiln__it, KILN_GLOBAL float* y"));
  EXPECT_THAT(out, HasSubstr("void kiln_cpu_axpy(void* const* kiln__a"));
  EXPECT_THAT(out, HasSubstr("kiln_cpu_none"));
}

TEST(Render, KeepsUserLineNumbers) {
  const std::string out = render(source, parse(source), "cpp");
  const auto start =
      out.find("#line 1 \"kernel.kiln\"\n") + std::string("#line 1 \"kernel.kiln\"\n").size();
  const auto end = out.find("#line 1 \"kiln_entry_points\"");
  const std::string user = out.substr(start, end - start);
  EXPECT_EQ(std::count(user.begin(), user.end(), '\n'),
            std::count(source, source + std::strlen(source), '\n') + 1);
}

TEST(Render, CitedLinesFromCompilerLogs) {
  EXPECT_EQ(cited_lines("kernel.kiln(7): error: x\nkernel.kiln(7): note\nkernel.kiln(3): error"),
            (std::vector<int>{7, 3}));
  EXPECT_EQ(cited_lines("kernel.kiln:12:5: error: y\nkiln_entry_points:3:1: error"),
            (std::vector<int>{12}));
  EXPECT_TRUE(cited_lines("no lines here").empty());
}

TEST(Render, UnknownTargetIsUnsupported) {
  EXPECT_THROW(target_for("metal"), kiln::unsupported);
  EXPECT_THROW(render(source, parse(source), "metal"), kiln::unsupported);
}

// OpenCL C: the kernel is its own entry point. Buffers arrive as (cl_mem, offset) pairs and
// scalars in kernel-argument types (bool as uchar), the prologue rebuilds the user's
// parameters and guards the range, `long long` becomes `long`, and every user line keeps its
// number (a parameter list spanning lines is replaced by one line plus the same newlines).
TEST(Render, OpenclInlinesEntriesAndKeepsLineNumbers) {
  const std::string src =
      "KILN_KERNEL void k(KILN_GLOBAL float* KILN_RESTRICT y,\n"
      "                   bool flag, long long n) {\n"
      "  unsigned long long wide = (long long)n;  // long long in a comment stays\n"
      "  MARK_LINE_4;\n"
      "}\n";
  const std::string out = render(src, parse(src), "opencl");
  EXPECT_THAT(out, HasSubstr("KILN_KERNEL void k(__global void* kiln__b0, ulong kiln__o0, "
                             "uchar kiln__p1, int64_t kiln__p2, kiln_range_t kiln__range"));
  EXPECT_THAT(out, HasSubstr("__global float* restrict y = (__global float* restrict)"
                             "((__global char*)kiln__b0 + kiln__o0);"));
  EXPECT_THAT(out, HasSubstr("bool flag = (bool)kiln__p1;"));
  EXPECT_THAT(out, HasSubstr("if (kiln_global_id(0) >= kiln__range.n[0]"));
  EXPECT_THAT(out, HasSubstr("unsigned long      wide = (long     )n;  // long long in a comment"));
  EXPECT_EQ(out.find("kiln_entry_points"), std::string::npos) << "no separate entry wrappers";
  // Line 4 of the user's source is line 4 after the #line directive.
  const std::size_t directive = out.find("#line 1 \"kernel.kiln\"\n");
  ASSERT_NE(directive, std::string::npos);
  const std::size_t mark = out.find("MARK_LINE_4");
  ASSERT_NE(mark, std::string::npos);
  EXPECT_EQ(std::count(out.begin() + static_cast<std::ptrdiff_t>(directive),
                       out.begin() + static_cast<std::ptrdiff_t>(mark), '\n'),
            4);
}

// Checked mode: each target adds its checked prelude, the hidden counts and error buffer in
// every entry (after the range, in the launcher's order) and body, and keeps every user line.
TEST(Render, CheckedModeAddsCountsAndErrorBufferOnEveryTarget) {
  const std::string src =
      "KILN_KERNEL void k(KILN_GLOBAL float* y,\n"
      "                   float a, KILN_GLOBAL const float* x) {\n"
      "  y[kiln_global_id(0)] = a * x[kiln_global_id(0)];\n"
      "  MARK_LINE_4;\n"
      "}\n";
  const std::string cuda = render(src, parse(src), "cuda", true);
  EXPECT_THAT(cuda, HasSubstr("T* kiln__ck(T* p, uint64_t i, uint64_t n, uint64_t* err"));
  EXPECT_THAT(cuda, HasSubstr("kiln__body_k(const kiln_range_t& kiln__range, KILN_GLOBAL "
                              "uint64_t* kiln__err, uint64_t kiln__n0, uint64_t kiln__n2, "
                              "KILN_GLOBAL float* y"));
  EXPECT_THAT(cuda, HasSubstr("kiln_range_t kiln__range, uint64_t kiln__n0, uint64_t kiln__n2, "
                              "uint64_t* kiln__err) {"));
  EXPECT_THAT(cuda, HasSubstr("(kiln__range, kiln__err, kiln__n0, kiln__n2, kiln__p0"));
  const std::string cpp = render(src, parse(src), "cpp", true);
  EXPECT_THAT(cpp, HasSubstr("uint64_t kiln__n2; __builtin_memcpy(&kiln__n2, kiln__a[5]"));
  EXPECT_THAT(cpp, HasSubstr("uint64_t* kiln__err; __builtin_memcpy(&kiln__err, kiln__a[6]"));
  const std::string ocl = render(src, parse(src), "opencl", true);
  EXPECT_THAT(ocl, HasSubstr("kiln_range_t kiln__range, ulong kiln__n0, ulong kiln__n2, "
                             "__global void* kiln__eb, ulong kiln__eo"));
  EXPECT_THAT(ocl, HasSubstr("KILN__CK(float)"));
  for (const std::string* out : {&cuda, &cpp, &ocl}) {
    EXPECT_THAT(*out,
                HasSubstr("(*kiln__ck(x, (kiln_global_id(0)), kiln__n2, kiln__err, 2u, 3u))"));
    const std::size_t directive = out->find("#line 1 \"kernel.kiln\"\n");
    const std::size_t mark = out->find("MARK_LINE_4");
    ASSERT_NE(mark, std::string::npos);
    EXPECT_EQ(std::count(out->begin() + static_cast<std::ptrdiff_t>(directive),
                         out->begin() + static_cast<std::ptrdiff_t>(mark), '\n'),
              4);
  }
  // Unchecked output has none of it.
  EXPECT_THAT(render(src, parse(src), "cuda"), testing::Not(HasSubstr("kiln__ck")));
}
