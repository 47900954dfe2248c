// kiln::tensor basics: creation, views without copies, and a lazy expression that runs as one
// fused kernel when it is read.
#include <cstdio>
#include <kiln/kiln.hpp>
#include <vector>

int main() {
  const kiln::device dev = kiln::device::best();
  const auto a = kiln::tensor::from(dev, std::vector<float>{1, -2, 3, -4, 5, -6}, {2, 3});
  const auto b = kiln::tensor::arange(dev, 0, 3, 1, kiln::scalar_type::f32);  // [3]: broadcasts
  const auto c = kiln::relu(a * b + 1.f);                      // lazy: nothing has run yet
  for (float v : c.to_vector<float>()) std::printf("%g ", v);  // one kernel launch
  std::printf("\n(%llu launch)\n",
              static_cast<unsigned long long>(kiln::last_tensor_stats().kernel_launches));
  const auto t = a.t().slice(0, 0, 3, 2);  // a view: shape [2, 2], strides [2, 3]
  for (float v : (t * t).to_vector<float>()) std::printf("%g ", v);
  std::printf("\n");
}
