// The CPU backend's "dnn" extension (oneDNN, src/backends/cpu/dnn.cpp): the table is there and
// used where libdnnl loads; its three directions agree with Kiln's portable kernels
// (KILN_DNN_PORTABLE=1) on random operands for strided, padded, dilated, grouped, depthwise and
// 1 x 1 shapes, including ones split into chunks of two sizes and into slices of channels over
// the thread pool (KILN_CPU_THREADS=8 splits more); alpha and beta; average pooling; the
// caller's OpenMP setting kept; and bad descriptors. Skips where oneDNN is absent (the portable
// path is then what tests/tensor/conv_test.cpp checks).
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <kiln/tensor/conv.hpp>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "dnn_abi.h"
#include "kiln/kiln.hpp"

namespace {

using shape_t = std::vector<std::int64_t>;

const kiln_dnn_v1* table() {
  return static_cast<const kiln_dnn_v1*>(
      kiln::cpu::dnn_extension(KILN_DNN_EXTENSION, KILN_DNN_VERSION));
}

#define REQUIRE_DNN()                                                                      \
  const kiln_dnn_v1* dnn = table();                                                        \
  if (!dnn)                                                                                \
  GTEST_SKIP() << "oneDNN off (KILN_DNNL=0) or absent (no libdnnl.so.2, or built without " \
                  "oneapi/dnnl/dnnl.h): convolution runs the portable kernels"

// Runs f with the portable kernels forced, restoring the environment.
template <class F>
auto portable(F f) {
  ::setenv("KILN_DNN_PORTABLE", "1", 1);
  auto r = f();
  ::unsetenv("KILN_DNN_PORTABLE");
  return r;
}

TEST(CpuDnnTest, TableIsOneDnnAndConvolutionUsesIt) {
  REQUIRE_DNN();
  EXPECT_EQ(dnn->header.version, KILN_DNN_VERSION);
  ASSERT_NE(dnn->library, nullptr);
  EXPECT_EQ(std::string(dnn->library).rfind("oneDNN ", 0), 0u) << dnn->library;
  EXPECT_TRUE(kiln::cpu::dnn_supports(KILN_DTYPE_F32));
  EXPECT_FALSE(kiln::cpu::dnn_supports(KILN_DTYPE_F64));  // f64: the portable kernels
  const kiln::device cpu = kiln::device::get("cpu:0");
  bool listed = false;
  for (const kiln::backend_status& b : kiln::backends())
    if (b.name == "cpu")
      for (const std::string& e : b.extensions) listed = listed || e == "dnn/1";
  EXPECT_TRUE(listed) << "cpu backend does not list dnn/1";
  for (const kiln::backend_status& b : kiln::backends())  // `kiln info` names the library
    if (b.name == "cpu") {
      EXPECT_NE(b.detail.find(dnn->library), std::string::npos) << b.detail;
    }
  const kiln::tensor x = kiln::tensor::randn(cpu, {1, 2, 5, 5}, 3);
  (void)kiln::conv2d(x, kiln::tensor::randn(cpu, {2, 2, 3, 3}, 4)).eval();
  EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
  (void)kiln::conv2d(x.to(kiln::scalar_type::f64),
                     kiln::tensor::randn(cpu, {2, 2, 3, 3}, 4).to(kiln::scalar_type::f64))
      .eval();
  EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::portable);
  // eval() only queues: without this wait the f64 GEMM (OpenBLAS) still ran on the queue's
  // thread while exit() ran OpenBLAS's destructor, which nulls its dispatch table: SIGSEGV
  // in cblas_dgemm at address 0x3d8 after the test passed (docs/testing.md, issue 24).
  cpu.synchronize();
}

struct config {
  shape_t x, w;
  kiln::conv2d_options o;
};

