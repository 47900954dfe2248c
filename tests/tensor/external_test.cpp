// Memory shared without copies (tensor::data_ptr, tensor::from_external) on every device: the
// address is the storage (writes through it show, the same pointer wraps back), the owner's
// release runs once after the last user, strides are kept, and backends without addresses
// (OpenCL) and bad input are refused clearly.
#include <atomic>
#include <kiln/tensor/inplace.hpp>

#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

class ExternalMemoryTest : public TensorTest {
 protected:
  // OpenCL buffers have no address: both calls must say so.
  bool addressable() const { return dev().backend() != "opencl"; }
};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ExternalMemoryTest);

TEST_P(ExternalMemoryTest, DataPtrIsTheStorageAndWrapsBackWithoutACopy) {
  const std::vector<float> v = values<float>(1000, 3);
  const kiln::tensor t = kiln::tensor::from(dev(), v, {10, 100});
  if (!addressable()) {
    EXPECT_THROW((void)t.data_ptr(), kiln::unsupported);
    EXPECT_THROW((void)kiln::tensor::from_external(dev(), reinterpret_cast<void*>(64), {4},
                                                   kiln::scalar_type::f32, {}, nullptr),
                 kiln::unsupported);
    return;
  }
  void* p = t.data_ptr();
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(t.data_ptr(), p);
  // A view's address is offset by its first element.
  EXPECT_EQ(t.slice(0, 2, 5).data_ptr(), static_cast<char*>(p) + 2 * 100 * sizeof(float));
  std::atomic<int> released{0};
  {
    const kiln::tensor w = kiln::tensor::from_external(dev(), p, {10, 100}, kiln::scalar_type::f32,
                                                       {}, [&] { released++; });
    EXPECT_EQ(w.data_ptr(), p);
    EXPECT_EQ(w.to_vector<float>(), v);
    // A kernel writes the shared storage in place: the original tensor sees it.
    kiln::copy_(w, w * 2.f);
    const std::vector<float> doubled = t.to_vector<float>();
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(doubled[i], v[i] * 2.f) << i;
    EXPECT_EQ(released.load(), 0);
  }
  EXPECT_EQ(released.load(), 1);                      // once, after the last tensor over it
  if (dev().info().type == kiln::device_type::cpu) {  // host memory: read it directly
    const float* f = static_cast<const float*>(p);
    for (std::size_t i = 0; i < v.size(); ++i) ASSERT_EQ(f[i], v[i] * 2.f) << i;
  }
}

TEST_P(ExternalMemoryTest, HostMemoryOwnedElsewhereWithStrides) {
  if (dev().info().type != kiln::device_type::cpu || !addressable())
    GTEST_SKIP() << dev().id() << " does not address host memory";
  // A column-major 3 x 4 matrix (strides 1, 3), as NumPy's Fortran order or a transpose.
  auto owner = std::make_shared<std::vector<double>>(12);
  for (int i = 0; i < 12; ++i) (*owner)[std::size_t(i)] = i + 0.5;
  std::atomic<int> released{0};
  kiln::tensor m = kiln::tensor::from_external(dev(), owner->data(), {3, 4}, kiln::scalar_type::f64,
                                               {1, 3}, [owner, &released] { released++; });
  const std::vector<double> got = (m + 0.0).to_vector<double>();
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(got[std::size_t(r * 4 + c)], c * 3 + r + 0.5);
  (*owner)[4] = -7;  // the tensor reads the owner's memory, not a copy
  EXPECT_EQ(m.to_vector<double>()[5], -7.0);
  const kiln::tensor s = m.sum(1);
  m = kiln::tensor();
  EXPECT_EQ(released.load(), 0) << "a lazy result still reads the memory";
  EXPECT_NEAR(s.to_vector<double>()[1], 1.5 + -7 + 7.5 + 10.5, 1e-12);
}

TEST_P(ExternalMemoryTest, BadInputIsRefused) {
  if (!addressable()) GTEST_SKIP() << dev().id() << ": no addresses (refusal tested above)";
  std::vector<float> host(8);
  const kiln::tensor t = kiln::tensor::from(dev(), host, {8});
  void* p = t.data_ptr();
  using kiln::scalar_type;
  EXPECT_THROW((void)kiln::tensor::from_external(dev(), p, {2, 4}, scalar_type::f32, {4}, nullptr),
               kiln::shape_error);
  EXPECT_THROW(
      (void)kiln::tensor::from_external(dev(), p, {2, 4}, scalar_type::f32, {-4, 1}, nullptr),
      kiln::invalid_argument);
  EXPECT_THROW(
      (void)kiln::tensor::from_external(dev(), nullptr, {2}, scalar_type::f32, {}, nullptr),
      kiln::invalid_argument);
  EXPECT_THROW((void)kiln::tensor().data_ptr(), kiln::invalid_argument);
  // Zero elements may come with no memory at all.
  EXPECT_EQ(
      kiln::tensor::from_external(dev(), nullptr, {0, 3}, scalar_type::f32, {}, nullptr).numel(),
      0);
}

}  // namespace
}  // namespace tensor_test
