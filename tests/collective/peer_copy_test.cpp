// queue::copy between buffers of two devices: peer to peer where the backend can (two CUDA
// GPUs), else staged through pinned host memory (the CPU and an OpenCL device, here PoCL).
#include <gtest/gtest.h>

#include <iostream>
#include <numeric>

#include "kiln/buffer.hpp"

namespace {

std::vector<float> ramp(std::size_t n, float from) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), from);
  return v;
}

void round_trip(const kiln::device& a, const kiln::device& b, std::size_t n) {
  const std::vector<float> host = ramp(n, 1.5f);
  kiln::buffer<float> x(a, host), y(b, std::vector<float>(n, -7.f)),
      z(a, std::vector<float>(n, -9.f));
  kiln::queue qa(a), qb(b);
  qb.copy(x, y);  // queue of the destination
  qb.finish();
  EXPECT_EQ(y.to_vector(), host) << a.id() << " -> " << b.id();
  qb.copy(y.subview(1, n - 2), z.subview(1, n - 2));  // queue of the source, sub-views
  qb.finish();
  std::vector<float> want = host;
  want.front() = want.back() = -9.f;
  EXPECT_EQ(z.to_vector(), want) << b.id() << " -> " << a.id();
  kiln::buffer<float> shorter(b, n - 1);
  EXPECT_THROW(qa.copy(x, shorter), kiln::invalid_argument);
}

TEST(PeerCopy, StagedBetweenBackends) {
  kiln::device other{nullptr};
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() != "cpu") other = d;
  if (!other.impl()) GTEST_SKIP() << "no device besides the CPU to copy to";
  const kiln::device cpu = kiln::device::get("cpu");
  EXPECT_FALSE(kiln::peer_access(cpu, other));
  EXPECT_TRUE(kiln::peer_access(cpu, cpu));
  round_trip(cpu, other, 1000);
  kiln::buffer<float> a(other, 4), b(other, 4);
  // A queue on neither device of the copy: refused. (Both on `other`: an ordinary copy.)
  kiln::buffer<float> c(cpu, 4);
  kiln::queue q_other(other);
  EXPECT_NO_THROW(q_other.copy(a, b));
  if (other.backend() != "cpu") {
    kiln::device third_dev{nullptr};
    for (const kiln::device& d : kiln::device::all())
      if (d.backend() != "cpu" && !(d == other)) third_dev = d;
    if (third_dev.impl()) {
      kiln::queue q3(third_dev);
      EXPECT_THROW(q3.copy(c, a), kiln::invalid_argument);
    }
  }
}

TEST(PeerCopy, BetweenTwoGpus) {
  std::vector<kiln::device> gpus;
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() == "cuda") gpus.push_back(d);
  if (gpus.size() < 2) GTEST_SKIP() << "needs two CUDA devices, found " << gpus.size();
  std::cout << "[ kiln     ] peer access " << gpus[0].id() << " -> " << gpus[1].id() << ": "
            << (kiln::peer_access(gpus[0], gpus[1]) ? "yes" : "no (staged)") << "\n";
  round_trip(gpus[0], gpus[1], 1 << 20);
  round_trip(gpus[1], gpus[0], (64u << 20) / 4 + 3);  // past one staging chunk when staged
}

}  // namespace
