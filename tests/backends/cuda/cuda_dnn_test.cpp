// The CUDA plugin's "dnn" extension (cuDNN) through the C ABI, against double-precision
// references on the host. Skips where there is no GPU or no cuDNN.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.hpp"
#include "dnn_abi.h"

namespace kiln_test {
namespace {

const kiln_dnn_v1* dnn_table() {
  if (!KILN_BACKEND_HAS(g_be, get_extension)) return nullptr;
  return static_cast<const kiln_dnn_v1*>(g_be->get_extension(KILN_DNN_EXTENSION, KILN_DNN_VERSION));
}

#define REQUIRE_DNN()                   \
  REQUIRE_DEVICE();                     \
  const kiln_dnn_v1* dnn = dnn_table(); \
  if (!dnn) GTEST_SKIP() << "no dnn extension (no cuDNN): " << g_be->availability()

// A device buffer of T, filled from the host and read back.
template <class T>
struct Buffer {
  kiln_device_h dev;
  kiln_queue_h q;
  void* mem = nullptr;
  size_t n;
  uint64_t offset;
  Buffer(const Device& d, const std::vector<T>& host, uint64_t at = 256)
      : dev(d.h), q(d.q), n(host.size()), offset(at) {
    EXPECT_KILN_OK(g_be->mem_alloc(dev, n * sizeof(T) + 256, q, &mem));
    if (mem) {
      EXPECT_KILN_OK(g_be->copy_h2d(q, ref(), host.data(), n * sizeof(T)));
    }
  }
  ~Buffer() {
    if (mem) g_be->mem_free(dev, mem, q);
  }
  kiln_mem_ref ref() const { return {mem, offset}; }  // at an offset inside the allocation
  std::vector<T> read() const {
    std::vector<T> out(n);
    EXPECT_KILN_OK(g_be->copy_d2h(q, out.data(), ref(), n * sizeof(T)));
    EXPECT_KILN_OK(g_be->queue_finish(q));
    return out;
  }
};

struct ConvShape {
  uint64_t n, c, h, w, k, r, s;
  uint32_t sh, sw, ph, pw, dh, dw, groups;
  uint64_t p() const { return (h + 2 * ph - dh * (r - 1) - 1) / sh + 1; }
  uint64_t q() const { return (w + 2 * pw - dw * (s - 1) - 1) / sw + 1; }
};

// y = conv(x, wt), and the two gradients of sum(y * dy): one loop nest, accumulated in double.
void reference(const ConvShape& c, const std::vector<double>& x, const std::vector<double>& wt,
               const std::vector<double>& dy, std::vector<double>* y, std::vector<double>* dx,
               std::vector<double>* dw) {
  const uint64_t P = c.p(), Q = c.q(), cg = c.c / c.groups, kg = c.k / c.groups;
  y->assign(c.n * c.k * P * Q, 0.0);
  dx->assign(x.size(), 0.0);
  dw->assign(wt.size(), 0.0);
  for (uint64_t n = 0; n < c.n; ++n)
    for (uint64_t k = 0; k < c.k; ++k)
      for (uint64_t p = 0; p < P; ++p)
        for (uint64_t q = 0; q < Q; ++q) {
          const uint64_t yi = ((n * c.k + k) * P + p) * Q + q;
          for (uint64_t ci = 0; ci < cg; ++ci)
            for (uint64_t r = 0; r < c.r; ++r)
              for (uint64_t s = 0; s < c.s; ++s) {
                const int64_t h = int64_t(p * c.sh + r * c.dh) - c.ph;
                const int64_t w = int64_t(q * c.sw + s * c.dw) - c.pw;
                if (h < 0 || w < 0 || h >= int64_t(c.h) || w >= int64_t(c.w)) continue;
                const uint64_t ch = k / kg * cg + ci;
                const uint64_t xi = ((n * c.c + ch) * c.h + uint64_t(h)) * c.w + uint64_t(w);
                const uint64_t wi = ((k * cg + ci) * c.r + r) * c.s + s;
                (*y)[yi] += x[xi] * wt[wi];
                (*dx)[xi] += dy[yi] * wt[wi];
                (*dw)[wi] += x[xi] * dy[yi];
              }
        }
}

template <class T>
std::vector<T> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<T> v(n);
  for (auto& e : v) e = static_cast<T>(dist(rng));
  return v;
}

// Largest |got - want| relative to the largest |want| (at least 1).
template <class T>
double rel_error(const std::vector<T>& got, const std::vector<double>& want) {
  double err = 0, scale = 1;
  for (size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::fabs(double(got[i]) - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return err / scale;
}

template <class T>
void check_conv(const kiln_dnn_v1* dnn, const ConvShape& c, uint32_t math, double tol,
                uint64_t at = 256) {
  SCOPED_TRACE(::testing::Message()
               << "n" << c.n << " c" << c.c << " " << c.h << "x" << c.w << " k" << c.k << " " << c.r
               << "x" << c.s << " stride " << c.sh << "," << c.sw << " pad " << c.ph << "," << c.pw
               << " dil " << c.dh << "," << c.dw << " groups " << c.groups << " math " << math
               << (sizeof(T) == 8 ? " f64" : " f32"));
  Device d;
  ASSERT_NE(d.q, nullptr);
  const uint64_t P = c.p(), Q = c.q();
  const auto x = random_values<T>(c.n * c.c * c.h * c.w, 1);
  const auto wt = random_values<T>(c.k * (c.c / c.groups) * c.r * c.s, 2);
  const auto dy = random_values<T>(c.n * c.k * P * Q, 3);
  std::vector<double> yr, dxr, dwr;
  reference(c, std::vector<double>(x.begin(), x.end()), std::vector<double>(wt.begin(), wt.end()),
            std::vector<double>(dy.begin(), dy.end()), &yr, &dxr, &dwr);

  const T nan = std::numeric_limits<T>::quiet_NaN();
  Buffer<T> xb(d, x, at), wb(d, wt, at), dyb(d, dy, at);
  Buffer<T> yb(d, std::vector<T>(yr.size(), nan), at), dxb(d, std::vector<T>(x.size(), nan), at);
  Buffer<T> dwb(d, std::vector<T>(wt.size(), T(1)), at);
  const T one = 1, zero = 0, half = 0.5;
  const kiln_dtype dt = sizeof(T) == 8 ? KILN_DTYPE_F64 : KILN_DTYPE_F32;
  kiln_dnn_conv_desc desc{dt,   c.n,  c.c,  c.h,  c.w,      c.k,  c.r,  c.s,   P,  Q,  c.sh, c.sw,
                          c.ph, c.pw, c.dh, c.dw, c.groups, math, &one, &zero, {}, {}, {}};
  // beta 0 over NaN: the output is never read.
  desc.x = xb.ref();
  desc.wt = wb.ref();
  desc.y = yb.ref();
  ASSERT_KILN_OK(dnn->conv_forward(d.q, &desc));
  EXPECT_LE(rel_error(yb.read(), yr), tol);

  desc.y = dyb.ref();
  desc.x = dxb.ref();
  ASSERT_KILN_OK(dnn->conv_backward_data(d.q, &desc));
  EXPECT_LE(rel_error(dxb.read(), dxr), tol);

  // beta 0.5 over ones: dw = 2 * grad + 0.5.
  const T two = 2;
  desc.alpha = &two;
  desc.beta = &half;
  desc.x = xb.ref();
  desc.wt = dwb.ref();
  ASSERT_KILN_OK(dnn->conv_backward_filter(d.q, &desc));
  for (double& v : dwr) v = 2 * v + 0.5;
  EXPECT_LE(rel_error(dwb.read(), dwr), tol);
}

const ConvShape kShapes[] = {
    {2, 3, 9, 11, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},    // 3x3, same padding
    {1, 8, 16, 16, 16, 1, 1, 1, 1, 0, 0, 1, 1, 1},  // 1x1
    {3, 4, 13, 10, 6, 3, 2, 2, 3, 1, 0, 2, 1, 2},   // strided, dilated, grouped
    {2, 6, 7, 7, 6, 3, 3, 1, 1, 1, 1, 1, 1, 6},     // depthwise
    {4, 16, 32, 32, 32, 5, 5, 2, 2, 2, 2, 1, 1, 1},
};

TEST(CudaDnn, Table) {
  REQUIRE_DNN();
  EXPECT_EQ(dnn->header.version, KILN_DNN_VERSION);
  EXPECT_EQ(dnn->header.struct_size, sizeof(kiln_dnn_v1));
  ASSERT_NE(dnn->library, nullptr);
  EXPECT_EQ(std::string(dnn->library).rfind("cuDNN 9.", 0), 0u) << dnn->library;
  EXPECT_NE(std::string(g_be->extension_list()).find("dnn/1"), std::string::npos);
  EXPECT_NE(std::string(g_be->availability()).find(dnn->library), std::string::npos)
      << g_be->availability();
  EXPECT_EQ(g_be->get_extension(KILN_DNN_EXTENSION, KILN_DNN_VERSION + 1), nullptr);
  EXPECT_EQ(g_be->supports_op(0, KILN_OP_CONV2D, KILN_DTYPE_F32), 1);
  EXPECT_EQ(g_be->supports_op(0, KILN_OP_CONV2D, KILN_DTYPE_F64), 1);
  EXPECT_EQ(g_be->supports_op(0, KILN_OP_CONV2D, KILN_DTYPE_I32), 0);
}

TEST(CudaDnn, ConvF32) {
  REQUIRE_DNN();
  for (const ConvShape& c : kShapes) check_conv<float>(dnn, c, KILN_DNN_MATH_DEFAULT, 1e-5);
}

TEST(CudaDnn, ConvF32Tf32) {
  REQUIRE_DNN();
  for (const ConvShape& c : kShapes) check_conv<float>(dnn, c, KILN_DNN_MATH_TF32, 5e-3);
}

TEST(CudaDnn, ConvF64) {
  REQUIRE_DNN();
  for (const ConvShape& c : kShapes) check_conv<double>(dnn, c, KILN_DNN_MATH_DEFAULT, 1e-12);
}

// Operands only element-aligned (the core passes views at any element offset): cuDNN 9 takes
// them (an engine that refused would give way to the next algorithm).
TEST(CudaDnn, ElementAlignedOperands) {
  REQUIRE_DNN();
  for (const ConvShape& c : kShapes) {
    check_conv<float>(dnn, c, KILN_DNN_MATH_DEFAULT, 1e-5, 4);
    check_conv<float>(dnn, c, KILN_DNN_MATH_TF32, 5e-3, 4);
    check_conv<double>(dnn, c, KILN_DNN_MATH_DEFAULT, 1e-12, 8);
  }
}

TEST(CudaDnn, Refusals) {
  REQUIRE_DNN();
  Device d;
  ASSERT_NE(d.q, nullptr);
  const float one = 1, zero = 0;
  Buffer<float> b(d, std::vector<float>(4096, 0.f));
  kiln_dnn_conv_desc desc{
      KILN_DTYPE_F32,        1,    2,     8,       8,       2,      3, 3, 6, 6, 1, 1, 0, 0, 1, 1, 1,
      KILN_DNN_MATH_DEFAULT, &one, &zero, b.ref(), b.ref(), b.ref()};
  desc.dtype = KILN_DTYPE_I32;
  EXPECT_EQ(dnn->conv_forward(d.q, &desc), KILN_ERR_UNSUPPORTED);
  EXPECT_NE(std::string(g_be->last_error()).find("f32"), std::string::npos) << g_be->last_error();
  desc.dtype = KILN_DTYPE_F32;
  desc.p = 7;  // not what the shape gives
  EXPECT_EQ(dnn->conv_forward(d.q, &desc), KILN_ERR_INVALID_ARGUMENT);
  desc.p = 6;
  desc.n = 0;
  EXPECT_EQ(dnn->conv_forward(d.q, &desc), KILN_ERR_UNSUPPORTED);
  kiln_dnn_pool_desc pd{};
  pd.dtype = KILN_DTYPE_F64;
  pd.mode = static_cast<kiln_dnn_pool_mode>(7);
  pd.n = pd.c = 1;
  pd.h = pd.w = 4;
  pd.p = pd.q = 2;
  pd.win_h = pd.win_w = pd.stride_h = pd.stride_w = 2;
  EXPECT_EQ(dnn->pool_forward(d.q, &pd), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_KILN_OK(g_be->queue_finish(d.q));
}

// The attention entries' own checks: a bad descriptor gets KILN_ERR_INVALID_ARGUMENT, a shape
// cuDNN lacks KILN_ERR_UNSUPPORTED (the core then computes attention itself), each with a
// message; nothing is queued and the queue stays usable. One well-formed call runs.
TEST(CudaDnn, AttentionRefusals) {
  REQUIRE_DNN();
  if (dnn->header.struct_size < sizeof(kiln_dnn_v1) || !dnn->attention_forward)
    GTEST_SKIP() << "no fused attention in " << dnn->library;
  Device d;
  ASSERT_NE(d.q, nullptr);
  const uint64_t b = 1, h = 2, l = 16, e = 64;
  // bf16 q, k, v, o (1.0 = 0x3f80) and f32 statistics, each on a 256-byte boundary
  Buffer<uint16_t> q(d, std::vector<uint16_t>(b * h * l * e, 0x3f80)),
      k(d, std::vector<uint16_t>(b * h * l * e, 0x3f80)),
      v(d, std::vector<uint16_t>(b * h * l * e, 0x3f80)),
      o(d, std::vector<uint16_t>(b * h * l * e));
  Buffer<float> stats(d, std::vector<float>(b * h * l, -1.f));
  const auto view = [&](const Buffer<uint16_t>& m) {
    return kiln_dnn_view{m.ref(), {int64_t(h * l * e), int64_t(l * e), int64_t(e)}};
  };
  kiln_dnn_attention_desc good{};
  good.struct_size = sizeof(kiln_dnn_attention_desc);
  good.dtype = KILN_DTYPE_BF16;
  good.causal = 1;
  good.batch = b, good.heads = h, good.lq = l, good.lk = l, good.d_qk = e, good.d_v = e;
  good.scale = 0.125f;
  good.q = view(q), good.k = view(k), good.v = view(v), good.o = view(o);
  good.stats = stats.ref();
  const auto refused = [&](kiln_status want, const char* says, auto change) {
    kiln_dnn_attention_desc bad = good;
    change(bad);
    // A known message first, so that the one checked below is this call's.
    EXPECT_EQ(dnn->attention_forward(d.q, nullptr), KILN_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(std::string(g_be->last_error()).find(says), std::string::npos);
    EXPECT_EQ(dnn->attention_forward(d.q, &bad), want) << says;
    EXPECT_NE(std::string(g_be->last_error()).find(says), std::string::npos) << g_be->last_error();
  };
  EXPECT_EQ(dnn->attention_forward(d.q, nullptr), KILN_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(dnn->attention_forward(nullptr, &good), KILN_ERR_INVALID_ARGUMENT);
  refused(KILN_ERR_INVALID_ARGUMENT, "bytes", [](auto& x) { x.struct_size = 16; });
  refused(KILN_ERR_UNSUPPORTED, "only f16 and bf16", [](auto& x) { x.dtype = KILN_DTYPE_F32; });
  refused(KILN_ERR_UNSUPPORTED, "empty", [](auto& x) { x.lk = 0; });
  refused(KILN_ERR_INVALID_ARGUMENT, "scale",
          [](auto& x) { x.scale = std::numeric_limits<float>::infinity(); });
  refused(KILN_ERR_UNSUPPORTED, "head widths", [](auto& x) { x.d_v = 12; });
  refused(KILN_ERR_UNSUPPORTED, "head widths", [](auto& x) { x.d_qk = x.d_v = 264; });
  refused(KILN_ERR_UNSUPPORTED, "aligned", [](auto& x) { x.k.mem.offset += 2; });
  refused(KILN_ERR_UNSUPPORTED, "aligned", [](auto& x) { x.v.stride[2] = 60; });
  refused(KILN_ERR_INVALID_ARGUMENT, "no memory", [](auto& x) { x.o.mem.base = nullptr; });
  refused(KILN_ERR_INVALID_ARGUMENT, "statistics", [](auto& x) { x.stats.base = nullptr; });
  // The backward keeps to head widths of 128.
  kiln_dnn_attention_desc wide = good;
  wide.d_qk = wide.d_v = 192;
  wide.grad_o = wide.grad_q = wide.grad_k = wide.grad_v = view(q);
  EXPECT_EQ(dnn->attention_backward(d.q, &wide), KILN_ERR_UNSUPPORTED);
  // Equal keys and values of 1: every output is 1, every row's log-sum-exp is
  // log(keys seen) + scale e (each score is scale * e).
  ASSERT_KILN_OK(dnn->attention_forward(d.q, &good));
  for (uint16_t bits : o.read()) EXPECT_EQ(bits, 0x3f80);
  const std::vector<float> lse = stats.read();
  for (uint64_t i = 0; i < b * h * l; ++i)
    EXPECT_NEAR(lse[i], std::log(double(i % l + 1)) + 0.125 * e, 1e-3) << "row " << i;
}

// Pooling references: the first maximum in row-major order wins and takes the gradient.
struct PoolShape {
  uint64_t n, c, h, w;
  uint32_t wh, ww, sh, sw, ph, pw;
  uint64_t p() const { return (h + 2 * ph - wh) / sh + 1; }
  uint64_t q() const { return (w + 2 * pw - ww) / sw + 1; }
};

void pool_reference(const PoolShape& s, kiln_dnn_pool_mode mode, const std::vector<double>& x,
                    const std::vector<double>& dy, std::vector<double>* y,
                    std::vector<double>* dx) {
  const uint64_t P = s.p(), Q = s.q();
  y->assign(s.n * s.c * P * Q, 0.0);
  dx->assign(x.size(), 0.0);
  for (uint64_t nc = 0; nc < s.n * s.c; ++nc)
    for (uint64_t p = 0; p < P; ++p)
      for (uint64_t q = 0; q < Q; ++q) {
        const uint64_t yi = (nc * P + p) * Q + q;
        double best = 0, sum = 0;
        int64_t at = -1, count = 0;
        for (uint32_t r = 0; r < s.wh; ++r)
          for (uint32_t c = 0; c < s.ww; ++c) {
            const int64_t h = int64_t(p * s.sh + r) - s.ph, w = int64_t(q * s.sw + c) - s.pw;
            if (h < 0 || w < 0 || h >= int64_t(s.h) || w >= int64_t(s.w)) continue;
            const int64_t xi = int64_t((nc * s.h + uint64_t(h)) * s.w + uint64_t(w));
            if (at < 0 || x[size_t(xi)] > best) {
              best = x[size_t(xi)];
              at = xi;
            }
            sum += x[size_t(xi)];
            ++count;
          }
        if (mode == KILN_DNN_POOL_MAX) {
          (*y)[yi] = best;
          (*dx)[size_t(at)] += dy[yi];
          continue;
        }
        const double div = mode == KILN_DNN_POOL_AVG_INCLUDE_PAD ? double(s.wh) * s.ww : count;
        (*y)[yi] = sum / div;
        for (uint32_t r = 0; r < s.wh; ++r)
          for (uint32_t c = 0; c < s.ww; ++c) {
            const int64_t h = int64_t(p * s.sh + r) - s.ph, w = int64_t(q * s.sw + c) - s.pw;
            if (h < 0 || w < 0 || h >= int64_t(s.h) || w >= int64_t(s.w)) continue;
            (*dx)[(nc * s.h + uint64_t(h)) * s.w + uint64_t(w)] += dy[yi] / div;
          }
      }
}

template <class T>
void check_pool(const kiln_dnn_v1* dnn, const PoolShape& s, kiln_dnn_pool_mode mode,
                bool negative) {
  SCOPED_TRACE(::testing::Message()
               << "mode " << mode << " " << s.h << "x" << s.w << " window " << s.wh << "x" << s.ww
               << " stride " << s.sh << "," << s.sw << " pad " << s.ph << "," << s.pw
               << (sizeof(T) == 8 ? " f64" : " f32"));
  Device d;
  ASSERT_NE(d.q, nullptr);
  auto x = random_values<T>(s.n * s.c * s.h * s.w, 4);
  if (negative)  // padding must never win a maximum
    for (T& v : x) v = -std::fabs(v) - T(1);
  const auto dy = random_values<T>(s.n * s.c * s.p() * s.q(), 5);
  std::vector<double> yr, dxr;
  pool_reference(s, mode, std::vector<double>(x.begin(), x.end()),
                 std::vector<double>(dy.begin(), dy.end()), &yr, &dxr);
  const T nan = std::numeric_limits<T>::quiet_NaN();
  Buffer<T> xb(d, x), dyb(d, dy), yb(d, std::vector<T>(yr.size(), nan)),
      dxb(d, std::vector<T>(x.size(), nan));
  kiln_dnn_pool_desc pd{};
  pd.dtype = sizeof(T) == 8 ? KILN_DTYPE_F64 : KILN_DTYPE_F32;
  pd.mode = mode;
  pd.n = s.n;
  pd.c = s.c;
  pd.h = s.h;
  pd.w = s.w;
  pd.p = s.p();
  pd.q = s.q();
  pd.win_h = s.wh;
  pd.win_w = s.ww;
  pd.stride_h = s.sh;
  pd.stride_w = s.sw;
  pd.pad_h = s.ph;
  pd.pad_w = s.pw;
  pd.x = xb.ref();
  pd.y = yb.ref();
  pd.dy = dyb.ref();
  pd.dx = dxb.ref();
  ASSERT_KILN_OK(dnn->pool_forward(d.q, &pd));
  const double tol = sizeof(T) == 8 ? 1e-12 : 1e-5;
  EXPECT_LE(rel_error(yb.read(), yr), tol);
  ASSERT_KILN_OK(dnn->pool_backward(d.q, &pd));
  EXPECT_LE(rel_error(dxb.read(), dxr), tol);
}

const PoolShape kPools[] = {
    {2, 3, 8, 8, 2, 2, 2, 2, 0, 0},
    {1, 4, 9, 7, 3, 3, 2, 2, 1, 1},  // overlapping windows, padding
    {2, 2, 10, 12, 3, 2, 1, 2, 1, 0},
};

TEST(CudaDnn, Pool) {
  REQUIRE_DNN();
  for (const PoolShape& s : kPools)
    for (kiln_dnn_pool_mode m :
         {KILN_DNN_POOL_MAX, KILN_DNN_POOL_AVG_INCLUDE_PAD, KILN_DNN_POOL_AVG_EXCLUDE_PAD}) {
      check_pool<float>(dnn, s, m, false);
      check_pool<double>(dnn, s, m, false);
    }
  check_pool<float>(dnn, kPools[1], KILN_DNN_POOL_MAX, true);
}

// Ties: the portable kernels give a window's gradient to its first maximum.
TEST(CudaDnn, MaxPoolTies) {
  REQUIRE_DNN();
  Device d;
  ASSERT_NE(d.q, nullptr);
  Buffer<float> xb(d, std::vector<float>(16, 1.f)), dyb(d, std::vector<float>(4, 1.f)),
      yb(d, std::vector<float>(4, 0.f)), dxb(d, std::vector<float>(16, -1.f));
  kiln_dnn_pool_desc pd{
      KILN_DTYPE_F32, KILN_DNN_POOL_MAX, 1,         1,        4, 4, 2, 2, 2, 2, 2, 2, 0, 0,
      xb.ref(),       yb.ref(),          dyb.ref(), dxb.ref()};
  ASSERT_KILN_OK(dnn->pool_forward(d.q, &pd));
  ASSERT_KILN_OK(dnn->pool_backward(d.q, &pd));
  const auto dx = dxb.read();
  float total = 0;
  for (float v : dx) total += v;
  EXPECT_EQ(total, 4.f) << "each window's gradient lands once";
  EXPECT_EQ(dx[0], 1.f) << "on the window's first element";
}

// Shapes again, now from the algorithm cache, each on a fresh queue (its own handle and
// workspace, grown in stream order, freed with the queue).
TEST(CudaDnn, CachedAlgorithmsOnFreshQueues) {
  REQUIRE_DNN();
  for (int round = 0; round < 2; ++round)
    for (const ConvShape& c : kShapes) check_conv<float>(dnn, c, KILN_DNN_MATH_TF32, 5e-3);
}

}  // namespace
}  // namespace kiln_test
