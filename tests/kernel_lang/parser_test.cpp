#include "kernel_lang/parser.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using kiln::scalar_type;
using kiln::kernel_lang::parse;
using testing::HasSubstr;

TEST(Parser, FindsKernelsAndParameters) {
  auto p = parse(R"KS(
// KILN_KERNEL void in_a_comment(int x) {}
KILN_FUNC float twice(float v) { return 2 * v; }
KILN_KERNEL void axpy(KILN_GLOBAL float* KILN_RESTRICT y, KILN_GLOBAL const float* x, float a,
                      uint64_t n) {}
KILN_KERNEL   void  noargs ( void ) {}
KILN_KERNEL void empty() { const char* s = "KILN_KERNEL void fake(int x)"; }
)KS");
  ASSERT_EQ(p.kernels.size(), 3u);
  const auto& k = p.kernels[0];
  EXPECT_EQ(k.name, "axpy");
  EXPECT_EQ(k.line, 4);
  ASSERT_EQ(k.params.size(), 4u);
  EXPECT_EQ(k.params[0].name, "y");
  EXPECT_TRUE(k.params[0].is_pointer);
  EXPECT_FALSE(k.params[0].is_const);
  EXPECT_EQ(k.params[0].type, scalar_type::f32);
  EXPECT_TRUE(k.params[1].is_const);
  EXPECT_EQ(k.params[2].type, scalar_type::f32);
  EXPECT_FALSE(k.params[2].is_pointer);
  EXPECT_EQ(k.params[3].type, scalar_type::u64);
  EXPECT_EQ(k.param_types[1], "KILN_GLOBAL const float*");
  EXPECT_TRUE(p.kernels[1].params.empty());
  EXPECT_EQ(p.kernels[1].name, "noargs");
  EXPECT_TRUE(p.kernels[2].params.empty());
  EXPECT_FALSE(p.uses_barrier);
  EXPECT_FALSE(p.uses_local_memory);
}

// Native source (compile_native) defines the spelling itself: a preprocessor line naming
// KILN_KERNEL declares no kernel.
TEST(Parser, PreprocessorLinesDeclareNoKernel) {
  auto p = parse(
      "#define KILN_KERNEL extern \"C\" __global__\n"
      "  #  undef KILN_KERNEL\n"
      "KILN_KERNEL void k(KILN_GLOBAL uint32_t* out) { out[0] = 1; }\n");
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].name, "k");
  EXPECT_EQ(p.kernels[0].line, 3);
}

TEST(Parser, MapsEveryScalarSpelling) {
  const std::pair<const char*, scalar_type> cases[] = {
      {"int8_t", scalar_type::i8},     {"uint8_t", scalar_type::u8},
      {"int16_t", scalar_type::i16},   {"uint16_t", scalar_type::u16},
      {"int", scalar_type::i32},       {"unsigned int", scalar_type::u32},
      {"long long", scalar_type::i64}, {"size_t", scalar_type::u64},
      {"double", scalar_type::f64},    {"bool", scalar_type::boolean}};
  for (auto [spelling, type] : cases) {
    auto p = parse(std::string("KILN_KERNEL void k(") + spelling + " v) {}");
    ASSERT_EQ(p.kernels[0].params.size(), 1u) << spelling;
    EXPECT_EQ(p.kernels[0].params[0].type, type) << spelling;
  }
}

TEST(Parser, DetectsBarrierAndLocalMemoryOutsideComments) {
  auto p = parse(
      "KILN_KERNEL void k() {\n /* kiln_barrier() */\n KILN_LOCAL float t[4];\n "
      "kiln_barrier();\n}");
  EXPECT_TRUE(p.uses_barrier);
  EXPECT_EQ(p.barrier_line, 4);
  EXPECT_TRUE(p.uses_local_memory);
  EXPECT_EQ(p.local_line, 3);
}

TEST(Parser, NoKernelIsInvalidArgument) {
  EXPECT_THROW(parse("KILN_FUNC void helper() {}"), kiln::invalid_argument);
}

// Each malformed declaration is a compile_error that names the line and shows it.
TEST(Parser, MalformedDeclarationsNameTheLine) {
  const std::pair<const char*, const char*> cases[] = {
      {"\nKILN_KERNEL int k() {}", "must return void"},
      {"\nKILN_KERNEL void k(float* p) {}", "must be declared KILN_GLOBAL"},
      {"\nKILN_KERNEL void k(KILN_GLOBAL float p) {}", "must be a pointer"},
      {"\nKILN_KERNEL void k(struct S s) {}", "not a scalar type"},
      {"\nKILN_KERNEL void k(float) {}", "needs a type and a name"},
      {"\nKILN_KERNEL void k(KILN_GLOBAL float** p) {}", "pointer to pointer"},
      {"\nKILN_KERNEL void k(float a[]) {}", "unexpected '['"},
      {"KILN_KERNEL void k() {}\nKILN_KERNEL void k() {}", "defined twice"},
      {"\nKILN_KERNEL void k(float a {}", "unbalanced"},
  };
  for (auto [src, msg] : cases) {
    try {
      parse(src);
      ADD_FAILURE() << "accepted: " << src;
    } catch (const kiln::compile_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(msg)) << src;
      EXPECT_THAT(e.what(), HasSubstr("line 2")) << src;
      EXPECT_THAT(e.excerpt(), HasSubstr(">    2 | KILN_KERNEL")) << src;
    }
  }
}

TEST(Parser, BlankingKeepsLengthAndLines) {
  const std::string src = "a // c\n/* x\ny */ \"s\\\"t\" 'c'\nz";
  const std::string b = kiln::kernel_lang::blank_comments_and_literals(src);
  EXPECT_EQ(b.size(), src.size());
  EXPECT_EQ(std::count(b.begin(), b.end(), '\n'), std::count(src.begin(), src.end(), '\n'));
  EXPECT_EQ(b.find('x'), std::string::npos);
  EXPECT_EQ(b.find('t'), std::string::npos);
  EXPECT_NE(b.find('z'), std::string::npos);
}

TEST(Parser, ExcerptMarksLinesWithContext) {
  const std::string ex =
      kiln::kernel_lang::excerpt("one\ntwo\nthree\nfour\nfive\nsix\nseven", {2, 6});
  EXPECT_THAT(ex, HasSubstr(">    2 | two"));
  EXPECT_THAT(ex, HasSubstr("     1 | one"));
  EXPECT_THAT(ex, HasSubstr("     3 | three"));
  EXPECT_THAT(ex, HasSubstr("..."));
  EXPECT_THAT(ex, HasSubstr(">    6 | six"));
}
