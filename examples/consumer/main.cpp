// Scales a vector on the best device through an installed Kiln.
#include <cstdio>
#include <kiln/kiln.hpp>
#include <vector>

int main() {
  kiln::device dev = kiln::device::best();
  std::vector<int> v(1 << 16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = int(i);
  kiln::buffer<int> d(dev, v);
  kiln::program::compile(
      dev, "KILN_KERNEL void triple(KILN_GLOBAL int32_t* v) { v[kiln_global_id(0)] *= 3; }")
      .get_kernel("triple")
      .launch(dev.default_queue(), kiln::range(v.size()), d);
  auto out = d.to_vector();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (out[i] != 3 * v[i]) return std::printf("wrong at %zu\n", i), 1;
  std::printf("ok on %s\n", dev.id().c_str());
  return 0;
}
