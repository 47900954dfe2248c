// Tensor operations under kiln::fallback_scope (src/tensor/fallback.cpp), on every device: a
// fused expression, a reduction, matmul and conv2d that fail on their device (faults injected
// at the plugin boundary) run again on the next device, on copies of their inputs, and match
// a host reference; the caller's tensors stay where they were; caller errors never move.
// Also tensor::to(device).
#include <kiln/fallback.hpp>
#include <kiln/tensor/conv.hpp>
#include <kiln/tensor/linalg.hpp>
#include <kiln/testing/fault_injection.hpp>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::testing::fault;

class TensorFallbackTest : public TensorTest {
 protected:
  void TearDown() override { kiln::testing::clear_faults(); }
};

TEST_P(TensorFallbackTest, AFusedExpressionMovesWhenItsLaunchFails) {
  const auto to = other();
  if (!to) GTEST_SKIP() << "no second device to fall back to";
  const auto av = values<float>(3 * 257, 1), bv = values<float>(257, 2);
  const auto a = kiln::tensor::from(dev(), av, {3, 257});
  const auto b = kiln::tensor::from(dev(), bv, {257});
  const std::uint64_t moves = kiln::fallback::moves_made();
  kiln::testing::inject_fault(dev(), fault::launch, 1);
  kiln::tensor y;
  {
    kiln::fallback_scope scope(kiln::fallback{dev(), *to});
    y = kiln::relu(a * b + 1.5f).sum(1);
    y.eval();
  }
  EXPECT_EQ(kiln::testing::faults_fired(dev(), fault::launch), 1);
  EXPECT_EQ(kiln::fallback::moves_made(), moves + 1);
  EXPECT_EQ(y.get_device(), *to) << "the result lives where it was made";
  EXPECT_EQ(a.get_device(), dev()) << "the caller's tensors stay where they were";
  const auto got = y.to_vector<float>();
  ASSERT_EQ(got.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    double want = 0;
    for (int c = 0; c < 257; ++c)
      want += std::max(0.0, double(av[std::size_t(r * 257 + c)]) * bv[std::size_t(c)] + 1.5);
    EXPECT_NEAR(got[std::size_t(r)], want, 1e-4 * (1 + std::abs(want))) << "row " << r;
  }
}

TEST_P(TensorFallbackTest, WithoutAScopeTheFailurePropagates) {
  const auto a = kiln::tensor::from(dev(), values<float>(64, 3));
  kiln::testing::inject_fault(dev(), fault::launch, 1);
  EXPECT_THROW((kiln::exp(a) * 3.25f - 0.125f).eval(), kiln::backend_failure);
}

TEST_P(TensorFallbackTest, MatmulAndConvMoveWhenTheirOutputCannotBeAllocated) {
  const auto to = other();
  if (!to) GTEST_SKIP() << "no second device to fall back to";
  const auto av = values<float>(5 * 7, 4), bv = values<float>(7 * 3, 5);
  const auto a = kiln::tensor::from(dev(), av, {5, 7});
  const auto b = kiln::tensor::from(dev(), bv, {7, 3});
  const auto xv = values<float>(1 * 2 * 6 * 6, 6), wv = values<float>(4 * 2 * 3 * 3, 7);
  const auto x = kiln::tensor::from(dev(), xv, {1, 2, 6, 6});
  const auto w = kiln::tensor::from(dev(), wv, {4, 2, 3, 3});
  kiln::tensor c, y;
  {
    kiln::fallback_scope scope(kiln::fallback{dev(), *to});
    kiln::testing::inject_fault(dev(), fault::allocate, 2);  // the try and its retry
    c = kiln::matmul(a, b);
    kiln::testing::inject_fault(dev(), fault::allocate, 2);
    y = kiln::conv2d(x, w);
  }
  EXPECT_EQ(c.get_device(), *to);
  EXPECT_EQ(y.get_device(), *to);
  const auto cv = c.to_vector<float>();
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      double want = 0;
      for (int k = 0; k < 7; ++k)
        want += double(av[std::size_t(i * 7 + k)]) * bv[std::size_t(k * 3 + j)];
      EXPECT_NEAR(cv[std::size_t(i * 3 + j)], want, 1e-4 * (1 + std::abs(want)));
    }
  ASSERT_EQ(y.shape(), (kiln::shape_t{1, 4, 4, 4}));
  const auto yv = y.to_vector<float>();
  for (int k = 0; k < 4; ++k)
    for (int p = 0; p < 4; ++p)
      for (int q = 0; q < 4; ++q) {
        double want = 0;
        for (int ch = 0; ch < 2; ++ch)
          for (int r = 0; r < 3; ++r)
            for (int s = 0; s < 3; ++s)
              want += double(xv[std::size_t((ch * 6 + p + r) * 6 + q + s)]) *
                      wv[std::size_t(((k * 2 + ch) * 3 + r) * 3 + s)];
        EXPECT_NEAR(yv[std::size_t((k * 4 + p) * 4 + q)], want, 1e-4 * (1 + std::abs(want)));
      }
}

TEST_P(TensorFallbackTest, CallerErrorsNeverMove) {
  const auto to = other();
  if (!to) GTEST_SKIP() << "no second device to fall back to";
  const auto a = kiln::tensor::from(dev(), values<float>(6, 8), {2, 3});
  const std::uint64_t moves = kiln::fallback::moves_made();
  kiln::fallback_scope scope(kiln::fallback{dev(), *to});
  EXPECT_THROW(kiln::matmul(a, a), kiln::shape_error);
  EXPECT_EQ(kiln::fallback::moves_made(), moves);
}

TEST_P(TensorFallbackTest, ToCopiesToADeviceAndLeavesTheSourceAlone) {
  const auto av = values<float>(4 * 9, 9);
  const auto a = kiln::tensor::from(dev(), av, {4, 9});
  EXPECT_EQ(a.to(dev()).impl(), a.impl()) << "already there: itself";
  for (const kiln::device& d : kiln::device::all()) {
    SCOPED_TRACE(d.id());
    const kiln::tensor view = a.slice(1, 2, 8, 3);  // strided: copies the span it uses
    const kiln::tensor lazy = a * 2.f;
    const kiln::tensor v = view.to(d), l = lazy.to(d);
    EXPECT_EQ(v.get_device(), d);
    EXPECT_EQ(v.to_vector<float>(), view.to_vector<float>());
    EXPECT_EQ(l.to_vector<float>(), lazy.to_vector<float>());
    EXPECT_EQ(a.get_device(), dev());
    EXPECT_EQ(a.to_vector<float>(), av);
  }
  EXPECT_THROW(kiln::tensor{}.to(dev()), kiln::invalid_argument);
  EXPECT_THROW(a.to(kiln::device{nullptr}), kiln::invalid_argument);
}

KILN_INSTANTIATE_TENSOR_PER_DEVICE(TensorFallbackTest);

}  // namespace
}  // namespace tensor_test
