// Helper process of blas_exit_test.cpp: queues f64 GEMMs (OpenBLAS on the CPU backend) and
// returns from main without waiting, so exit() runs while a queue thread is inside OpenBLAS.
#include <cstdlib>
#include <kiln/kiln.hpp>

int main(int argc, char** argv) {
  const kiln::device cpu = kiln::device::get("cpu:0");
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const kiln::tensor a = kiln::tensor::randn(cpu, {n, n}, 3).to(kiln::scalar_type::f64);
  cpu.synchronize();
  for (int i = 0; i < 64; ++i) (void)kiln::matmul(a, a).eval();
  return 0;  // no synchronize: the GEMMs are still queued
}
