// bench_thrust_query: the Thrust/CUB peers of bench_query's cases, written the way a user of
// those libraries would, in the same table and CSV (bench_args.hpp).
//
//   bench_thrust_query [--csv FILE] [--runs N] [--warmup N] [--sizes 1M,16M,256M]
//                      [--host-sizes 16M,256M|none]
//
// impl thrust (Thrust or CUB, one per case):
//   map             thrust::transform(x * 2) into a preallocated vector
//   filter          cub::DeviceSelect::If(x > 0.5), survivor count copied back to the host
//   map_filter_map  thrust::transform(x * 2), thrust::copy_if(> 1), thrust::transform(+ 100):
//                   three passes and two temporaries, as a Thrust user writes it
//   sum             cub::DeviceReduce::Sum, result copied back to the host
//   inclusive_scan  cub::DeviceScan::InclusiveSum into a preallocated vector
//   copy, copy_roof cudaMemcpyAsync device to device (impl cuda_runtime)
// impl cub_fused:
//   map_filter_map  one cub::DeviceSelect::If over a transform_iterator (x * 2) writing through
//                   a transform_output_iterator (+ 100): a single pass, as Kiln's fused kernel
// host-resident (std::vector in, std::vector out, pageable like Kiln's rows):
//   host_map_filter_map  cudaMemcpy in, the chain, count back, cudaMemcpy out into a new
//                        std::vector (impl thrust: three-pass chain; cub_fused: one pass)
//   host_roundtrip       cudaMemcpy in and out (impl cuda_runtime)
//
// Timing: cudaEvents around each run on one non-blocking stream, median after warm-up
// (timer event); wall_ms is the host wall-clock median of the same work followed by a stream
// synchronize. CUB temporary storage is allocated once, outside the timing; Thrust's copy_if
// allocates its own temporaries per call (that is what a Thrust user gets).
#include <cub/device/device_reduce.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_select.cuh>
#include <cuda_runtime.h>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/iterator/transform_iterator.h>
#include <thrust/iterator/transform_output_iterator.h>
#include <thrust/system/cuda/execution_policy.h>
#include <thrust/transform.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "bench_args.hpp"

namespace {

using namespace kiln_bench;

void check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "bench_thrust_query: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(1);
}

struct times2 {
  __host__ __device__ float operator()(float v) const { return v * 2.0f; }
};
struct plus_offset {
  float off;
  __host__ __device__ float operator()(float v) const { return v + off; }
};
struct greater_than {
  float t;
  __host__ __device__ bool operator()(float v) const { return v > t; }
};

struct timing {
  double event_ms = 0, wall_ms = 0;
};

// Event-timed median of work() on the stream, then the wall-clock median of work() + a stream
// synchronize; warm-ups before each.
template <class Work>
timing time_it(cudaStream_t s, const args& a, Work&& work) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  for (int i = 0; i < std::max(a.warmup, 1); ++i) work();
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<double> ev, wall;
  for (int i = 0; i < a.runs; ++i) {
    check(cudaEventRecord(start, s), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop, s), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, start, stop), "cudaEventElapsedTime");
    ev.push_back(t);
  }
  for (int i = 0; i < a.runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    work();
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    wall.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  check(cudaEventDestroy(start), "cudaEventDestroy");
  check(cudaEventDestroy(stop), "cudaEventDestroy");
  return {median_of(ev), median_of(wall)};
}

std::vector<float> make_data(std::uint64_t n) {
  std::vector<float> x(n);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&x, n, t, threads] {
      for (std::uint64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) x[i] = data_value(i);
    });
  for (std::thread& th : pool) th.join();
  return x;
}

