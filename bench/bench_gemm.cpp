// kiln::linalg throughput: SGEMM 4096^3 and 8192^3 (full f32 and TF32), the same in bf16 and
// f16 (f32 accumulation), a strided batch of 64 x 256^3, and SGEMV 8192^2, on one device
// (default: the best). Event-timed median after a
// warm-up; prints TFLOP/s (2 m n k per product) and the path that ran (vendor / tiled /
// simple). KILN_LINALG_PORTABLE=1 times the portable kernels instead of the vendor library.
// On a device that is not a GPU every size is divided by 4 (a CPU would take minutes).
//
//   bench_gemm [--device cuda:0] [--runs 10] [--warmup 3]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gemm: %s\n", e.what());
    return 1;
  }
}
