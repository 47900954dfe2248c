// transpose_copy and transpose_ on tensors: values moved exactly (against a host coordinate
// map), one launch each, the kernel cached per dtype, and every kernel source compiled for
// CUDA through NVRTC. Their errors are in linalg_test.cpp.
#include "tensor/tensor_fixture.hpp"
#include "tensor/transpose.hpp"

namespace tensor_test {
namespace {

class TensorLinalgTransposeTest : public TensorTest {
 protected:
  bool has_f64() const { return dev().supports(kiln::feature::fp64); }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorLinalgTransposeTest);

// h with its last two dimensions swapped.
template <class T>
host<T> swapped(const host<T>& h) {
  shape_t s = h.shape;
  std::swap(s.end()[-1], s.end()[-2]);
  return remap<T>(h, s, [](shape_t c) {
    std::swap(c.end()[-1], c.end()[-2]);
    return c;
  });
}

TEST_P(TensorLinalgTransposeTest, TransposeCopy) {
  const auto check = [&]<class T>(const host<T>& h, const kiln::tensor& x) {
    const kiln::tensor r = kiln::transpose_copy(x);
    EXPECT_EQ(stats().kernel_launches, h.v.empty() ? 0u : 1u);
    EXPECT_TRUE(r.is_contiguous());
    EXPECT_TRUE(matches(r, swapped(h)));
  };
  for (const shape_t& s : {shape_t{1, 1}, shape_t{3, 5}, shape_t{17, 33}, shape_t{0, 4}}) {
    SCOPED_TRACE(kiln::to_string(s));
    const host<float> h = random_host<float>(s, 60);
    check(h, upload(dev(), h));
    const host<std::int32_t> hi = random_host<std::int32_t>(s, 61);
    check(hi, upload(dev(), hi));
  }
  // From views: a transposed one, and every other column of a wider matrix.
  const host<double> hd = random_host<double>({6, 20}, 62);
  if (has_f64()) check(swapped(hd), upload(dev(), hd).t());
  const host<float> hw = random_host<float>({18, 20}, 63);
  check(remap<float>(hw, {18, 10},
                     [](shape_t c) {
                       return shape_t{c[0], 2 * c[1]};
                     }),
        upload(dev(), hw).slice(1, 0, 20, 2));
  const host<bool> hb = random_host<bool>({4, 3}, 64);
  check(hb, upload(dev(), hb));
  // The kernel is cached: a new size compiles nothing.
  kiln::transpose_copy(upload(dev(), random_host<float>({9, 2}, 65)));
  EXPECT_EQ(stats().programs_compiled, 0u);
}

TEST_P(TensorLinalgTransposeTest, TransposeInPlace) {
  for (const std::int64_t n : {1, 5, 19}) {
    SCOPED_TRACE(n);
    const host<float> h = random_host<float>({n, n}, 70);
    const kiln::tensor x = upload(dev(), h);
    EXPECT_EQ(kiln::transpose_(x).impl(), x.impl());
    EXPECT_EQ(stats().kernel_launches, n > 1 ? 1u : 0u);
    EXPECT_TRUE(matches(x, swapped(h)));
  }
  // A transposed view in place, and a lazy tensor (evaluated into its own storage first).
  const host<std::int64_t> h = random_host<std::int64_t>({4, 4}, 71);
  const kiln::tensor base = upload(dev(), h);
  kiln::transpose_(base.t());
  EXPECT_TRUE(matches(base, swapped(h)));
  const host<float> hf = random_host<float>({3, 3}, 72);
  const kiln::tensor lazy = upload(dev(), hf) + 0.f;
  kiln::transpose_(lazy);
  EXPECT_TRUE(matches(lazy, swapped(hf)));
}

// Every transpose kernel compiles for CUDA too (NVRTC, where the backend is compile-only).
TEST_P(TensorLinalgTransposeTest, TransposeSourcesCompileEverywhere) {
  using v = kiln::detail::transpose_variant;
  for (const auto t : {kiln::scalar_type::f32, kiln::scalar_type::f64, kiln::scalar_type::boolean,
                       kiln::scalar_type::i64})
    for (const v var : {v::tiled, v::copy, v::swap})
      EXPECT_NO_THROW(conformance::compile_everywhere(kiln::detail::transpose_source(t, var)));
}

}  // namespace
}  // namespace tensor_test
