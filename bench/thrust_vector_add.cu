// bench_thrust_vector_add: the Thrust peer for Kiln's vector add, and the CUDA runtime's
// 1 GiB device-to-device copy as the bandwidth roof, in the same row format as
// bench_foundation (markdown, and CSV device,metric,impl,value,unit with --csv FILE).
//
//   bench_thrust_vector_add [--csv FILE] [--runs N]
//
// Timing: cudaEvents around each call on one stream, 3 warm-ups, median of >= 20 runs.
// thrust::cuda::par_nosync keeps Thrust from synchronising the host after the kernel, so the
// stop event follows the kernel on the stream as it does in Kiln's measurement.
#include <cuda_runtime.h>
#include <thrust/device_vector.h>
#include <thrust/functional.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench_thrust_vector_add: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Median milliseconds of work() on `stream`, by events.
template <class Work>
double median_ms(cudaStream_t stream, int runs, Work&& work) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < 3; ++i) work();
  std::vector<double> ms;
  for (int i = 0; i < runs; ++i) {
    check(cudaEventRecord(start, stream), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop, stream), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  return median(ms);
}

struct result {
  std::string metric, what, impl;
  double gbs, ms;
};

}  // namespace

int main(int argc, char** argv) {
  std::string csv;
  int runs = 20;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--csv" && i + 1 < argc)
      csv = argv[++i];
    else if (a == "--runs" && i + 1 < argc)
      runs = std::max(20, std::atoi(argv[++i]));
    else {
      std::fprintf(stderr, "usage: %s [--csv FILE] [--runs N>=20]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) check(cudaErrorNoDevice, "cudaGetDeviceCount");
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("== cuda:0: %s (Thrust %d.%d.%d)\n", prop.name, THRUST_MAJOR_VERSION,
              THRUST_MINOR_VERSION, THRUST_SUBMINOR_VERSION);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  const auto policy = thrust::cuda::par_nosync.on(stream);
  std::vector<result> results;

  {  // Copy roof: 1 GiB device to device, bytes read + written.
    const std::size_t bytes = std::size_t(1) << 30;
    void *src = nullptr, *dst = nullptr;
    check(cudaMalloc(&src, bytes), "cudaMalloc");
    check(cudaMalloc(&dst, bytes), "cudaMalloc");
    check(cudaMemset(src, 0, bytes), "cudaMemset");
    const double ms = median_ms(stream, runs, [&] {
      check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync");
    });
    results.push_back({"copy_1GiB_gbs", "device copy 1 GiB (cudaMemcpy D2D, bytes read + written)",
                       "cuda_runtime", 2.0 * double(bytes) / (ms * 1e-3) / 1e9, ms});
    check(cudaFree(src), "cudaFree");
    check(cudaFree(dst), "cudaFree");
  }

  for (const auto& [n, label] :
       {std::pair<std::size_t, const char*>{std::size_t(1) << 20, "1M"},
        std::pair<std::size_t, const char*>{std::size_t(256) << 20, "256M"}}) {
    thrust::device_vector<float> a(n, 1.5f), b(n, 2.25f), c(n);
    const double ms = median_ms(stream, runs, [&] {
      thrust::transform(policy, a.begin(), a.end(), b.begin(), c.begin(), thrust::plus<float>());
    });
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    if (c[0] != 3.75f || c[n - 1] != 3.75f) {
      std::fprintf(stderr, "bench_thrust_vector_add: wrong result for %s\n", label);
      return 1;
    }
    results.push_back(
        {std::string("vector_add_") + label + "_gbs",
         std::string("vector add c = a + b, ") + label + " floats (thrust::transform)", "thrust",
         12.0 * double(n) / (ms * 1e-3) / 1e9, ms});
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");

  const double roof = results[0].gbs;
  std::printf("\n| what | thrust / runtime | time | %% of copy |\n| --- | --- | --- | --- |\n");
  for (const result& r : results)
    std::printf("| cuda:0 %s | %.1f GB/s | %.3f ms | %.1f%% |\n", r.what.c_str(), r.gbs, r.ms,
                100.0 * r.gbs / roof);
  if (!csv.empty()) {
    std::FILE* f = std::fopen(csv.c_str(), "w");
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", csv.c_str());
      return 1;
    }
    std::fprintf(f, "device,metric,impl,value,unit\n");
    for (const result& r : results)
      std::fprintf(f, "cuda:0,%s,%s,%.6g,GB/s\n", r.metric.c_str(), r.impl.c_str(), r.gbs);
    std::fclose(f);
  }
  return 0;
}
