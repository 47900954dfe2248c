// CPU operations unloaded and with other processes competing for the cores (issue 24: Kiln owns
// the CPU threads, so an op stays within ~3x of its unloaded time when two busy processes share
// a 2-core machine). Each row: the median wall time of --runs runs on cpu:0, alone, then with
// --busy processes spinning; the ratio. Convolution and average pooling rows run through
// oneDNN where the CPU backend has it (one oneDNN thread per task over Kiln's pool;
// KILN_DNN_PORTABLE=1 for the portable kernels). Peers: OpenBLAS called directly with its own
// threads (what Kiln did before it owned them), and a plain one-thread loop.
//
//   bench_cpu_load [--busy 2] [--runs 7]
#include <dlfcn.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor/conv.hpp>
#include <string>
#include <vector>

namespace {

// Evaluation is asynchronous: each run ends when the device has finished it.
double median_ms(const kiln::device& dev, int runs, const std::function<void()>& work) {
  work();  // warm-up: compiles and caches
  dev.synchronize();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    dev.synchronize();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct row {
  std::string name;
  std::function<void()> work;
  double alone = 0, loaded = 0;
};

std::vector<pid_t> spin(int n) {
  std::vector<pid_t> kids;
  for (int i = 0; i < n; ++i) {
    const pid_t p = fork();
    if (p == 0) {
      volatile unsigned long x = 0;
      for (;;) x = x + 1;
    }
    if (p > 0) kids.push_back(p);
  }
  return kids;
}

}  // namespace

int main(int argc, char** argv) {
  int busy = 2, runs = 7;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--busy"))
      busy = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--runs"))
      runs = std::max(1, std::atoi(argv[i + 1]));
    else
      return std::fprintf(stderr, "usage: %s [--busy N] [--runs N]\n", argv[0]), 2;
  }
  const kiln::device dev = kiln::device::get("cpu:0");
  using kiln::tensor;
  const tensor a = tensor::randn(dev, {32, 200000}, 1), b = tensor::randn(dev, {200000, 16}, 2);
  const tensor s = tensor::randn(dev, {512, 512}, 3), t = tensor::randn(dev, {512, 512}, 4);
  const tensor x = tensor::randn(dev, {1 << 24}, 5), r = tensor::randn(dev, {4096, 1024}, 6);
  // Convolution (oneDNN where the "dnn" extension loads, else im2col + GEMM): 3x3 64->64 at
  // 56^2, batch 4, as bench_tensor's CPU rows.
  const tensor cx = tensor::randn(dev, {4, 64, 56, 56}, 7),
               cw = tensor::randn(dev, {64, 64, 3, 3}, 8);
  const tensor cdy = tensor::randn(dev, {4, 64, 56, 56}, 9);
  const kiln::conv2d_options pad1{.padding = {1, 1}};
  const tensor px = tensor::randn(dev, {8, 64, 112, 112}, 10);
  const kiln::pool2d_options pool3{.kernel = {3, 3}, .stride = {2, 2}, .padding = {1, 1}};
  std::vector<float> hx(1 << 24, 1.f), hy(1 << 24);
  // OpenBLAS itself, with as many of its own threads as there are cores (set for the row only:
  // Kiln sets the process's OpenBLAS to one thread).
  using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*,
                            int, float, float*, int);
  void* blas = dlopen("libopenblas.so.0", RTLD_NOW);
  auto sgemm = blas ? reinterpret_cast<sgemm_fn>(dlsym(blas, "cblas_sgemm")) : nullptr;
  auto set_threads =
      blas ? reinterpret_cast<void (*)(int)>(dlsym(blas, "openblas_set_num_threads")) : nullptr;
  const std::vector<float> ha = a.to_vector<float>(), hb = b.to_vector<float>();
  std::vector<float> hc(32 * 16);
  const int cores = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::vector<row> rows = {
      {"matmul [32,200000] x [200000,16]", [&] { (void)kiln::matmul(a, b).sum().item<float>(); }},
      {"matmul 512^3", [&] { (void)kiln::matmul(s, t).sum().item<float>(); }},
      {"fused x*2+1 then relu, 16M", [&] { (void)kiln::relu(x * 2.f + 1.f).eval(); }},
      {"sum 16M", [&] { (void)x.sum().item<float>(); }},
      {"softmax rows [4096,1024]", [&] { (void)r.softmax(1).eval(); }},
      {"conv 3x3 64->64 56^2 N4 fwd", [&] { (void)kiln::conv2d(cx, cw, {}, pad1).eval(); }},
      {"conv 3x3 bwd data",
       [&] { (void)kiln::conv2d_backward_data(cdy, cw, cx.shape(), pad1).eval(); }},
      {"conv 3x3 bwd filter",
       [&] { (void)kiln::conv2d_backward_filter(cx, cdy, cw.shape(), pad1).eval(); }},
      {"avg_pool2d 3x3/2 [8,64,112,112]", [&] { (void)kiln::avg_pool2d(px, pool3).eval(); }},
      {"plain loop y=x*2+1, 16M (1 thread)",
       [&] {
         for (std::size_t i = 0; i < hx.size(); ++i) hy[i] = hx[i] * 2.f + 1.f;
       }},
      {"OpenBLAS directly, its own threads", [&] {
         if (!sgemm || !set_threads) return;
         set_threads(cores);
         sgemm(101, 111, 111, 32, 16, 200000, 1.f, ha.data(), 200000, hb.data(), 16, 0.f, hc.data(),
               16);  // CblasRowMajor, CblasNoTrans
         set_threads(1);
       }}};
  try {
    for (row& w : rows) w.alone = median_ms(dev, runs, w.work);
    const std::vector<pid_t> kids = spin(busy);
    for (row& w : rows) w.loaded = median_ms(dev, runs, w.work);
    for (pid_t p : kids) kill(p, SIGKILL);
    for (pid_t p : kids) waitpid(p, nullptr, 0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cpu_load: %s\n", e.what());
    return 1;
  }
  std::printf("cpu:0, %u hardware threads, %d busy processes; median of %d runs (ms)\n",
              std::max(1u, static_cast<unsigned>(sysconf(_SC_NPROCESSORS_ONLN))), busy, runs);
  std::printf("%-38s %10s %10s %7s\n", "operation", "alone", "loaded", "ratio");
  for (const row& w : rows)
    std::printf("%-38s %10.2f %10.2f %7.2f\n", w.name.c_str(), w.alone, w.loaded,
                w.loaded / w.alone);
}
