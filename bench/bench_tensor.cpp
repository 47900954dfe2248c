// kiln::tensor throughput on one device (default: the best): fused elementwise chains and
// axis reductions, beside a device-to-device copy of the same bytes measured in the same run
// (the bandwidth roof). Event-timed median after warm-up; each case evaluates the whole
// expression (rendering is cached; the result's allocation is inside the timing, as it is
// in PyTorch eager). bench/torch_tensor.py runs the same cases in PyTorch.
// On a device that is not a GPU every size is divided by 16.
//
//   bench_tensor [--device cuda:0] [--runs 20] [--warmup 3]
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor.hpp>
#include <string>
#include <vector>

namespace {

struct options {
  std::string device;
  int runs = 20, warmup = 3;
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

double copy_gbs = 0;

void row(const char* name, double bytes, double ms, unsigned launches) {
  const double gbs = bytes / ms * 1e-6;
  std::printf("%-34s %9.3f ms %9.1f GB/s %6.1f%% of copy  %u launch%s\n", name, ms, gbs,
              copy_gbs > 0 ? 100 * gbs / copy_gbs : 0.0, launches, launches == 1 ? "" : "es");
}

kiln::tensor random(const kiln::device& dev, const kiln::shape_t& shape, unsigned seed) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  std::vector<float> v(static_cast<std::size_t>(n));
  std::uint32_t s = seed * 2654435761u + 1;
  for (float& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float(s >> 8) / float(1u << 24) * 4.f - 2.f;
  }
  return kiln::tensor::from(dev, v, shape);
}

// Times evaluating make() (a fresh lazy expression each run).
void tensor_case(kiln::queue& q, const options& o, const char* name, double bytes,
                 const std::function<kiln::tensor()>& make) {
  kiln::tensor keep;
  const double ms = median_ms(q, o, [&] { keep = make().eval(); });
  make().eval();
  row(name, bytes, ms, unsigned(kiln::last_tensor_stats().kernel_launches));
}

}  // namespace

int main(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--device" && i + 1 < argc)
      o.device = argv[++i];
    else if (a == "--runs" && i + 1 < argc)
      o.runs = std::atoi(argv[++i]);
    else if (a == "--warmup" && i + 1 < argc)
      o.warmup = std::atoi(argv[++i]);
  }
  const kiln::device dev = o.device.empty() ? kiln::device::best() : kiln::device::get(o.device);
  kiln::queue& q = dev.default_queue();
  const bool gpu = dev.info().type == kiln::device_type::gpu;
  const std::int64_t scale = gpu ? 1 : 16;
  const std::int64_t n = (std::int64_t(1) << 26) / scale;  // 64M floats on a GPU
  const std::int64_t cols = 1024, rows_n = n / cols;
  std::printf("device %s (%s); %lld floats per case\n", dev.id().c_str(), dev.info().name.c_str(),
              static_cast<long long>(n));

  {
    kiln::buffer<float> src(dev, static_cast<std::uint64_t>(n)),
        dst(dev, static_cast<std::uint64_t>(n));
    q.fill(src, 1.f);
    const double ms = median_ms(q, o, [&] { q.copy(src, dst); });
    copy_gbs = 8.0 * double(n) / ms * 1e-6;
    row("copy (device to device)", 8.0 * double(n), ms, 1);
  }
  const kiln::tensor a = random(dev, {n}, 1), b = random(dev, {n}, 2), c = random(dev, {n}, 3);
  tensor_case(q, o, "relu(a * b + c)", 16.0 * double(n), [&] { return kiln::relu(a * b + c); });
  const kiln::tensor x = random(dev, {rows_n, cols}, 4);
  tensor_case(q, o, "softmax rows [65536, 1024]", 8.0 * double(n), [&] { return x.softmax(1); });
  tensor_case(q, o, "(x - mean) / sqrt(var + eps) rows", 8.0 * double(n),
              [&] { return (x - x.mean(1, true)) / kiln::sqrt(x.var(1, 0, true) + 1e-5f); });
  tensor_case(q, o, "sum rows [65536, 1024] -> [65536]", 4.0 * double(n), [&] { return x.sum(1); });
  tensor_case(q, o, "sum cols [65536, 1024] -> [1024]", 4.0 * double(n), [&] { return x.sum(0); });
  tensor_case(q, o, "sum all 64M", 4.0 * double(n), [&] { return a.sum(); });
  tensor_case(q, o, "relu(a * b + c).sum()", 12.0 * double(n),
              [&] { return kiln::relu(a * b + c).sum(); });
  tensor_case(q, o, "argmax rows", 4.0 * double(n), [&] { return x.argmax(1); });
  return 0;
}
