// cuDNN's two convolution paths side by side: the graph (backend) API, tried first, and the
// legacy API it falls back to (KILN_CUDNN_GRAPH=0 forces that one). Each direction in f32, f32
// with TF32, f64, bf16 and f16 must match a direct convolution in double on both paths, and the
// two paths must agree with each other. Only where the device runs convolutions in cuDNN (the
// CUDA backend with cuDNN loaded); elsewhere there is one path, checked by conv_test.cpp.
#include <cmath>
#include <cstdlib>
#include <kiln/tensor/conv.hpp>
#include <optional>
#include <string>

#include "conformance/scoped_env.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class TensorConvGraphTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorConvGraphTest);

using conformance::scoped_env;

struct shape_case {
  shape_t x, w;
  kiln::conv2d_options o;
};

// The conv_test options, plus tensor-core-friendly channel counts, ResNet's 7 x 7 / 2 stem
// (3 input channels) and a 1 x 1.
std::vector<shape_case> shapes() {
  return {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, {}},
      {{1, 2, 9, 9}, {3, 2, 3, 2}, {.stride = {2, 1}, .padding = {1, 2}}},
      {{2, 4, 8, 7}, {6, 2, 3, 3}, {.padding = {1, 1}, .groups = 2}},
      {{1, 3, 11, 10}, {2, 3, 3, 3}, {.stride = {2, 3}, .padding = {2, 1}, .dilation = {2, 3}}},
      {{2, 6, 5, 5}, {6, 1, 3, 3}, {.padding = {1, 1}, .groups = 6}},
      {{2, 16, 12, 12}, {32, 16, 3, 3}, {.padding = {1, 1}}},
      {{2, 3, 16, 16}, {8, 3, 7, 7}, {.stride = {2, 2}, .padding = {3, 3}}},
      {{2, 32, 8, 8}, {16, 32, 1, 1}, {}},
  };
}

// The reference: values and sums of |terms| per element, of the three directions.
struct reference {
  std::vector<double> y, y_mag, x, x_mag, w, w_mag;
  std::int64_t y_terms, x_terms, w_terms;
};

reference direct(const shape_case& c, const shape_t& ys, const std::vector<double>& x,
                 const std::vector<double>& w, const std::vector<double>& dy) {
  const std::int64_t n = c.x[0], ch = c.x[1], h = c.x[2], wd = c.x[3], k = c.w[0], r = c.w[2],
                     s = c.w[3], p = ys[2], q = ys[3], g = c.o.groups, cg = ch / g, kg = k / g;
  reference out{std::vector<double>(dy.size()),
                std::vector<double>(dy.size()),
                std::vector<double>(x.size()),
                std::vector<double>(x.size()),
                std::vector<double>(w.size()),
                std::vector<double>(w.size()),
                cg * r * s,
                kg * r * s,
                n * p * q};
  for (std::int64_t b = 0; b < n; ++b)
    for (std::int64_t ko = 0; ko < k; ++ko)
      for (std::int64_t pi = 0; pi < p; ++pi)
        for (std::int64_t qi = 0; qi < q; ++qi)
          for (std::int64_t cl = 0; cl < cg; ++cl)
            for (std::int64_t ri = 0; ri < r; ++ri)
              for (std::int64_t si = 0; si < s; ++si) {
                const std::int64_t hi = pi * c.o.stride[0] - c.o.padding[0] + ri * c.o.dilation[0];
                const std::int64_t wi = qi * c.o.stride[1] - c.o.padding[1] + si * c.o.dilation[1];
                if (hi < 0 || hi >= h || wi < 0 || wi >= wd) continue;
                const std::int64_t ci = (ko / kg) * cg + cl;
                const auto xi = static_cast<std::size_t>(((b * ch + ci) * h + hi) * wd + wi);
                const auto fi = static_cast<std::size_t>(((ko * cg + cl) * r + ri) * s + si);
                const auto yi = static_cast<std::size_t>(((b * k + ko) * p + pi) * q + qi);
                const double ty = x[xi] * w[fi], tx = dy[yi] * w[fi], tw = dy[yi] * x[xi];
                out.y[yi] += ty, out.y_mag[yi] += std::fabs(ty);
                out.x[xi] += tx, out.x_mag[xi] += std::fabs(tx);
                out.w[fi] += tw, out.w_mag[fi] += std::fabs(tw);
              }
  return out;
}

