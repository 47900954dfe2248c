// Shared by bench_tensor.cpp (command line, elementwise and reduction rows, the PyTorch merge)
// and bench_tensor_nn.cpp (GEMM, convolution and pooling rows): options, event timing, and the
// result rows that are merged with bench/torch_tensor.py's.
#pragma once

#include <cstdint>
#include <functional>
#include <kiln/kiln.hpp>
#include <kiln/tensor.hpp>
#include <string>
#include <vector>

namespace kiln_bench_tensor {

// Row groups, in run order: elementwise (and reductions, the original rows) on the main device,
// gemm, conv and pool on the main device (a GPU; with --quick any device), cpu on the CPU.
inline const std::vector<std::string>& all_groups() {
  static const std::vector<std::string> g{"elementwise", "gemm", "conv", "pool", "cpu"};
  return g;
}

struct options {
  std::string device;               // main device; empty: kiln::device::best()
  int runs = 20, warmup = 3;        // timed runs (median) and warm-up runs per case
  bool quick = false;               // tiny sizes: a smoke test on any machine
  std::vector<std::string> groups;  // --only; empty: every group
  std::vector<std::string> filter;  // --filter: a case runs when its name contains one of these
  bool torch = true;                // run bench/torch_tensor.py afterwards and merge
  bool compile = true;              // torch.compile rows (elementwise group)
  std::string python = "python3", script = "bench/torch_tensor.py";

  bool wants_group(const std::string& g) const;
  bool wants_case(const std::string& name) const;
};

// One Kiln measurement. value is in unit (TFLOP/s or GB/s: higher is better).
struct result {
  std::string group, name, unit, note;
  double ms = 0, value = 0;
};

// Prints the Kiln row at once and keeps it for the merged table.
void add_result(const result& r);

// Median of o.runs event-timed runs on q after o.warmup untimed ones (and a finish).
double median_ms(kiln::queue& q, const options& o, const std::function<void()>& work);

// Uniform [0, 1) on the device (kiln::tensor::rand; PyTorch's inputs are torch.rand too).
kiln::tensor uniform(const kiln::device& dev, const kiln::shape_t& shape, unsigned seed);

// The groups in bench_tensor_nn.cpp. gemm/conv/pool run their GPU sizes (or tiny ones with
// o.quick); cpu runs its CPU sizes on dev (the CPU device).
void run_gemm(const kiln::device& dev, const options& o);
void run_conv(const kiln::device& dev, const options& o);
void run_pool(const kiln::device& dev, const options& o);
void run_cpu(const kiln::device& dev, const options& o);

}  // namespace kiln_bench_tensor