// Whether every element of a and b agrees: each is a sum of at most `terms` products of
// N(0, 1) values (|product| ~0.64 on average), rounded in different orders on the two sides:
// within 2 (terms + 2) eps sum |terms| (docs/tensor.md), sum |terms| taken as terms.
::testing::AssertionResult agree(const kiln::tensor& a, const kiln::tensor& b, double terms) {
  const std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
  if (va.size() != vb.size()) return ::testing::AssertionFailure() << "sizes differ";
  const double tol = 2 * (terms + 2) * std::ldexp(1.0, -23) * terms;
  for (std::size_t i = 0; i < va.size(); ++i)
    if (!(std::fabs(double(va[i]) - vb[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": oneDNN " << va[i]
                                           << ", portable " << vb[i] << " (tol " << tol << ")";
  return ::testing::AssertionSuccess();
}

TEST(CpuDnnTest, ThreeDirectionsAgreeWithThePortableKernels) {
  REQUIRE_DNN();
  const kiln::device cpu = kiln::device::get("cpu:0");
  const std::vector<config> configs = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}},
      {{1, 2, 9, 9}, {3, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 2}}},
      {{2, 4, 8, 7}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {{1, 3, 11, 10}, {2, 3, 3, 3}, {.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 3}}},
      {{2, 8, 10, 10}, {8, 1, 3, 3}, {.padding = {1, 1}, .groups = 8}},  // depthwise
      {{3, 16, 9, 9}, {8, 16, 1, 1}, {.stride = {2, 2}}},                // 1 x 1, strided
      {{3, 3, 20, 20}, {8, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},
      // ~3 MFLOP over 5 images: split into chunks of two sizes on two or more threads.
      {{5, 8, 16, 16}, {16, 8, 3, 3}, {.padding = {1, 1}}},
      // ~9.4 MFLOP over 2 images: also split into slices of 16 channels.
      {{2, 32, 16, 16}, {32, 32, 3, 3}, {.padding = {1, 1}}},
  };
  std::uint64_t seed = 700;
  for (const config& c : configs) {
    SCOPED_TRACE(::testing::Message()
                 << "x " << c.x[0] << "x" << c.x[1] << "x" << c.x[2] << "x" << c.x[3] << ", w "
                 << c.w[0] << "x" << c.w[1] << "x" << c.w[2] << "x" << c.w[3]);
    const kiln::tensor x = kiln::tensor::randn(cpu, c.x, ++seed);
    const kiln::tensor w = kiln::tensor::randn(cpu, c.w, ++seed);
    const kiln::tensor y = kiln::conv2d(x, w, {}, c.o).eval();
    ASSERT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
    const kiln::tensor dy = kiln::tensor::randn(cpu, y.shape(), ++seed);
    const kiln::tensor dx = kiln::conv2d_backward_data(dy, w, c.x, c.o).eval();
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
    const kiln::tensor dw = kiln::conv2d_backward_filter(x, dy, c.w, c.o).eval();
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);

    const kiln::tensor py = portable([&] { return kiln::conv2d(x, w, {}, c.o).eval(); });
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::portable);
    const kiln::tensor pdx =
        portable([&] { return kiln::conv2d_backward_data(dy, w, c.x, c.o).eval(); });
    const kiln::tensor pdw =
        portable([&] { return kiln::conv2d_backward_filter(x, dy, c.w, c.o).eval(); });
    const double crs = double(c.w[1] * c.w[2] * c.w[3]);
    const double kg = double(c.w[0] / c.o.groups) * double(c.w[2] * c.w[3]);
    const double npq = double(y.shape()[0] * y.shape()[2] * y.shape()[3]);
    EXPECT_TRUE(agree(y, py, crs)) << "forward";
    EXPECT_TRUE(agree(dx, pdx, kg)) << "backward data";
    EXPECT_TRUE(agree(dw, pdw, npq)) << "backward filter";
  }
}

