// kiln::linalg throughput: SGEMM 4096^3 and 8192^3 (full f32 and TF32), the same in bf16 and
// f16 (f32 accumulation), a strided batch of 64 x 256^3, SGEMV 8192^2, and a linear layer
// with bias + GELU (kiln::linear, one GEMM with cuBLASLt's epilogue on CUDA, beside Kiln's
// own matmul followed by gelu(x + b)), on one device (default: the best). Event-timed median after
// a warm-up; prints TFLOP/s (2 m n k per product) and the path that ran (vendor / tiled / simple).
// KILN_LINALG_PORTABLE=1 times the portable kernels instead of the vendor library. On a device that
// is not a GPU every size is divided by 4 (a CPU would take minutes).
//
//   bench_gemm [--device cuda:0] [--runs 10] [--warmup 3]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor/linear.hpp>
#include <string>
#include <vector>

namespace {

struct options {
  std::string device;
  int runs = 10, warmup = 3;
};

double median_ms(kiln::queue& q, const options& o, const std::function<void()>& work) {
  for (int i = 0; i < std::max(o.warmup, 1); ++i) work();
  q.finish();
  std::vector<double> ms;
  for (int i = 0; i < std::max(o.runs, 1); ++i) {
    kiln::event start = q.record();
    work();
    kiln::event stop = q.record();
    stop.wait();
    ms.push_back(kiln::elapsed_ms(start, stop));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void row(const char* name, double flops, double bytes, double ms) {
  std::printf("%-28s %-7s %10.3f ms %9.3f TFLOP/s %9.1f GB/s\n", name,
              kiln::linalg::to_string(kiln::linalg::last_path()), ms, flops / ms * 1e-9,
              bytes / ms * 1e-6);
}

template <class T = float>
void gemm_case(kiln::queue& q, const options& o, const char* name, std::uint64_t s,
               std::uint64_t batch, bool tf32) {
  const std::uint64_t n = s * s * batch;
  kiln::buffer<T> a(q.get_device(), std::vector<T>(n, T(0.5f))),
      b(q.get_device(), std::vector<T>(n, T(0.25f))), c(q.get_device(), n);
  const kiln::linalg::gemm_shape shape{.m = s, .n = s, .k = s, .batch = batch};
  const double ms = median_ms(q, o, [&] { kiln::linalg::gemm(q, a, b, c, shape, {.tf32 = tf32}); });
  const float want = 0.125f * float(s), got = float(c.to_vector()[n - 1]);
  if (std::abs(got - want) > 1e-2f * want) std::printf("  WRONG: %g, expected %g\n", got, want);
  row(name, 2.0 * double(s) * double(s) * double(s) * double(batch),
      double(sizeof(T)) * 3.0 * double(n), ms);
}

void gemv_case(kiln::queue& q, const options& o, std::uint64_t s) {
  kiln::buffer<float> a(q.get_device(), std::vector<float>(s * s, 0.5f)),
      x(q.get_device(), std::vector<float>(s, 0.25f)), y(q.get_device(), s);
  const double ms = median_ms(q, o, [&] { kiln::linalg::gemv(q, a, x, y, {.m = s, .n = s}); });
  const std::string name = "sgemv " + std::to_string(s) + "^2";
  row(name.c_str(), 2.0 * double(s) * double(s), 4.0 * double(s) * double(s + 2), ms);
}

// y = gelu_tanh(x w^T + b), x [m, k], w [n, k], b [n] in bf16: kiln::linear (the epilogue on
// CUDA) and, as the unfused reference, matmul then gelu(y + b) (one more elementwise kernel).
void linear_case(const kiln::device& dev, const options& o, std::int64_t m, std::int64_t k,
                 std::int64_t n, kiln::scalar_type t) {
  kiln::queue& q = dev.default_queue();
  const auto x = kiln::tensor::randn(dev, {m, k}, 1, t), w = kiln::tensor::randn(dev, {n, k}, 2, t),
             b = kiln::tensor::randn(dev, {n}, 3, t);
  const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  const std::string type = kiln::type_name(t);
  const double flops = 2.0 * double(m) * double(n) * double(k);
  const double bytes = double(kiln::size_of(t)) * double(m * k + n * k + m * n);
  kiln::tensor y;
  double ms = median_ms(q, o, [&] { y = kiln::linear(x, w, b, "gelu_tanh"); });
  std::printf("%-28s %-14s %10.3f ms %9.3f TFLOP/s %9.1f GB/s\n",
              (type + " linear+gelu " + shape).c_str(), kiln::last_linear_path(), ms,
              flops / ms * 1e-9, bytes / ms * 1e-6);
  ms = median_ms(q, o, [&] { y = kiln::gelu(kiln::matmul(x, w.t()) + b, "tanh").eval(); });
  std::printf("%-28s %-14s %10.3f ms %9.3f TFLOP/s %9.1f GB/s\n",
              (type + " mm,gelu(+b) " + shape).c_str(), "separate", ms, flops / ms * 1e-9,
              bytes / ms * 1e-6);
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device"))
      o.device = argv[i + 1];
    else if (!std::strcmp(argv[i], "--runs"))
      o.runs = std::atoi(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--warmup"))
      o.warmup = std::atoi(argv[i + 1]);
    else
      return std::fprintf(stderr, "usage: %s [--device ID] [--runs N] [--warmup N]\n", argv[0]), 2;
  }
  try {
    const kiln::device dev = o.device.empty() ? kiln::device::best() : kiln::device::get(o.device);
    const std::uint64_t div = dev.info().type == kiln::device_type::gpu ? 1 : 4;
    const char* lib = kiln::linalg::vendor_library(dev);
    std::printf("device %s (%s), library: %s\n", dev.id().c_str(), dev.info().name.c_str(),
                *lib ? lib : "none (portable kernels)");
    kiln::queue q(dev);
    for (std::uint64_t s : {4096 / div, 8192 / div}) {
      const std::string name = "sgemm " + std::to_string(s) + "^3";
      gemm_case(q, o, name.c_str(), s, 1, false);
      gemm_case(q, o, (name + " tf32").c_str(), s, 1, true);
      const std::string h = std::to_string(s) + "^3";
      gemm_case<kiln::bfloat16>(q, o, ("bf16 gemm " + h).c_str(), s, 1, false);
      gemm_case<kiln::half>(q, o, ("f16 gemm " + h).c_str(), s, 1, false);
    }
    const std::string batched = "sgemm 64 x " + std::to_string(256 / div) + "^3 batched";
    gemm_case(q, o, batched.c_str(), 256 / div, 64, false);
    gemv_case(q, o, 8192 / div);
    for (auto t : {kiln::scalar_type::bf16, kiln::scalar_type::f32}) {
      linear_case(dev, o, 8192 / div, 4096 / div, 4096 / div, t);
      linear_case(dev, o, 8192 / div, 1024 / div, 4096 / div, t);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
}
