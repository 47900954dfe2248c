// max_pool2d (values and indices) and avg_pool2d with their backwards on every device, against
// a host reference: kernel, stride, padding, dilation, ceil mode, count_include_pad, unbatched
// inputs, ties and NaN, the vendor path beside the generated kernels, and every error.
#include <cmath>
#include <cstdlib>
#include <kiln/tensor/conv.hpp>
#include <limits>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class TensorPoolTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorPoolTest);

struct config {
  shape_t x;  // [N, C, H, W]
  kiln::pool2d_options o;
};

std::vector<config> configs() {
  return {
      {{2, 3, 8, 8}, {.kernel = {2, 2}}},
      {{1, 2, 9, 7}, {.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}}},
      {{2, 2, 10, 9}, {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 0}, .ceil_mode = true}},
      {{1, 3, 7, 8},
       {.kernel = {3, 3},
        .stride = {2, 3},
        .padding = {1, 1},
        .ceil_mode = true,
        .count_include_pad = false}},
      {{1, 1, 5, 6}, {.kernel = {4, 5}, .stride = {1, 1}, .padding = {2, 2}}},
  };
}

// PyTorch's output size.
std::int64_t out(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p, std::int64_t d,
                 bool ceil) {
  std::int64_t o = (in + 2 * p - d * (k - 1) - 1 + (ceil ? s - 1 : 0)) / s + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}

// The pooled shape [N, C, P, Q] of config c.
shape_t pooled_shape(const config& c, bool dilate) {
  const auto& o = c.o;
  const std::int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0];
  const std::int64_t sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  return {c.x[0], c.x[1],
          out(c.x[2], o.kernel[0], sh, o.padding[0], dilate ? o.dilation[0] : 1, o.ceil_mode),
          out(c.x[3], o.kernel[1], sw, o.padding[1], dilate ? o.dilation[1] : 1, o.ceil_mode)};
}

struct reference {
  shape_t y;
  std::vector<double> max, avg, dmax, davg;
  std::vector<std::int64_t> idx;
};

// Max and average pooling and their backwards for dy, in double, window by window.
template <class T>
reference pool_reference(const config& c, const host<T>& x, const host<T>& dy_host, bool dilate) {
  const auto& o = c.o;
  const std::int64_t n = c.x[0], ch = c.x[1], H = c.x[2], W = c.x[3];
  const std::int64_t sh = o.stride[0] ? o.stride[0] : o.kernel[0];
  const std::int64_t sw = o.stride[1] ? o.stride[1] : o.kernel[1];
  const std::int64_t dh = dilate ? o.dilation[0] : 1, dw = dilate ? o.dilation[1] : 1;
  const std::int64_t P = out(H, o.kernel[0], sh, o.padding[0], dh, o.ceil_mode);
  const std::int64_t Q = out(W, o.kernel[1], sw, o.padding[1], dw, o.ceil_mode);
  reference r{
      {n, ch, P, Q}, {}, {}, std::vector<double>(x.v.size()), std::vector<double>(x.v.size()), {}};
  for (std::int64_t nc = 0; nc < n * ch; ++nc)
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t q = 0; q < Q; ++q) {
        const double g = double(dy_host.v[std::size_t((nc * P + p) * Q + q)]);
        double best = -std::numeric_limits<double>::infinity();
        std::int64_t at = -1;
        for (std::int64_t i = 0; i < o.kernel[0]; ++i)
          for (std::int64_t j = 0; j < o.kernel[1]; ++j) {
            const std::int64_t h = p * sh - o.padding[0] + i * dh,
                               w = q * sw - o.padding[1] + j * dw;
            if (h < 0 || h >= H || w < 0 || w >= W) continue;
            const double v = double(x.v[std::size_t(nc * H * W + h * W + w)]);
            if (at < 0 || v > best || std::isnan(v)) best = v, at = h * W + w;
          }
        r.max.push_back(best);
        r.idx.push_back(at);
        if (at >= 0) r.dmax[std::size_t(nc * H * W + at)] += g;
        // Average: PyTorch's divisor.
        const std::int64_t hs = p * sh - o.padding[0], ws = q * sw - o.padding[1];
        const std::int64_t he = std::min(hs + o.kernel[0], H + o.padding[0]);
        const std::int64_t we = std::min(ws + o.kernel[1], W + o.padding[1]);
        const std::int64_t h0 = std::max<std::int64_t>(hs, 0), w0 = std::max<std::int64_t>(ws, 0);
        const std::int64_t h1 = std::min(he, H), w1 = std::min(we, W);
        const double area =
            double(o.count_include_pad ? (he - hs) * (we - ws) : (h1 - h0) * (w1 - w0));
        double sum = 0;
        for (std::int64_t h = h0; h < h1; ++h)
          for (std::int64_t w = w0; w < w1; ++w) {
            sum += double(x.v[std::size_t(nc * H * W + h * W + w)]);
            r.davg[std::size_t(nc * H * W + h * W + w)] += g / area;
          }
        r.avg.push_back(sum / area);
      }
  return r;
}