// oneDNN runs with one OpenMP thread, set around each call: a thread of the caller's that ran
// a task (synchronize runs queued work on the waiting thread) keeps its own OpenMP setting.
TEST(CpuDnnTest, CallersOpenMpThreadCountIsKept) {
  REQUIRE_DNN();
  void* gomp = dlopen("libgomp.so.1", RTLD_NOW | RTLD_NOLOAD);  // loaded with libdnnl
  if (!gomp) GTEST_SKIP() << "libdnnl does not run on libgomp here";
  auto set = reinterpret_cast<void (*)(int)>(dlsym(gomp, "omp_set_num_threads"));
  auto get = reinterpret_cast<int (*)()>(dlsym(gomp, "omp_get_max_threads"));
  ASSERT_TRUE(set && get);
  set(3);
  kiln_queue_h q = nullptr;
  ASSERT_EQ(kiln::cpu::abi::queue_create(nullptr, &q), KILN_OK);
  std::vector<float> x(4 * 16 * 20 * 20, 1.f), w(32 * 16 * 3 * 3, 1.f), y(4 * 32 * 20 * 20);
  kiln_dnn_conv_desc d{};
  d.dtype = KILN_DTYPE_F32;
  d.n = 4, d.c = 16, d.h = 20, d.w = 20, d.k = 32, d.r = 3, d.s = 3, d.p = 20, d.q = 20;
  d.stride_h = d.stride_w = d.dil_h = d.dil_w = d.groups = 1, d.pad_h = d.pad_w = 1;
  const float one = 1, zero = 0;
  d.alpha = &one, d.beta = &zero;
  d.x = {x.data(), 0}, d.wt = {w.data(), 0}, d.y = {y.data(), 0};
  // finish() right after queuing: the waiting thread usually runs the call itself.
  for (int i = 0; i < 10; ++i) {
    ASSERT_EQ(table()->conv_forward(q, &d), KILN_OK) << kiln::cpu::last_error();
    ASSERT_EQ(kiln::cpu::abi::queue_finish(q), KILN_OK);
  }
  kiln::cpu::abi::queue_destroy(q);
  EXPECT_EQ(y[0], 16.f * 4);  // a corner: 2 x 2 of the 3 x 3 window inside, 16 channels
  EXPECT_EQ(get(), 3);
  dlclose(gomp);
}

// Through the table: y = alpha conv + beta y (beta 0 never reads y), and bad descriptors.
TEST(CpuDnnTest, AlphaBetaAndBadDescriptors) {
  REQUIRE_DNN();
  kiln_queue_h q = nullptr;
  ASSERT_EQ(kiln::cpu::abi::queue_create(nullptr, &q), KILN_OK);
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  std::vector<float> x(2 * 3 * 6 * 6), w(4 * 3 * 3 * 3);
  for (float& v : x) v = normal(gen);
  for (float& v : w) v = normal(gen);
  const std::size_t ny = 2 * 4 * 4 * 4;
  std::vector<float> y0(ny, std::numeric_limits<float>::quiet_NaN()), y1(ny);
  for (float& v : y1) v = normal(gen);
  const std::vector<float> y1_before = y1;
  kiln_dnn_conv_desc d{};
  d.dtype = KILN_DTYPE_F32;
  d.n = 2, d.c = 3, d.h = 6, d.w = 6, d.k = 4, d.r = 3, d.s = 3, d.p = 4, d.q = 4;
  d.stride_h = d.stride_w = d.dil_h = d.dil_w = d.groups = 1;
  float one = 1, zero = 0, alpha = 2, beta = 0.5f;
  d.x = {x.data(), 0}, d.wt = {w.data(), 0};
  d.alpha = &one, d.beta = &zero, d.y = {y0.data(), 0};
  ASSERT_EQ(dnn->conv_forward(q, &d), KILN_OK) << kiln::cpu::last_error();
  d.alpha = &alpha, d.beta = &beta, d.y = {y1.data(), 0};
  ASSERT_EQ(dnn->conv_forward(q, &d), KILN_OK) << kiln::cpu::last_error();
  ASSERT_EQ(kiln::cpu::abi::queue_finish(q), KILN_OK);
  for (std::size_t i = 0; i < ny; ++i) {
    ASSERT_TRUE(std::isfinite(y0[i])) << i;  // beta 0: the NaN was never read
    EXPECT_NEAR(y1[i], 2 * y0[i] + 0.5f * y1_before[i], 1e-4f * (1 + std::fabs(y1[i]))) << i;
  }

  kiln_dnn_conv_desc bad = d;
  bad.dtype = KILN_DTYPE_F64;
  EXPECT_EQ(dnn->conv_forward(q, &bad), KILN_ERR_UNSUPPORTED);
  bad = d;
  bad.groups = 2;  // does not divide the 3 input channels
  EXPECT_EQ(dnn->conv_backward_data(q, &bad), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(kiln::cpu::last_error()).find("groups"), std::string::npos)
      << kiln::cpu::last_error();
  EXPECT_EQ(dnn->conv_backward_filter(q, nullptr), KILN_ERR_INVALID_ARGUMENT);
  kiln_dnn_pool_desc pool{};
  EXPECT_EQ(dnn->pool_forward(q, &pool), KILN_ERR_UNSUPPORTED);  // pooling stays portable
  kiln::cpu::abi::queue_destroy(q);
}