// Operand values held exactly in T (16-bit values rounded once), with their doubles.
template <class T>
std::vector<T> as(const std::vector<double>& v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    std::vector<T> out;
    for (double d : v) out.push_back(T(static_cast<float>(d)));
    return out;
  }
}
template <class T>
std::vector<double> exact(const std::vector<double>& v) {
  if constexpr (std::is_same_v<T, double>) {
    return v;
  } else {
    std::vector<double> out;
    for (T t : as<T>(v)) out.push_back(static_cast<double>(static_cast<float>(t)));
    return out;
  }
}

template <class T>
std::vector<double> values_of(const kiln::tensor& t) {
  if constexpr (std::is_same_v<T, double>) {
    return t.to_vector<double>();
  } else {
    const std::vector<float> f = t.to(kiln::scalar_type::f32).to_vector<float>();
    return {f.begin(), f.end()};
  }
}

// Per element: `unit` (the input rounding of the type or TF32, times four) plus accumulation in
// the compute type, relative to sum |terms|.
struct tolerance {
  double unit, eps;
  double of(double mag, std::int64_t terms) const {
    return (unit + 2.0 * double(terms + 2) * eps) * mag + 1e-300;
  }
};

::testing::AssertionResult near(const std::vector<double>& got, const std::vector<double>& want,
                                const std::vector<double>& mag, std::int64_t terms,
                                const tolerance& tol, double factor = 1) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << got.size() << " elements, expected " << want.size();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double t = factor * tol.of(mag[i], terms);
    if (!(std::fabs(got[i] - want[i]) <= t))
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << ", expected "
                                           << want[i] << " (tolerance " << t << ")";
  }
  return ::testing::AssertionSuccess();
}

struct results {
  std::vector<double> y, x, w;
};

template <class T>
void check_both_paths(const kiln::device& dev, const shape_case& c, bool tf32, std::uint64_t seed) {
  const kiln::scalar_type t = kiln::scalar_type_of<T>;
  SCOPED_TRACE("input " + kiln::to_string(c.x) + ", weight " + kiln::to_string(c.w) + ", " +
               kiln::type_name(t) + (tf32 ? " (TF32)" : ""));
  kiln::conv2d_options o = c.o;
  o.tf32 = tf32;
  const std::int64_t p =
      (c.x[2] + 2 * o.padding[0] - o.dilation[0] * (c.w[2] - 1) - 1) / o.stride[0] + 1;
  const std::int64_t q =
      (c.x[3] + 2 * o.padding[1] - o.dilation[1] * (c.w[3] - 1) - 1) / o.stride[1] + 1;
  const shape_t ys{c.x[0], c.w[0], p, q};
  const auto x = random_host<double>(c.x, seed).v, w = random_host<double>(c.w, seed + 1).v,
             dy = random_host<double>(ys, seed + 2).v;
  const reference ref = direct(c, ys, exact<T>(x), exact<T>(w), exact<T>(dy));
  const double eps = std::is_same_v<T, double> ? 0x1p-52 : 0x1p-23;
  const double unit = t == kiln::scalar_type::bf16  ? 4 * 0x1p-8
                      : t == kiln::scalar_type::f16 ? 4 * 0x1p-11
                      : tf32                        ? 4 * 0x1p-10
                                                    : 0.0;
  const tolerance tol{unit, eps};

  const kiln::tensor tx = kiln::tensor::from(dev, as<T>(x), c.x);
  const kiln::tensor tw = kiln::tensor::from(dev, as<T>(w), c.w);
  const kiln::tensor tdy = kiln::tensor::from(dev, as<T>(dy), ys);
  results r[2];
  for (int graph = 0; graph < 2; ++graph) {
    SCOPED_TRACE(graph ? "KILN_CUDNN_GRAPH=1" : "KILN_CUDNN_GRAPH=0");
    scoped_env env("KILN_CUDNN_GRAPH", graph ? "1" : "0");
    r[graph].y = values_of<T>(kiln::conv2d(tx, tw, {}, o));
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
    r[graph].x = values_of<T>(kiln::conv2d_backward_data(tdy, tw, c.x, o));
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
    r[graph].w = values_of<T>(kiln::conv2d_backward_filter(tx, tdy, c.w, o));
    EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
    EXPECT_TRUE(near(r[graph].y, ref.y, ref.y_mag, ref.y_terms, tol)) << "forward";
    EXPECT_TRUE(near(r[graph].x, ref.x, ref.x_mag, ref.x_terms, tol)) << "backward data";
    EXPECT_TRUE(near(r[graph].w, ref.w, ref.w_mag, ref.w_terms, tol)) << "backward filter";
  }
  // Each path within the tolerance of the reference: within twice it of each other.
  EXPECT_TRUE(near(r[1].y, r[0].y, ref.y_mag, ref.y_terms, tol, 2)) << "forward, graph vs legacy";
  EXPECT_TRUE(near(r[1].x, r[0].x, ref.x_mag, ref.x_terms, tol, 2))
      << "backward data, graph vs legacy";
  EXPECT_TRUE(near(r[1].w, r[0].w, ref.w_mag, ref.w_terms, tol, 2))
      << "backward filter, graph vs legacy";
}

