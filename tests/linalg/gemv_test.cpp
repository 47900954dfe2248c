// kiln::linalg::gemv on every device against a double-precision loop: both transposes, odd
// sizes, a padded leading dimension, alpha/beta, f32, f64, f16 and bf16; y poisoned with NaN at
// beta = 0.
#include "linalg/linalg_fixture.hpp"

namespace {

using kiln::linalg::path;

class GemvTest : public conformance::DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(GemvTest);

template <class T>
void check_gemv(const kiln::device& dev, std::uint64_t m, std::uint64_t n, std::uint64_t pad,
                bool trans, double alpha, double beta, std::optional<path> want) {
  SCOPED_TRACE(std::to_string(m) + "x" + std::to_string(n) + (trans ? " A^T" : "") + " pad " +
               std::to_string(pad) + " alpha " + std::to_string(alpha) + " beta " +
               std::to_string(beta));
  const std::uint64_t ld = n + pad, in = trans ? m : n, out = trans ? n : m;
  const std::vector<T> a = linalg_test::random_values<T>(m * ld, 4);
  const std::vector<T> x = linalg_test::random_values<T>(in, 5);
  std::vector<T> y0 = linalg_test::random_values<T>(out, 6);
  if (beta == 0) y0.assign(out, linalg_test::poison<T>());
  kiln::buffer<T> da(dev, a), dx(dev, x), dy(dev, y0);
  kiln::queue q(dev);
  kiln::linalg::gemv(q, da, dx, dy, {m, n, pad ? ld : 0}, {trans, alpha, beta});
  if (want) {
    EXPECT_EQ(kiln::linalg::last_path(), *want)
        << kiln::linalg::to_string(kiln::linalg::last_path());
  }
  q.finish();
  const std::vector<T> y = dy.to_vector();
  int bad = 0;
  for (std::uint64_t i = 0; i < out; ++i) {
    double sum = 0, mag = 0;
    for (std::uint64_t p = 0; p < in; ++p) {
      const double v = double(trans ? a[p * ld + i] : a[i * ld + p]) * double(x[p]);
      sum += v;
      mag += std::fabs(v);
    }
    const double old = beta == 0 ? 0.0 : double(y0[i]);
    const double want_v = alpha * sum + beta * old;
    const double tol = linalg_test::tolerance<T>(in, std::fabs(alpha) * mag + std::fabs(beta * old),
                                                 want_v, false);
    if (!(std::fabs(double(y[i]) - want_v) <= tol) && bad++ < 5)
      ADD_FAILURE() << "y[" << i << "] = " << double(y[i]) << ", expected " << want_v << " +- "
                    << tol;
  }
}

template <class T>
void all_cases(const kiln::device& dev, std::optional<path> want) {
  const std::uint64_t sizes[][2] = {{1, 1}, {7, 33}, {65, 1}, {130, 65}, {33, 130}};
  for (const auto& s : sizes)
    for (bool trans : {false, true}) {
      check_gemv<T>(dev, s[0], s[1], 0, trans, 1.0, 0.0, want);
      check_gemv<T>(dev, s[0], s[1], 3, trans, -1.5, 0.5, want);
    }
}

TEST_P(GemvTest, BothTransposesF32) {
  all_cases<float>(dev(), linalg_test::expected_gemv_path(dev()));
}

TEST_P(GemvTest, BothTransposesF64) {
  KILN_REQUIRE_FEATURE(dev(), fp64, "f64 GEMV");
  all_cases<double>(dev(), linalg_test::expected_gemv_path(dev()));
}

// f16 and bf16: f32 accumulation, one rounding. The CPU backend widens A a block of rows at a
// time for OpenBLAS's sgemv (many blocks and tasks here: long and wide shapes, both transposes,
// beta on and off); other devices are held to the values only.
TEST_P(GemvTest, SixteenBitProductsAccumulateInFloat) {
  std::optional<path> want;
  if (dev().info().type == kiln::device_type::cpu && dev().backend() == "cpu")
    want = linalg_test::expected_gemv_path(dev());
  const auto each = [&](auto tag) {
    using T = decltype(tag);
    all_cases<T>(dev(), want);
    for (bool trans : {false, true}) {
      check_gemv<T>(dev(), 3000, 70, 5, trans, 1.0, 0.0, want);
      check_gemv<T>(dev(), 70, 3000, 0, trans, -0.5, 1.5, want);
      check_gemv<T>(dev(), 1500, 1500, 1, trans, 2.0, -1.0, want);
    }
  };
  each(kiln::half{});
  each(kiln::bfloat16{});
}

// The portable kernel (one work-item per element of y) where a library exists too.
TEST_P(GemvTest, PortableKernel) {
  const linalg_test::scoped_env portable("KILN_LINALG_PORTABLE", "1");
  check_gemv<float>(dev(), 33, 65, 2, false, 2.0, 1.0, path::simple);
  check_gemv<float>(dev(), 65, 7, 0, true, 1.0, 0.0, path::simple);
}

// An empty op(A) is y = beta y; an empty y does nothing.
TEST_P(GemvTest, EmptyProblems) {
  kiln::buffer<float> none, y(dev(), std::vector<float>{1, 2, 3});
  kiln::queue q(dev());
  kiln::linalg::gemv(q, none, none, y, {.m = 3, .n = 0}, {.beta = -1});
  q.finish();
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-1, -2, -3}));
  kiln::linalg::gemv(q, none, none, none, {.m = 0, .n = 0});
  EXPECT_EQ(kiln::linalg::last_path(), path::none);
}

}  // namespace