std::vector<float> to_host(const float* d, std::uint64_t count) {
  std::vector<float> h(count);
  if (count) check(cudaMemcpy(h.data(), d, count * 4, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  return h;
}

struct ctx {
  const args& a;
  cudaStream_t s;
  std::vector<result>& rows;
  int& status;

  void add(const std::string& name, const std::string& impl, std::uint64_t n, double bytes,
           const timing& t, const std::string& chk) {
    result r;
    r.name = name;
    r.impl = impl;
    r.device = "cuda:0";
    r.n = n;
    r.median_ms = t.event_ms;
    r.wall_ms = t.wall_ms;
    r.gbs = gbs_of(bytes, t.event_ms);
    r.timer = "event";
    r.check = chk;
    if (chk == "WRONG") {
      std::fprintf(stderr, "%s/%s n=%s: WRONG result\n", name.c_str(), impl.c_str(),
                   size_label(n).c_str());
      status = 1;
    }
    std::printf("  %-20s %-12s n=%-5s %10.4f ms (wall %.4f) %9.1f GB/s  %s\n", name.c_str(),
                impl.c_str(), size_label(n).c_str(), t.event_ms, t.wall_ms, r.gbs, chk.c_str());
    std::fflush(stdout);
    rows.push_back(r);
  }
};

// Temporary storage for a CUB call, grown as needed and kept.
struct scratch {
  void* p = nullptr;
  std::size_t bytes = 0;
  void ensure(std::size_t b) {
    if (b <= bytes) return;
    if (p) check(cudaFree(p), "cudaFree");
    check(cudaMalloc(&p, b), "cudaMalloc scratch");
    bytes = b;
  }
  ~scratch() {
    if (p) cudaFree(p);
  }
};

void copy_roof(ctx& c, std::uint64_t n) {
  float *src = nullptr, *dst = nullptr;
  check(cudaMalloc(&src, n * 4), "cudaMalloc");
  check(cudaMalloc(&dst, n * 4), "cudaMalloc");
  check(cudaMemset(src, 0, n * 4), "cudaMemset");
  const timing t = time_it(c.s, c.a, [&] {
    check(cudaMemcpyAsync(dst, src, n * 4, cudaMemcpyDeviceToDevice, c.s), "cudaMemcpyAsync");
  });
  c.add("copy_roof", "cuda_runtime", n, 8.0 * double(n), t, "ok");
  check(cudaFree(src), "cudaFree");
  check(cudaFree(dst), "cudaFree");
}

void device_cases(ctx& c, std::uint64_t n, scratch& tmp) {
  const auto policy = thrust::cuda::par_nosync.on(c.s);
  const std::vector<float> hx = make_data(n);
  const expected e = expect(hx.data(), n);
  thrust::device_vector<float> x(hx.begin(), hx.end()), y(n), t1(n), t2(n);
  float* xp = thrust::raw_pointer_cast(x.data());
  float* yp = thrust::raw_pointer_cast(y.data());
  const double in = 4.0 * double(n);
  int* d_count = nullptr;
  int* h_count = nullptr;
  float* d_sum = nullptr;
  float* h_sum = nullptr;
  check(cudaMalloc(&d_count, sizeof(int)), "cudaMalloc");
  check(cudaMallocHost(&h_count, sizeof(int)), "cudaMallocHost");
  check(cudaMalloc(&d_sum, sizeof(float)), "cudaMalloc");
  check(cudaMallocHost(&h_sum, sizeof(float)), "cudaMallocHost");
  const int ni = static_cast<int>(n);  // CUB's 32-bit item counts are enough here

  {
    const timing t = time_it(c.s, c.a, [&] {
      check(cudaMemcpyAsync(yp, xp, n * 4, cudaMemcpyDeviceToDevice, c.s), "cudaMemcpyAsync");
    });
    c.add("copy", "cuda_runtime", n, 2 * in, t, "ok");
  }
  {
    const timing t = time_it(c.s, c.a, [&] { thrust::transform(policy, x.begin(), x.end(), y.begin(), times2{}); });
    check(cudaStreamSynchronize(c.s), "sync");
    const std::vector<float> hy = to_host(yp, n);
    bool ok = true;
    for (std::uint64_t i = 0; ok && i < n; ++i) ok = hy[i] == 2.f * hx[i];
    c.add("map", "thrust", n, 2 * in, t, ok ? "ok" : "WRONG");
  }
  {  // filter: cub::DeviceSelect::If, count to the host
    const greater_than pred{filter_threshold};
    std::size_t need = 0;
    check(cub::DeviceSelect::If(nullptr, need, xp, yp, d_count, ni, pred, c.s), "DeviceSelect::If");
    tmp.ensure(need);
    const timing t = time_it(c.s, c.a, [&] {
      std::size_t b = tmp.bytes;
      check(cub::DeviceSelect::If(tmp.p, b, xp, yp, d_count, ni, pred, c.s), "DeviceSelect::If");
      check(cudaMemcpyAsync(h_count, d_count, sizeof(int), cudaMemcpyDeviceToHost, c.s), "count");
    });
    check(cudaStreamSynchronize(c.s), "sync");
    const std::vector<float> hy = to_host(yp, std::uint64_t(*h_count));
    c.add("filter", "thrust", n, in + 4.0 * double(*h_count), t,
          survivors_match(hy.data(), hy.size(), e.filter_count, e.filter_sum) ? "ok" : "WRONG");
  }
  {  // map -> filter -> map, three Thrust passes
    std::uint64_t count = 0;
    const timing t = time_it(c.s, c.a, [&] {
      thrust::transform(policy, x.begin(), x.end(), t1.begin(), times2{});
      auto end = thrust::copy_if(policy, t1.begin(), t1.end(), t2.begin(), greater_than{chain_threshold});
      count = std::uint64_t(end - t2.begin());
      thrust::transform(policy, t2.begin(), end, y.begin(), plus_offset{chain_offset});
    });
    check(cudaStreamSynchronize(c.s), "sync");
    const std::vector<float> hy = to_host(yp, count);
    c.add("map_filter_map", "thrust", n, in + 4.0 * double(count), t,
          survivors_match(hy.data(), hy.size(), e.chain_count, e.chain_sum) ? "ok" : "WRONG");
  }
  {  // map -> filter -> map, one CUB pass through iterators
    auto src = thrust::make_transform_iterator(xp, times2{});
    auto dst = thrust::make_transform_output_iterator(yp, plus_offset{chain_offset});
    const greater_than pred{chain_threshold};
    std::size_t need = 0;
    check(cub::DeviceSelect::If(nullptr, need, src, dst, d_count, ni, pred, c.s), "DeviceSelect::If");
    tmp.ensure(need);
    const timing t = time_it(c.s, c.a, [&] {
      std::size_t b = tmp.bytes;
      check(cub::DeviceSelect::If(tmp.p, b, src, dst, d_count, ni, pred, c.s), "DeviceSelect::If");
      check(cudaMemcpyAsync(h_count, d_count, sizeof(int), cudaMemcpyDeviceToHost, c.s), "count");
    });
    check(cudaStreamSynchronize(c.s), "sync");
    const std::vector<float> hy = to_host(yp, std::uint64_t(*h_count));
    c.add("map_filter_map", "cub_fused", n, in + 4.0 * double(*h_count), t,
          survivors_match(hy.data(), hy.size(), e.chain_count, e.chain_sum) ? "ok" : "WRONG");
  }
  {  // sum, result to the host
    std::size_t need = 0;
    check(cub::DeviceReduce::Sum(nullptr, need, xp, d_sum, ni, c.s), "DeviceReduce::Sum");
    tmp.ensure(need);
    const timing t = time_it(c.s, c.a, [&] {
      std::size_t b = tmp.bytes;
      check(cub::DeviceReduce::Sum(tmp.p, b, xp, d_sum, ni, c.s), "DeviceReduce::Sum");
      check(cudaMemcpyAsync(h_sum, d_sum, sizeof(float), cudaMemcpyDeviceToHost, c.s), "sum");
    });
    check(cudaStreamSynchronize(c.s), "sync");
    c.add("sum", "thrust", n, in + 4, t, float_check(*h_sum, e.total));
  }
  {
    std::size_t need = 0;
    check(cub::DeviceScan::InclusiveSum(nullptr, need, xp, yp, ni, c.s), "DeviceScan::InclusiveSum");
    tmp.ensure(need);
    const timing t = time_it(c.s, c.a, [&] {
      std::size_t b = tmp.bytes;
      check(cub::DeviceScan::InclusiveSum(tmp.p, b, xp, yp, ni, c.s), "DeviceScan::InclusiveSum");
    });
    check(cudaStreamSynchronize(c.s), "sync");
    const std::vector<float> hy = to_host(yp, n);
    c.add("inclusive_scan", "thrust", n, 2 * in, t, scan_check(hx.data(), hy.data(), n));
  }
  cudaFree(d_count);
  cudaFreeHost(h_count);
  cudaFree(d_sum);
  cudaFreeHost(h_sum);
}

void host_cases(ctx& c, std::uint64_t n, scratch& tmp) {
  const auto policy = thrust::cuda::par_nosync.on(c.s);
  const std::vector<float> hx = make_data(n);
  const expected e = expect(hx.data(), n);
  const double in = 4.0 * double(n);
  thrust::device_vector<float> x(n), y(n), t1(n), t2(n);
  float* xp = thrust::raw_pointer_cast(x.data());
  float* yp = thrust::raw_pointer_cast(y.data());
  int* d_count = nullptr;
  check(cudaMalloc(&d_count, sizeof(int)), "cudaMalloc");
  const int ni = static_cast<int>(n);
  std::vector<float> out;

  {
    std::vector<float> back(n);
    const timing t = time_it(c.s, c.a, [&] {
      check(cudaMemcpyAsync(xp, hx.data(), n * 4, cudaMemcpyHostToDevice, c.s), "H2D");
      check(cudaMemcpyAsync(back.data(), xp, n * 4, cudaMemcpyDeviceToHost, c.s), "D2H");
    });
    check(cudaStreamSynchronize(c.s), "sync");
    c.add("host_roundtrip", "cuda_runtime", n, 2 * in, t, back == hx ? "ok" : "WRONG");
  }
  {  // three Thrust passes between the copies; a new std::vector for the result
    const timing t = time_it(c.s, c.a, [&] {
      check(cudaMemcpyAsync(xp, hx.data(), n * 4, cudaMemcpyHostToDevice, c.s), "H2D");
      thrust::transform(policy, x.begin(), x.end(), t1.begin(), times2{});
      auto end = thrust::copy_if(policy, t1.begin(), t1.end(), t2.begin(), greater_than{chain_threshold});
      thrust::transform(policy, t2.begin(), end, y.begin(), plus_offset{chain_offset});
      std::vector<float> r(std::size_t(end - t2.begin()));
      check(cudaMemcpyAsync(r.data(), yp, r.size() * 4, cudaMemcpyDeviceToHost, c.s), "D2H");
      check(cudaStreamSynchronize(c.s), "sync");
      out = std::move(r);
    });
    c.add("host_map_filter_map", "thrust", n, in + 4.0 * double(out.size()), t,
          survivors_match(out.data(), out.size(), e.chain_count, e.chain_sum) ? "ok" : "WRONG");
  }
  {  // one CUB pass between the copies
    auto src = thrust::make_transform_iterator(xp, times2{});
    auto dst = thrust::make_transform_output_iterator(yp, plus_offset{chain_offset});
    const greater_than pred{chain_threshold};
    std::size_t need = 0;
    check(cub::DeviceSelect::If(nullptr, need, src, dst, d_count, ni, pred, c.s), "DeviceSelect::If");
    tmp.ensure(need);
    const timing t = time_it(c.s, c.a, [&] {
      check(cudaMemcpyAsync(xp, hx.data(), n * 4, cudaMemcpyHostToDevice, c.s), "H2D");
      std::size_t b = tmp.bytes;
      check(cub::DeviceSelect::If(tmp.p, b, src, dst, d_count, ni, pred, c.s), "DeviceSelect::If");
      int count = 0;
      check(cudaMemcpyAsync(&count, d_count, sizeof(int), cudaMemcpyDeviceToHost, c.s), "count");
      check(cudaStreamSynchronize(c.s), "sync");
      std::vector<float> r(static_cast<std::size_t>(count));
      check(cudaMemcpyAsync(r.data(), yp, r.size() * 4, cudaMemcpyDeviceToHost, c.s), "D2H");
      check(cudaStreamSynchronize(c.s), "sync");
      out = std::move(r);
    });
    c.add("host_map_filter_map", "cub_fused", n, in + 4.0 * double(out.size()), t,
          survivors_match(out.data(), out.size(), e.chain_count, e.chain_sum) ? "ok" : "WRONG");
  }
  cudaFree(d_count);
}

}  // namespace

int main(int argc, char** argv) {
  const args a = parse_args(argc, argv);
  int count = 0;
  check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (count == 0) check(cudaErrorNoDevice, "cudaGetDeviceCount");
  check(cudaSetDevice(0), "cudaSetDevice");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("== cuda:0: %s (Thrust %d.%d.%d, CUB %d)\n", prop.name, THRUST_MAJOR_VERSION,
              THRUST_MINOR_VERSION, THRUST_SUBMINOR_VERSION, CUB_VERSION);
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
  std::vector<result> rows;
  int status = 0;
  ctx c{a, stream, rows, status};
  // Room for input, output, two temporaries and scratch, as bench_query's rule but for the
  // three-pass chain's two extra vectors.
  auto fits = [&](std::uint64_t n) { return 5 * n * 4 + (256ull << 20) <= prop.totalGlobalMem; };
  {
    scratch tmp;
    std::uint64_t roof = 256ull << 20;
    if (!fits(roof)) roof = *std::max_element(a.sizes.begin(), a.sizes.end());
    copy_roof(c, roof);
    for (std::uint64_t n : a.sizes) {
      if (n > 0x7fffffffull) {
        std::printf("skipping n=%s: above CUB's int item count\n", size_label(n).c_str());
        continue;
      }
      if (!fits(n)) {
        std::printf("skipping n=%s: device memory\n", size_label(n).c_str());
        continue;
      }
      device_cases(c, n, tmp);
    }
    for (std::uint64_t n : a.host_sizes)
      if (fits(n) && n <= 0x7fffffffull) host_cases(c, n, tmp);
  }
  check(cudaStreamDestroy(stream), "cudaStreamDestroy");
  fill_pct_copy(rows);
  print_table(rows);
  if (!a.csv.empty() && !write_csv(a.csv, rows)) {
    std::fprintf(stderr, "cannot write %s\n", a.csv.c_str());
    return 1;
  }
  return status;
}
