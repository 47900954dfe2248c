// The smallest complete Kiln program: add two vectors on the best device.
#include <cstdio>
#include <kiln/kiln.hpp>
#include <vector>

int main() {
  kiln::device dev = kiln::device::best();
  std::vector<float> a(1000, 1.5f), b(1000);
  for (std::size_t i = 0; i < b.size(); ++i) b[i] = float(i);

  kiln::buffer<float> da(dev, a), db(dev, b), dc(dev, a.size());
  kiln::kernel add = kiln::program::compile(dev, R"(
      KILN_KERNEL void add(KILN_GLOBAL float* c, KILN_GLOBAL const float* a,
                           KILN_GLOBAL const float* b) {
        const uint64_t i = kiln_global_id(0);
        c[i] = a[i] + b[i];
      })")
                         .get_kernel("add");
  add.launch(dev.default_queue(), kiln::range(a.size()), dc, da, db);
  std::vector<float> c = dc.to_vector();
  std::printf("%s: c[999] = %.1f (expected %.1f)\n", dev.id().c_str(), c[999], 1.5f + 999.f);
  return c[999] == 1.5f + 999.f ? 0 : 1;
}
