// kiln::linalg::gemm on every device against a double-precision triple loop: the four
// transpose combinations, odd and non-square sizes, padded leading dimensions, strided
// batches, alpha/beta, f32, f64, f16 and bf16; C poisoned with NaN where beta = 0.
#include "linalg/linalg_fixture.hpp"

namespace {

using kiln::linalg::path;

class GemmTest : public conformance::DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(GemmTest);

struct gemm_case {
  std::uint64_t m, n, k;
  bool ta = false, tb = false;
  std::uint64_t pad = 0;  // added to every leading dimension (0: tight, passed as 0)
  std::uint64_t batch = 1;
  std::uint64_t stride_pad = 0;  // elements between matrices of a batch (0: tight)
  double alpha = 1, beta = 0;
  bool tf32 = false;
};

std::string describe(const gemm_case& g) {
  return std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
         (g.ta ? " A^T" : "") + (g.tb ? " B^T" : "") + " pad " + std::to_string(g.pad) + " batch " +
         std::to_string(g.batch) + " alpha " + std::to_string(g.alpha) + " beta " +
         std::to_string(g.beta);
}

// One stored operand: rows x cols with pitch ld, batch matrices stride apart.
struct layout {
  std::uint64_t rows, cols, ld, stride, size;
  layout(std::uint64_t r, std::uint64_t c, const gemm_case& g)
      : rows(r), cols(c), ld(c + g.pad), stride(r * ld + g.stride_pad), size(g.batch * stride) {}
  std::uint64_t ld_arg(const gemm_case& g) const { return g.pad ? ld : 0; }
  std::uint64_t stride_arg(const gemm_case& g) const { return g.stride_pad ? stride : 0; }
};

// want: the path the product must take; nullopt: any (the values are still checked).
template <class T>
void check_gemm(const kiln::device& dev, const gemm_case& g, std::optional<path> want) {
  SCOPED_TRACE(describe(g));
  const layout la(g.ta ? g.k : g.m, g.ta ? g.m : g.k, g), lb(g.tb ? g.n : g.k, g.tb ? g.k : g.n, g),
      lc(g.m, g.n, g);
  const std::vector<T> a = linalg_test::random_values<T>(la.size, 1);
  const std::vector<T> b = linalg_test::random_values<T>(lb.size, 2);
  std::vector<T> c0 = linalg_test::random_values<T>(lc.size, 3);
  if (g.beta == 0) c0.assign(lc.size, linalg_test::poison<T>());  // must be overwritten
  kiln::buffer<T> da(dev, a), db(dev, b), dc(dev, c0);
  kiln::queue q(dev);
  const kiln::linalg::gemm_shape s{g.m,
                                   g.n,
                                   g.k,
                                   la.ld_arg(g),
                                   lb.ld_arg(g),
                                   lc.ld_arg(g),
                                   g.batch,
                                   la.stride_arg(g),
                                   lb.stride_arg(g),
                                   lc.stride_arg(g)};
  kiln::linalg::gemm(q, da, db, dc, s, {g.ta, g.tb, g.alpha, g.beta, g.tf32});
  if (want) {
    EXPECT_EQ(kiln::linalg::last_path(), *want)
        << kiln::linalg::to_string(kiln::linalg::last_path());
  }
  q.finish();
  const std::vector<T> c = dc.to_vector();

  std::vector<bool> inside(lc.size, false);
  int bad = 0;
  for (std::uint64_t z = 0; z < g.batch; ++z)
    for (std::uint64_t i = 0; i < g.m; ++i)
      for (std::uint64_t j = 0; j < g.n; ++j) {
        double sum = 0, mag = 0;
        for (std::uint64_t p = 0; p < g.k; ++p) {
          const double x = a[z * la.stride + (g.ta ? p * la.ld + i : i * la.ld + p)];
          const double y = b[z * lb.stride + (g.tb ? j * lb.ld + p : p * lb.ld + j)];
          sum += x * y;
          mag += std::fabs(x * y);
        }
        const std::uint64_t at = z * lc.stride + i * lc.ld + j;
        inside[at] = true;
        const double old = g.beta == 0 ? 0.0 : double(c0[at]);
        const double want_v = g.alpha * sum + g.beta * old;
        const double tol = linalg_test::tolerance<T>(
            g.k, std::fabs(g.alpha) * mag + std::fabs(g.beta * old), want_v, g.tf32);
        if (!(std::fabs(double(c[at]) - want_v) <= tol) && bad++ < 5)
          ADD_FAILURE() << "C[" << z << "][" << i << "][" << j << "] = " << c[at] << ", expected "
                        << want_v << " +- " << tol;
      }
  for (std::uint64_t at = 0; at < lc.size; ++at)  // padding is never touched
    if (!inside[at] && std::memcmp(&c[at], &c0[at], sizeof(T)) != 0 && bad++ < 5)
      ADD_FAILURE() << "C padding element " << at << " was written";
}

// Sizes from the brief: 1, 7, 33, 65, 130, in non-square combinations.
const gemm_case shapes[] = {{1, 1, 1},     {7, 1, 33},  {1, 65, 7},
                            {33, 65, 130}, {65, 7, 33}, {130, 33, 7}};

template <class T>
void all_transposes(const kiln::device& dev, std::optional<path> want) {
  for (const gemm_case& base : shapes)
    for (int t = 0; t < 4; ++t) {
      gemm_case g = base;
      g.ta = t & 1, g.tb = t & 2;
      check_gemm<T>(dev, g, want);
    }
}

TEST_P(GemmTest, AllTransposesF32) {
  all_transposes<float>(dev(), linalg_test::expected_path(dev()));
}

TEST_P(GemmTest, AllTransposesF64) {
  KILN_REQUIRE_FEATURE(dev(), fp64, "f64 GEMM");
  all_transposes<double>(dev(), linalg_test::expected_path(dev()));
}

// Leading dimensions larger than tight, batches with gaps, alpha and beta not 1 and 0.
template <class T>
void padded_batches(const kiln::device& dev, std::optional<path> want) {
  for (int t = 0; t < 4; ++t) {
    check_gemm<T>(dev, {33, 65, 7, bool(t & 1), bool(t & 2), 3, 3, 5, 1.5, -0.75}, want);
    check_gemm<T>(dev, {7, 130, 65, bool(t & 1), bool(t & 2), 1, 2, 0, -2.0, 0.0}, want);
  }
}

TEST_P(GemmTest, PaddedBatchesF32) {
  padded_batches<float>(dev(), linalg_test::expected_path(dev()));
}

TEST_P(GemmTest, PaddedBatchesF64) {
  KILN_REQUIRE_FEATURE(dev(), fp64, "f64 GEMM");
  padded_batches<double>(dev(), linalg_test::expected_path(dev()));
}

// Products large enough that the CPU backend splits them over its pool (src/backends/cpu/
// blas.cpp): by rows, by columns, by k (partial products summed), and batches; every transpose,
// padded, with alpha and beta.
TEST_P(GemmTest, LargeProductsSplitOverThreads) {
  const kiln::linalg::path want = linalg_test::expected_path(dev());
  for (int t = 0; t < 4; ++t) {
    const bool ta = t & 1, tb = t & 2;
    check_gemm<float>(dev(), {257, 40, 200, ta, tb, 3, 1, 0, 1.5, -0.5}, want);  // rows
    check_gemm<float>(dev(), {9, 300, 800, ta, tb, 0, 1, 0, 1.0, 0.0}, want);    // columns
    check_gemm<float>(dev(), {5, 7, 70000, ta, tb, 2, 1, 0, -1.0, 2.0}, want);   // k
  }
  check_gemm<float>(dev(), {96, 96, 160, false, true, 0, 5, 7, 1.0, 0.0}, want);  // a batch
}

// f16 and bf16 products: f32 accumulation, one rounding (the CPU backend widens them for
// OpenBLAS's sgemm; it took the portable kernel before, at 1/24 (bf16) and 1/90 (f16) of f32's
// speed), every transpose, padded batches with beta, and products split over the CPU's pool.
template <class T>
void sixteen_bit_products(const kiln::device& dev) {
  // The CPU takes OpenBLAS where it is present; other devices are held to values only.
  std::optional<path> want;
  if (dev.info().type == kiln::device_type::cpu && dev.backend() == "cpu")
    want = linalg_test::expected_path(dev);
  all_transposes<T>(dev, want);
  padded_batches<T>(dev, want);
  check_gemm<T>(dev, {257, 40, 200, true, false, 3, 1, 0, 1.5, -0.5}, want);  // rows
  check_gemm<T>(dev, {5, 7, 7000, false, true, 2, 1, 0, -1.0, 2.0}, want);    // k
}

TEST_P(GemmTest, SixteenBitProductsAccumulateInFloat) {
  sixteen_bit_products<kiln::half>(dev());
  sixteen_bit_products<kiln::bfloat16>(dev());
}

// The portable kernels where a library exists too (CPU with OpenBLAS: the per-element kernel).
TEST_P(GemmTest, PortableKernels) {
  const linalg_test::scoped_env portable("KILN_LINALG_PORTABLE", "1");
  const path want = dev().supports(kiln::feature::barrier) ? path::tiled : path::simple;
  check_gemm<float>(dev(), {65, 33, 130, true, false, 2, 2, 3, 0.5, 2.0}, want);
  check_gemm<float>(dev(), {7, 65, 33, false, true}, want);
  if (dev().supports(kiln::feature::fp64))
    check_gemm<double>(dev(), {33, 7, 65, true, true, 1, 3, 0, 1.0, 1.0}, want);
}

// TF32 is opt-in and applies where tensor cores have it; elsewhere it is full f32.
TEST_P(GemmTest, Tf32ModeWithinItsTolerance) {
  check_gemm<float>(dev(), {65, 130, 33, false, false, 0, 2, 0, 1.0, 0.0, true},
                    linalg_test::expected_path(dev()));
}

// m, n or batch 0 is valid and does nothing; k = 0 is C = beta C (BLAS's meaning).
TEST_P(GemmTest, EmptyProblems) {
  kiln::buffer<float> a(dev(), 4), b(dev(), 4), c(dev(), std::vector<float>{1, 2, 3, 4});
  kiln::queue q(dev());
  kiln::linalg::gemm(q, a, b, c, {.m = 0, .n = 2, .k = 2});
  EXPECT_EQ(kiln::linalg::last_path(), path::none);
  kiln::linalg::gemm(q, a, b, c, {.m = 2, .n = 2, .k = 2, .batch = 0});
  EXPECT_EQ(kiln::linalg::last_path(), path::none);
  kiln::buffer<float> none;
  kiln::linalg::gemm(q, none, none, c, {.m = 2, .n = 2, .k = 0}, {.beta = 3});
  EXPECT_NE(kiln::linalg::last_path(), path::vendor);  // the portable kernel scales C
  q.finish();
  EXPECT_EQ(c.to_vector(), (std::vector<float>{3, 6, 9, 12}));
}

// Every kernel source compiles for CUDA through NVRTC when there is no GPU to run it.
TEST(GemmSources, CompileForCuda) {
  for (kiln::scalar_type t : {kiln::scalar_type::f32, kiln::scalar_type::f64}) {
    EXPECT_NO_THROW(conformance::compile_everywhere(kiln::linalg::detail::tiled_source(t)));
    EXPECT_NO_THROW(conformance::compile_everywhere(kiln::linalg::detail::simple_source(t)));
  }
}

}  // namespace