template <class T>
::testing::AssertionResult close(const kiln::tensor& got, const shape_t& shape,
                                 const std::vector<double>& want) {
  if (got.shape() != shape)
    return ::testing::AssertionFailure()
           << "shape " << kiln::to_string(got.shape()) << ", expected " << kiln::to_string(shape);
  const std::vector<T> g = got.to_vector<T>();
  const double eps = std::is_same_v<T, float> ? 1e-5 : 1e-13;
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(std::fabs(double(g[i]) - want[i]) <= eps * (1 + std::fabs(want[i]))))
      return ::testing::AssertionFailure()
             << "element " << i << ": " << g[i] << ", expected " << want[i];
  return ::testing::AssertionSuccess();
}

template <class T>
void check(const kiln::device& dev, const config& c, std::uint64_t seed) {
  SCOPED_TRACE("input " + kiln::to_string(c.x) + ", kernel " + std::to_string(c.o.kernel[0]) + "x" +
               std::to_string(c.o.kernel[1]) + (c.o.ceil_mode ? ", ceil" : ""));
  const host<T> x = random_host<T>(c.x, seed);
  const host<T> dy = random_host<T>(pooled_shape(c, false), seed + 1);
  const reference r = pool_reference(c, x, dy, false);
  const kiln::tensor tx = upload(dev, x), tdy = upload(dev, dy);

  const kiln::pooled m = kiln::max_pool2d_with_indices(tx, c.o);
  EXPECT_TRUE(close<T>(m.values, r.y, r.max)) << "max";
  EXPECT_EQ(m.indices.dtype(), kiln::scalar_type::i64);
  EXPECT_EQ(m.indices.to_vector<std::int64_t>(), r.idx);
  EXPECT_TRUE(close<T>(kiln::max_pool2d(tx, c.o), r.y, r.max)) << "max without indices";
  EXPECT_TRUE(close<T>(kiln::max_pool2d_backward(tdy, m.indices, c.x, c.o), c.x, r.dmax))
      << "max backward";
  EXPECT_TRUE(close<T>(kiln::avg_pool2d(tx, c.o), r.y, r.avg)) << "avg";
  EXPECT_TRUE(close<T>(kiln::avg_pool2d_backward(tdy, c.x, c.o), c.x, r.davg)) << "avg backward";
}

TEST_P(TensorPoolTest, MatchesTheHostReference) {
  std::uint64_t seed = 700;
  for (const config& c : configs()) {
    check<float>(dev(), c, seed += 10);
    if (has_f64()) check<double>(dev(), c, seed += 10);
  }
}

// Where the device has a vendor library, the generated kernels are checked as well.
TEST_P(TensorPoolTest, GeneratedKernelsMatchWhereAVendorLibraryExists) {
  ::setenv("KILN_DNN_PORTABLE", "1", 1);
  std::uint64_t seed = 900;
  for (const config& c : configs()) check<float>(dev(), c, seed += 10);
  ::unsetenv("KILN_DNN_PORTABLE");
}