TEST_P(TensorConvGraphTest, GraphAndLegacyCudnnPathsMatchTheReferenceAndEachOther) {
  const kiln::tensor probe = kiln::tensor::randn(dev(), {1, 2, 5, 5}, 3);
  kiln::conv2d(probe, kiln::tensor::randn(dev(), {2, 2, 3, 3}, 4));
  if (dev().backend() != "cuda" || kiln::last_conv_path() != kiln::conv_path::vendor)
    GTEST_SKIP() << dev().id()
                 << " does not run convolutions in cuDNN (no CUDA device, or no cuDNN): there is "
                    "no graph or legacy path to compare";
  std::uint64_t seed = 1300;
  for (const shape_case& c : shapes()) {
    check_both_paths<float>(dev(), c, false, seed += 10);
    check_both_paths<float>(dev(), c, true, seed += 10);
    if (dev().supports(kiln::feature::fp64)) check_both_paths<double>(dev(), c, false, seed += 10);
    check_both_paths<kiln::bfloat16>(dev(), c, false, seed += 10);
    check_both_paths<kiln::half>(dev(), c, false, seed += 10);
  }
}

// The graph path really runs (rather than always refusing and leaving every call to the legacy
// one, which the test above would not notice): with KILN_LOG=debug the plugin names the engine
// it chose for each new shape, on stderr.
TEST_P(TensorConvGraphTest, GraphPathChoosesAnEngineForANewShape) {
  const kiln::tensor probe = kiln::tensor::randn(dev(), {1, 2, 5, 5}, 3);
  kiln::conv2d(probe, kiln::tensor::randn(dev(), {2, 2, 3, 3}, 4));
  if (dev().backend() != "cuda" || kiln::last_conv_path() != kiln::conv_path::vendor)
    GTEST_SKIP() << dev().id() << " does not run convolutions in cuDNN: no graph path";
  // A shape no other test uses, new on every repetition (plans are cached per shape).
  static std::int64_t repetition = 0;
  const std::int64_t n = 3 + repetition++;
  const kiln::tensor x = kiln::tensor::randn(dev(), {n, 24, 10, 10}, 5);
  const kiln::tensor w = kiln::tensor::randn(dev(), {40, 24, 3, 3}, 6);
  std::string log;
  {
    scoped_env graph("KILN_CUDNN_GRAPH", "1"), verbose("KILN_LOG", "debug");
    ::testing::internal::CaptureStderr();
    const kiln::tensor y = kiln::conv2d(x, w, {}, {.padding = {1, 1}});
    y.to_vector<float>();
    log = ::testing::internal::GetCapturedStderr();
  }
  EXPECT_EQ(kiln::last_conv_path(), kiln::conv_path::vendor);
  EXPECT_NE(log.find("conv_forward"), std::string::npos) << log;
  EXPECT_NE(log.find("graph engine"), std::string::npos) << "the graph API refused:\n" << log;
}

}  // namespace
}  // namespace tensor_test
