// Bad calls are refused before anything is queued, with messages that name the problem; the
// CPU backend lists the extension when OpenBLAS was found at build time.
#include "linalg/linalg_fixture.hpp"

namespace {

using kiln::linalg::path;
using ::testing::HasSubstr;

class LinalgErrorsTest : public conformance::DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(LinalgErrorsTest);

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const kiln::invalid_argument& e) {
    return e.what();
  }
  return "(no kiln::invalid_argument thrown)";
}

TEST_P(LinalgErrorsTest, GemmShapes) {
  kiln::buffer<float> a(dev(), 6), b(dev(), 6), c(dev(), 4);
  kiln::queue q(dev());
  EXPECT_THAT(message_of([&] { kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 2, .k = 4}); }),
              HasSubstr("A holds 6 elements but the shape needs 8"));
  EXPECT_THAT(message_of([&] { kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 3, .k = 2}); }),
              HasSubstr("C holds 4 elements but the shape needs 6"));
  EXPECT_THAT(
      message_of([&] { kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 2, .k = 3, .ldb = 1}); }),
      HasSubstr("ldb (1) is smaller than a row of B (2 elements)"));
  EXPECT_THAT(message_of([&] {
                kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 3, .k = 2}, {.trans_b = true});
              }),
              HasSubstr("C holds 4 elements"));
  EXPECT_THAT(message_of([&] {
                kiln::linalg::gemm(q, a, b, c, {.m = 1, .n = 2, .k = 1, .batch = 2, .stride_c = 1});
              }),
              HasSubstr("the batch's outputs would overlap"));
  EXPECT_THAT(message_of([&] {
                kiln::linalg::gemm(q, a, b, c, {.m = 1, .n = 1, .k = 1, .batch = 3, .stride_a = 3});
              }),
              HasSubstr("A holds 6 elements but the shape needs 7"));
}

TEST_P(LinalgErrorsTest, GemvShapes) {
  kiln::buffer<double> a(dev(), 6), x(dev(), 3), y(dev(), 2);
  kiln::queue q(dev());
  EXPECT_THAT(message_of([&] { kiln::linalg::gemv(q, a, x, y, {.m = 2, .n = 4}); }),
              HasSubstr("A holds 6 elements but the shape needs 8"));
  EXPECT_THAT(message_of([&] { kiln::linalg::gemv(q, a, x, y, {.m = 3, .n = 2}); }),
              HasSubstr("y holds 2 elements but the shape needs 3"));
  EXPECT_THAT(
      message_of([&] { kiln::linalg::gemv(q, a, y, y, {.m = 3, .n = 2}, {.trans = true}); }),
      HasSubstr("x holds 2 elements but the shape needs 3 (3 x 2, lda 2, transposed)"));
  EXPECT_THAT(message_of([&] { kiln::linalg::gemv(q, a, x, y, {.m = 2, .n = 3, .lda = 2}); }),
              HasSubstr("lda (2) is smaller than a row of A (3 elements)"));
}

// Operands of another device than the queue's are refused, naming both.
TEST_P(LinalgErrorsTest, ForeignDevice) {
  std::optional<kiln::device> other;
  for (const kiln::device& d : kiln::device::all())
    if (d.id() != dev().id()) other.emplace(d);
  if (!other) GTEST_SKIP() << "one device only: nothing foreign to pass";
  kiln::buffer<float> a(dev(), 4), b(*other, 4), c(dev(), 4), x(dev(), 2);
  kiln::queue q(dev());
  EXPECT_THAT(message_of([&] { kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 2, .k = 2}); }),
              HasSubstr("B lives on " + other->id() + " but the queue belongs to " + dev().id()));
  EXPECT_THAT(message_of([&] { kiln::linalg::gemv(q, a, b, x, {.m = 2, .n = 2}); }),
              HasSubstr("x lives on " + other->id()));
}

// The CPU backend offers "blas/1" exactly when OpenBLAS was found when Kiln was built.
TEST(LinalgExtension, CpuListsBlasWithOpenBlas) {
  for (const kiln::backend_status& b : kiln::backends()) {
    if (b.name != "cpu") continue;
    const bool listed =
        std::find(b.extensions.begin(), b.extensions.end(), "blas/1") != b.extensions.end();
#ifdef KILN_TEST_HAVE_OPENBLAS
    EXPECT_TRUE(listed);
    EXPECT_THAT(kiln::linalg::vendor_library(kiln::device::get("cpu:0")), HasSubstr("OpenBLAS"));
#else
    EXPECT_FALSE(listed);
#endif
  }
  // The capability query and the table agree; other versions and integer dtypes are absent.
  const auto& cpu = *kiln::device::get("cpu:0").impl();
  const void* table = cpu.extension(KILN_BLAS_EXTENSION, KILN_BLAS_VERSION);
  EXPECT_EQ(table != nullptr, cpu.supports_op(KILN_OP_GEMM, KILN_DTYPE_F32));
  EXPECT_EQ(table != nullptr, cpu.supports_op(KILN_OP_GEMM, KILN_DTYPE_F64));
  // f16 and bf16 products too: widened to f32 for OpenBLAS (src/backends/cpu/blas.cpp).
  EXPECT_EQ(table != nullptr, cpu.supports_op(KILN_OP_GEMM, KILN_DTYPE_F16));
  EXPECT_EQ(table != nullptr, cpu.supports_op(KILN_OP_GEMM, KILN_DTYPE_BF16));
  EXPECT_FALSE(cpu.supports_op(KILN_OP_GEMM, KILN_DTYPE_I32));
  EXPECT_EQ(cpu.extension(KILN_BLAS_EXTENSION, KILN_BLAS_VERSION + 1), nullptr);
  if (table) {
    const auto* t = static_cast<const kiln_blas_v1*>(table);
    EXPECT_EQ(t->header.version, KILN_BLAS_VERSION);
    EXPECT_GE(t->header.struct_size, sizeof(kiln_blas_v1));
  }
  for (const kiln::backend_status& b : kiln::backends()) {
    if (b.name == "opencl") {
      EXPECT_TRUE(b.extensions.empty()) << "a portable layer: no library behind it";
    }
  }
}

}  // namespace