// Average pooling through the table (both divisors, padded, strided, non-square, and planes
// split into chunks of two sizes) against the portable kernels; max pooling is refused (oneDNN
// lets a NaN lose) and so are bad descriptors.
TEST(CpuDnnTest, AveragePoolingAgreesWithThePortableKernels) {
  REQUIRE_DNN();
  const kiln::device cpu = kiln::device::get("cpu:0");
  kiln_queue_h q = nullptr;
  ASSERT_EQ(kiln::cpu::abi::queue_create(nullptr, &q), KILN_OK);
  struct shape {
    shape_t x;
    kiln::pool2d_options o;
  };
  const std::vector<shape> shapes = {
      {{2, 3, 8, 7}, {.kernel = {2, 2}}},
      {{1, 2, 9, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {{2, 1, 5, 6}, {.kernel = {4, 5}, .stride = {1, 1}, .padding = {2, 2}}},
      {{5, 50, 40, 40}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},  // chunks
  };
  std::uint64_t seed = 40;
  for (const shape& sh : shapes)
    for (bool include_pad : {true, false}) {
      kiln::pool2d_options o = sh.o;
      o.count_include_pad = include_pad;
      const kiln::tensor x = kiln::tensor::randn(cpu, sh.x, ++seed);
      const kiln::tensor want = portable([&] { return kiln::avg_pool2d(x, o).eval(); });
      std::vector<float> hx = x.to_vector<float>(), hy(want.numel(), -1.f);
      kiln_dnn_pool_desc d{};
      d.dtype = KILN_DTYPE_F32;
      d.mode = include_pad ? KILN_DNN_POOL_AVG_INCLUDE_PAD : KILN_DNN_POOL_AVG_EXCLUDE_PAD;
      d.n = std::uint64_t(sh.x[0]), d.c = std::uint64_t(sh.x[1]);
      d.h = std::uint64_t(sh.x[2]), d.w = std::uint64_t(sh.x[3]);
      d.p = std::uint64_t(want.shape()[2]), d.q = std::uint64_t(want.shape()[3]);
      d.win_h = uint32_t(o.kernel[0]), d.win_w = uint32_t(o.kernel[1]);
      const auto stride = o.stride[0] ? o.stride : o.kernel;
      d.stride_h = uint32_t(stride[0]), d.stride_w = uint32_t(stride[1]);
      d.pad_h = uint32_t(o.padding[0]), d.pad_w = uint32_t(o.padding[1]);
      d.x = {hx.data(), 0}, d.y = {hy.data(), 0};
      ASSERT_EQ(dnn->pool_forward(q, &d), KILN_OK) << kiln::cpu::last_error();
      ASSERT_EQ(kiln::cpu::abi::queue_finish(q), KILN_OK);
      const std::vector<float> w = want.to_vector<float>();
      for (std::size_t i = 0; i < w.size(); ++i)
        ASSERT_NEAR(hy[i], w[i], 1e-6f * (1 + std::fabs(w[i])))
            << i << (include_pad ? " include pad" : " exclude pad");
      if (&sh == &shapes.back() && include_pad) {
        kiln_dnn_pool_desc bad = d;
        bad.mode = KILN_DNN_POOL_MAX;
        EXPECT_EQ(dnn->pool_forward(q, &bad), KILN_ERR_UNSUPPORTED);
        bad = d;
        bad.p += 1;  // not the output of h x w
        EXPECT_EQ(dnn->pool_forward(q, &bad), KILN_ERR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(kiln::cpu::last_error()).find("p x q"), std::string::npos);
        bad = d;
        bad.dtype = KILN_DTYPE_F64;
        EXPECT_EQ(dnn->pool_forward(q, &bad), KILN_ERR_UNSUPPORTED);
      }
    }
  kiln::cpu::abi::queue_destroy(q);
}

}  // namespace
