// Checked mode's rewrite of buffer accesses (kernel_lang/checked_access.hpp): the exact text,
// what it leaves alone, and kept line numbers.
#include "kernel_lang/checked_access.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>

using kiln::kernel_lang::parse;
using kiln::kernel_lang::rewrite_checked_accesses;
using testing::HasSubstr;
using testing::Not;

namespace {
std::string rewrite(const std::string& src) { return rewrite_checked_accesses(src, parse(src)); }
long lines(const std::string& s) { return std::count(s.begin(), s.end(), '\n'); }
}  // namespace

TEST(CheckedAccess, RewritesPointerParameterIndexing) {
  const std::string src =
      "KILN_KERNEL void k(KILN_GLOBAL float* y, float a, KILN_GLOBAL const float* x) {\n"
      "  y[kiln_global_id(0)] = a * x[kiln_global_id(0)];\n"
      "}\n";
  EXPECT_EQ(rewrite(src),
            "KILN_KERNEL void k(KILN_GLOBAL float* y, float a, KILN_GLOBAL const float* x) {\n"
            "  (*kiln__ck(y, (kiln_global_id(0)), kiln__n0, kiln__err, 0u, 2u)) = a * "
            "(*kiln__ck(x, (kiln_global_id(0)), kiln__n2, kiln__err, 2u, 2u));\n"
            "}\n");
}

TEST(CheckedAccess, NestedIndicesAndIndicesOverSeveralLines) {
  const std::string src =
      "KILN_KERNEL void k(KILN_GLOBAL float* y, KILN_GLOBAL const int* p) {\n"
      "  y[p[0]] = y [\n"
      "    1];\n"
      "}\n";
  const std::string out = rewrite(src);
  EXPECT_THAT(out, HasSubstr("(*kiln__ck(y, ((*kiln__ck(p, (0), kiln__n1, kiln__err, 1u, 2u))), "
                             "kiln__n0, kiln__err, 0u, 2u))"));
  EXPECT_THAT(out, HasSubstr("(*kiln__ck(y , (\n    1), kiln__n0, kiln__err, 0u, 2u))"));
  EXPECT_EQ(lines(out), lines(src));
}

TEST(CheckedAccess, LeavesCommentsLiteralsLocalsMembersAndHelpersAlone) {
  const std::string src =
      "KILN_FUNC float get(KILN_GLOBAL const float* y) { return y[0]; }\n"
      "KILN_KERNEL void k(KILN_GLOBAL float* y) {\n"
      "  float t[2]; t[0] = 1;  // y[1] in a comment\n"
      "  const char* s = \"y[2]\"; const char c = ']';\n"
      "  struct { float* y; } h; (void)h.y; (void)(&h)->y;\n"
      "  float* z = y + 1; z[0] = *(y + 2);\n"
      "  my[0]; y_[0];\n"
      "}\n";
  const std::string out = rewrite(src);
  EXPECT_THAT(out, HasSubstr("{ return y[0]; }"));  // the helper
  EXPECT_THAT(out, HasSubstr("t[0] = 1;  // y[1] in a comment"));
  EXPECT_THAT(out, HasSubstr("\"y[2]\"; const char c = ']';"));
  EXPECT_THAT(out, HasSubstr("z[0] = *(y + 2);"));  // pointer arithmetic: not covered
  EXPECT_THAT(out, HasSubstr("my[0]; y_[0];"));
  EXPECT_THAT(out, Not(HasSubstr("kiln__ck")));
}

TEST(CheckedAccess, ParametersTheBodyMovesStayUnchecked) {
  for (const char* move : {"y += 2;", "y = y + 1;", "++y;", "y--;", "y -= 1;"}) {
    const std::string src = std::string(
                                "KILN_KERNEL void k(KILN_GLOBAL float* y, KILN_GLOBAL "
                                "float* x) {\n  ") +
                            move + "\n  y[0] = x[0];\n}\n";
    const std::string out = rewrite(src);
    EXPECT_THAT(out, HasSubstr("y[0] = (*kiln__ck(x, (0), kiln__n1")) << move;
  }
  // A comparison is not an assignment.
  const std::string cmp =
      "KILN_KERNEL void k(KILN_GLOBAL float* y, KILN_GLOBAL float* x) {\n"
      "  if (y == x || y <= x) y[0] = 1;\n}\n";
  EXPECT_THAT(rewrite(cmp), HasSubstr("(*kiln__ck(y, (0)"));
}

TEST(CheckedAccess, EachKernelCountsItsOwnParameters) {
  const std::string src =
      "KILN_KERNEL void a(KILN_GLOBAL float* y) { y[0] = 1; }\n"
      "KILN_KERNEL void b(int n, KILN_GLOBAL float* y) { y[n] = 2; }\n";
  const std::string out = rewrite(src);
  EXPECT_THAT(out, HasSubstr("(*kiln__ck(y, (0), kiln__n0, kiln__err, 0u, 1u)) = 1;"));
  EXPECT_THAT(out, HasSubstr("(*kiln__ck(y, (n), kiln__n1, kiln__err, 1u, 2u)) = 2;"));
  EXPECT_EQ(parse(out).kernels.size(), 2u);
}