TEST_P(TensorPoolTest, DilatedMaxPooling) {
  const config c{{1, 2, 11, 10},
                 {.kernel = {3, 2}, .stride = {2, 2}, .padding = {1, 1}, .dilation = {2, 3}}};
  const host<float> x = random_host<float>(c.x, 31);
  const host<float> dy = random_host<float>(pooled_shape(c, true), 32);
  const reference r = pool_reference(c, x, dy, true);
  const kiln::pooled m = kiln::max_pool2d_with_indices(upload(dev(), x), c.o);
  EXPECT_TRUE(close<float>(m.values, r.y, r.max));
  EXPECT_EQ(m.indices.to_vector<std::int64_t>(), r.idx);
  EXPECT_TRUE(
      close<float>(kiln::max_pool2d_backward(upload(dev(), dy), m.indices, c.x, c.o), c.x, r.dmax));
}

TEST_P(TensorPoolTest, TiesGoToTheFirstAndNaNPropagates) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // One 2 x 4 plane, 2 x 2 windows: [5 5 | 1 nan] over [5 1 | 2 3].
  const auto x =
      kiln::tensor::from(dev(), std::vector<float>{5, 5, 1, nan, 5, 1, 2, 3}, {1, 1, 2, 4});
  const kiln::pooled m = kiln::max_pool2d_with_indices(x, {.kernel = {2, 2}});
  const auto v = m.values.to_vector<float>();
  EXPECT_EQ(v[0], 5.f);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(m.indices.to_vector<std::int64_t>(), (std::vector<std::int64_t>{0, 3}));
  EXPECT_TRUE(std::isnan(kiln::max_pool2d(x, {.kernel = {2, 2}}).to_vector<float>()[1]));
}

TEST_P(TensorPoolTest, UnbatchedInputsAndOneLaunchEach) {
  const host<float> x = random_host<float>({3, 6, 6}, 41);
  const auto t = upload(dev(), x);
  const kiln::pooled m = kiln::max_pool2d_with_indices(t, {.kernel = {2, 2}});
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_EQ(m.values.shape(), (shape_t{3, 3, 3}));
  EXPECT_EQ(m.values.to_vector<float>(),
            kiln::max_pool2d_with_indices(t.unsqueeze(0), {.kernel = {2, 2}})
                .values.squeeze(0)
                .to_vector<float>());
  const auto dx = kiln::max_pool2d_backward(kiln::tensor::ones(dev(), {3, 3, 3}), m.indices,
                                            {3, 6, 6}, {.kernel = {2, 2}});
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_EQ(dx.sum().item<float>(), 27.f);  // one winner per window
  const auto a = kiln::avg_pool2d(t, {.kernel = {3, 3}, .stride = {3, 3}});
  EXPECT_EQ(a.shape(), (shape_t{3, 2, 2}));
}

TEST_P(TensorPoolTest, BadInputsGiveClearErrors) {
  const auto x = kiln::tensor::randn(dev(), {1, 2, 6, 6}, 51);
  EXPECT_THROW(kiln::max_pool2d(x, {.kernel = {0, 2}}), kiln::invalid_argument);
  EXPECT_THROW(kiln::max_pool2d(x, {.kernel = {2, 2}, .padding = {2, 0}}),
               kiln::invalid_argument);  // more than half the kernel
  EXPECT_THROW(kiln::avg_pool2d(x, {.kernel = {2, 2}, .dilation = {2, 2}}), kiln::invalid_argument);
  EXPECT_THROW(kiln::max_pool2d(x, {.kernel = {7, 7}}), kiln::shape_error);
  EXPECT_THROW(kiln::max_pool2d(x.view({12, 6}), {}), kiln::shape_error);
  EXPECT_THROW(kiln::avg_pool2d(x.to(kiln::scalar_type::i32), {}), kiln::dtype_error);
  const kiln::pooled m = kiln::max_pool2d_with_indices(x, {});
  EXPECT_THROW(
      kiln::max_pool2d_backward(m.values, m.indices.to(kiln::scalar_type::i32), x.shape(), {}),
      kiln::dtype_error);
  EXPECT_THROW(
      {
        try {
          kiln::max_pool2d_backward(m.values, m.indices, {1, 2, 8, 8}, {});
        } catch (const kiln::shape_error& e) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr("[1, 2, 3, 3]"));
          EXPECT_THAT(e.what(), ::testing::HasSubstr("[1, 2, 4, 4]"));
          throw;
        }
      },
      kiln::shape_error);
  EXPECT_THROW(kiln::avg_pool2d_backward(m.values, {1, 2, 8, 8}, {}), kiln::shape_error);
}

}  // namespace
}  // namespace tensor_test
