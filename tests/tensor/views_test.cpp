// Views share storage and change shape, strides and offset; each is checked against a host
// coordinate map, and composed views against the composition of the maps.
#include "tensor/tensor_fixture.hpp"
#include "tensor/tensor_impl.hpp"

namespace tensor_test {
namespace {

class ViewsTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ViewsTest);

TEST_P(ViewsTest, ViewAndReshapeKeepTheOrder) {
  const host<float> h = random_host<float>({2, 3, 4}, 1);
  const kiln::tensor x = upload(dev(), h);
  const kiln::tensor v = x.view({4, -1});
  EXPECT_EQ(v.shape(), (shape_t{4, 6}));
  EXPECT_EQ(v.impl()->mem, x.impl()->mem);  // no copy
  EXPECT_TRUE(matches(v, host<float>{{4, 6}, h.v}));
  EXPECT_TRUE(matches(x.reshape({24}), host<float>{{24}, h.v}));
  // Not contiguous: reshape copies (one strided-copy kernel), view refuses.
  const kiln::tensor p = x.permute({2, 0, 1});
  EXPECT_FALSE(p.is_contiguous());
  const host<float> hp = remap<float>(h, {4, 2, 3}, [](shape_t c) {
    return shape_t{c[1], c[2], c[0]};
  });
  const kiln::tensor r = p.reshape({4, 6});
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_TRUE(matches(r, host<float>{{4, 6}, hp.v}));
  EXPECT_THROW(p.view({24}), kiln::shape_error);
}

TEST_P(ViewsTest, PermuteTransposeAndT) {
  const host<std::int32_t> h = random_host<std::int32_t>({2, 3, 4}, 2);
  const kiln::tensor x = upload(dev(), h);
  const kiln::tensor p = x.permute({-1, 0, 1});
  EXPECT_EQ(p.strides(), (shape_t{1, 12, 4}));
  EXPECT_TRUE(matches(p, remap<std::int32_t>(h, {4, 2, 3}, [](shape_t c) {
                        return shape_t{c[1], c[2], c[0]};
                      })));
  EXPECT_TRUE(matches(x.transpose(0, 2), remap<std::int32_t>(h, {4, 3, 2}, [](shape_t c) {
                        return shape_t{c[2], c[1], c[0]};
                      })));
  const host<std::int32_t> m = random_host<std::int32_t>({3, 5}, 3);
  EXPECT_TRUE(matches(upload(dev(), m).t(), remap<std::int32_t>(m, {5, 3}, [](shape_t c) {
                        return shape_t{c[1], c[0]};
                      })));
}

TEST_P(ViewsTest, SliceIsPythonSlicing) {
  const host<double> h = random_host<double>({5, 6}, 4);
  const kiln::tensor x = upload(dev(), h);
  struct cas {
    int dim;
    std::int64_t start, end, step, len;
  };
  for (const cas& c : {cas{0, 1, 4, 1, 3}, cas{1, 0, 6, 2, 3}, cas{1, -4, -1, 1, 3},
                       cas{0, -100, 100, 2, 3}, cas{-1, 5, 2, 1, 0}, cas{1, 1, 6, 4, 2}}) {
    SCOPED_TRACE(std::to_string(c.dim) + ": " + std::to_string(c.start) + ":" +
                 std::to_string(c.end) + ":" + std::to_string(c.step));
    const int d = c.dim < 0 ? c.dim + 2 : c.dim;
    const std::int64_t size = h.shape[static_cast<std::size_t>(d)];
    std::int64_t lo = c.start < 0 ? c.start + size : c.start;
    lo = std::clamp<std::int64_t>(lo, 0, size);
    shape_t s = h.shape;
    s[static_cast<std::size_t>(d)] = c.len;
    const kiln::tensor v = x.slice(c.dim, c.start, c.end, c.step);
    EXPECT_TRUE(matches(v, remap<double>(h, s, [&](shape_t k) {
                          k[static_cast<std::size_t>(d)] =
                              lo + k[static_cast<std::size_t>(d)] * c.step;
                          return k;
                        })));
  }
}

TEST_P(ViewsTest, ExpandSqueezeUnsqueeze) {
  const host<std::uint8_t> h = random_host<std::uint8_t>({3, 1}, 5);
  const kiln::tensor x = upload(dev(), h);
  const kiln::tensor e = x.expand({2, -1, 4});
  EXPECT_EQ(e.strides(), (shape_t{0, 1, 0}));
  EXPECT_TRUE(matches(e, remap<std::uint8_t>(h, {2, 3, 4}, [](shape_t c) {
                        return shape_t{c[1], 0};
                      })));
  EXPECT_EQ(x.unsqueeze(0).shape(), (shape_t{1, 3, 1}));
  EXPECT_EQ(x.unsqueeze(-1).shape(), (shape_t{3, 1, 1}));
  EXPECT_EQ(x.squeeze().shape(), (shape_t{3}));
  EXPECT_EQ(x.squeeze(0).shape(), (shape_t{3, 1}));  // size 3: unchanged
  EXPECT_EQ(x.squeeze(-1).shape(), (shape_t{3}));
  EXPECT_TRUE(matches(x.unsqueeze(1).squeeze(), host<std::uint8_t>{{3}, h.v}));
}

TEST_P(ViewsTest, ComposedViewsAndContiguous) {
  const host<std::int64_t> h = random_host<std::int64_t>({4, 5, 6}, 6);
  const kiln::tensor x = upload(dev(), h);
  // [4,5,6] -> slice dim 2 by 2 -> [4,5,3] -> permute -> [3,4,5] -> slice dim 1 from 1 -> [3,3,5]
  const kiln::tensor v = x.slice(2, 0, 6, 2).permute({2, 0, 1}).slice(1, 1, 4);
  const host<std::int64_t> want = remap<std::int64_t>(h, {3, 3, 5}, [](shape_t c) {
    return shape_t{c[1] + 1, c[2], c[0] * 2};
  });
  EXPECT_FALSE(v.is_contiguous());
  const kiln::tensor c = v.contiguous();
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_TRUE(matches(c, want));
  EXPECT_TRUE(matches(v, want));
  EXPECT_EQ(c.contiguous().impl(), c.impl());  // already contiguous: itself
}

TEST_P(ViewsTest, ViewsOfLazyTensorsEvaluateFirst) {
  const host<float> h = random_host<float>({2, 3}, 7);
  const kiln::tensor x = upload(dev(), h);
  const kiln::tensor y = x * 2.f;
  EXPECT_TRUE(y.is_lazy());
  const kiln::tensor t = y.t();
  EXPECT_FALSE(y.is_lazy());
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_TRUE(matches(t, remap<float>(host<float>{h.shape,
                                                  [&] {
                                                    std::vector<float> v;
                                                    for (float a : h.v) v.push_back(a * 2.f);
                                                    return v;
                                                  }()},
                                      {3, 2}, [](shape_t c) {
                                        return shape_t{c[1], c[0]};
                                      })));
}

}  // namespace
}  // namespace tensor_test
