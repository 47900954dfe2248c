// Elementwise kernels over strided inputs on every device, each element against the host. On
// GPU-like devices outputs of 1M+ elements run in vector lanes (tensor/kernel.hpp
// vector_lanes): f16/bf16/f32 arrays read along their rows move as 4- to 16-byte words, the
// lanes set by the last dimension and where each input's words start; other inputs are read lane
// by lane. The shapes below reach 8, 4, 2 and 1 lanes: attention's head split and merge
// (permuted views), a bias broadcast along rows, a transposed input, a column broadcast along
// the last dimension, views that start off a word boundary.
#include <kiln/kiln.hpp>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::bfloat16;
using kiln::scalar_type;

class StridedLanesTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(StridedLanesTest);

// Seeded floats in [-4, 4], rounded to T (never zero).
template <class T>
std::vector<T> seeded(std::size_t n, std::uint64_t seed) {
  const std::vector<float> f = conformance::random_values<float>(n, seed, -4.f, 4.f);
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = T(f[i] == 0.f ? 0.5f : f[i]);
  return v;
}

template <class T>
bool same(T a, T b) {
  if constexpr (std::is_same_v<T, float>)
    return a == b;
  else
    return a.bits == b.bits;
}

// [B, T, H, D] -> [B, H, T, D] (the head split) and back (the merge), every element.
template <class T>
void check_head_permutes(const kiln::device& dev, std::int64_t b, std::int64_t t, std::int64_t h,
                         std::int64_t d) {
  SCOPED_TRACE("head dim " + std::to_string(d));
  const std::size_t n = std::size_t(b * t * h * d);
  const std::vector<T> v = seeded<T>(n, 7 + std::uint64_t(d));
  const kiln::tensor x = kiln::tensor::from(dev, v, {b, t, h, d});
  const std::vector<T> split = x.transpose(1, 2).contiguous().template to_vector<T>();
  ASSERT_EQ(split.size(), n);
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t k = 0; k < h; ++k)
      for (std::int64_t j = 0; j < t; ++j)
        for (std::int64_t e = 0; e < d; ++e) {
          const std::size_t got = std::size_t(((i * h + k) * t + j) * d + e);
          const std::size_t want = std::size_t(((i * t + j) * h + k) * d + e);
          ASSERT_TRUE(same(split[got], v[want])) << i << "," << k << "," << j << "," << e;
        }
  // The merge reads the split back through a permuted view, scaled on the way (exact: by 2).
  const kiln::tensor heads = kiln::tensor::from(dev, split, {b, h, t, d});
  const std::vector<T> merged = (heads.transpose(1, 2) * 2).template to_vector<T>();
  for (std::size_t i = 0; i < n; ++i) ASSERT_TRUE(same(merged[i], T(float(v[i]) * 2.f))) << i;
}

TEST_P(StridedLanesTest, HeadSplitAndMergeGiveEveryElement) {
  check_head_permutes<bfloat16>(dev(), 4, 256, 8, 128);  // 8 lanes
  check_head_permutes<bfloat16>(dev(), 4, 1024, 8, 36);  // 4
  check_head_permutes<bfloat16>(dev(), 4, 8192, 6, 6);   // 2
  check_head_permutes<bfloat16>(dev(), 4, 8192, 5, 7);   // element by element
  check_head_permutes<float>(dev(), 4, 256, 8, 128);     // f32 words
  check_head_permutes<float>(dev(), 4, 8192, 6, 6);
}

// A [rows, cols] bf16 array plus a row vector broadcast over the rows: the vector in f32 (words
// when it starts on a 16-byte boundary, lane by lane from an odd offset) and in bf16.
TEST_P(StridedLanesTest, BiasBroadcastAlongRows) {
  const std::int64_t rows = 8192, cols = 136;
  const std::vector<bfloat16> a = seeded<bfloat16>(std::size_t(rows * cols), 21);
  const std::vector<float> bias =
      conformance::random_values<float>(std::size_t(cols) + 1, 22, -4.f, 4.f);
  const kiln::tensor x = kiln::tensor::from(dev(), a, {rows, cols});
  const kiln::tensor all = kiln::tensor::from(dev(), bias);
  for (std::int64_t off : {0, 1}) {
    const kiln::tensor b = all.slice(0, off, off + cols);
    const std::vector<float> got = (x + b).to_vector<float>();
    for (std::size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], float(a[i]) + bias[i % std::size_t(cols) + std::size_t(off)])
          << "offset " << off << ", " << i;
  }
  const kiln::tensor hb = all.slice(0, 0, cols).to(scalar_type::bf16);
  const std::vector<bfloat16> got = kiln::relu(x - hb).to_vector<bfloat16>();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const float want = std::max(float(a[i]) - float(bfloat16(bias[i % std::size_t(cols)])), 0.f);
    ASSERT_EQ(got[i].bits, bfloat16(want).bits) << i;
  }
}

// Inputs whose last dimension is not read along a row: a transposed one (strided lane by lane)
// and a column broadcast along the last dimension (one value for the whole vector), beside a
// contiguous one; then views whose words start off a boundary (fewer lanes).
TEST_P(StridedLanesTest, TransposedBroadcastAndOffsetInputs) {
  const std::int64_t b = 256, m = 64;
  const std::size_t n = std::size_t(b * m * m);
  const std::vector<bfloat16> p = seeded<bfloat16>(n, 31), q = seeded<bfloat16>(n, 32);
  const std::vector<bfloat16> c = seeded<bfloat16>(std::size_t(b * m), 33);
  const kiln::tensor tp = kiln::tensor::from(dev(), p, {b, m, m});
  const kiln::tensor tq = kiln::tensor::from(dev(), q, {b, m, m});
  const kiln::tensor col = kiln::tensor::from(dev(), c, {b, m, 1});
  const std::vector<bfloat16> got = (tp.transpose(1, 2) + tq * col).to_vector<bfloat16>();
  for (std::int64_t i = 0; i < b; ++i)
    for (std::int64_t r = 0; r < m; ++r)
      for (std::int64_t k = 0; k < m; ++k) {
        const std::size_t at = std::size_t((i * m + r) * m + k);
        const float want = float(p[std::size_t((i * m + k) * m + r)]) +
                           float(q[at]) * float(c[std::size_t(i * m + r)]);
        ASSERT_EQ(got[at].bits, bfloat16(want).bits) << i << "," << r << "," << k;
      }
  // [rows, 130] sliced to 128 columns from column 1 (no lanes) or 2 (2 lanes), with a bf16
  // contiguous operand.
  const std::int64_t rows = 8192;
  const std::vector<bfloat16> w = seeded<bfloat16>(std::size_t(rows * 130), 34);
  const std::vector<bfloat16> z = seeded<bfloat16>(std::size_t(rows * 128), 35);
  const kiln::tensor tw = kiln::tensor::from(dev(), w, {rows, 130});
  const kiln::tensor tz = kiln::tensor::from(dev(), z, {rows, 128});
  for (std::int64_t off : {1, 2}) {
    const std::vector<bfloat16> sum = (tw.slice(1, off, off + 128) - tz).to_vector<bfloat16>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t k = 0; k < 128; ++k) {
        const float want =
            float(w[std::size_t(r * 130 + k + off)]) - float(z[std::size_t(r * 128 + k)]);
        ASSERT_EQ(sum[std::size_t(r * 128 + k)].bits, bfloat16(want).bits)
            << "offset " << off << ", " << r << "," << k;
      }
  }
}

}  // namespace
}  // namespace tensor_test
