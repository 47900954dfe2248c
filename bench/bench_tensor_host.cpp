// Host cost per tensor call: a [4, 1024] f32 operand (the kernels take a microsecond or two),
// N calls back to back with the device synchronised once, so the figure is what the host
// spends per call (argument checks, allocation, the kernel cache look-up, the launch) when the
// GPU keeps up. Compare with PyTorch's eager ~4-6 us per elementwise call.
//
//   bench_tensor_host [device] [calls]       (default cpu:0, 20000)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor/layer_norm.hpp>
#include <string>

int main(int argc, char** argv) {
  using kiln::tensor;
  const kiln::device dev = kiln::device::get(argc > 1 ? argv[1] : "cpu:0");
  const int calls = argc > 2 ? std::atoi(argv[2]) : 20000;
  if (calls <= 0) {
    std::fprintf(stderr, "bench_tensor_host: calls must be positive\n");
    return 2;
  }
  const tensor x = tensor::rand(dev, {4, 1024}, 1).eval(), w = tensor::rand(dev, {1024}, 2).eval(),
               b = tensor::rand(dev, {1024}, 3).eval();
  const kiln::layer_norm_result l = kiln::native_layer_norm(x, {1024}, w, b);
  std::printf("host cost per call on %s, [4, 1024] f32, %d calls\n", dev.id().c_str(), calls);
  const auto time = [&](const char* name, const std::function<tensor()>& f) {
    tensor keep;
    for (int i = 0; i < 200; ++i) keep = f().eval();  // compile, fill the pools
    dev.synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) keep = f().eval();
    dev.synchronize();
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%-36s %8.2f us\n", name, us / calls);
  };
  time("relu(x)", [&] { return kiln::relu(x); });
  time("x * 2 + 1", [&] { return x * 2.f + 1.f; });
  time("softmax(x, 1)", [&] { return x.softmax(1); });
  time("x.sum(0)", [&] { return x.sum(0); });
  time("layer_norm", [&] { return kiln::layer_norm(x, {1024}, w, b); });
  time("rms_norm", [&] { return kiln::rms_norm(x, {1024}, w); });
  time("layer_norm_backward (dx)", [&] {
    return kiln::layer_norm_backward(x, x, {1024}, l.mean, l.rstd, w, false, false).input;
  });
  time("layer_norm_backward (dx, dw, db)", [&] {
    return kiln::layer_norm_backward(x, x, {1024}, l.mean, l.rstd, w, true, true).input;
  });
  return 0;
}
