// The `kiln` tool's commands. main.cpp owns the command line (CLI11): it parses it into one of
// these option sets and runs that command; each command lives in its own file and knows nothing
// of the parser.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace kiln::tool {

struct info_options {
  bool json = false;
};
int info(const info_options& o);

struct demo_options {
  std::string device;  // empty: device::best() (KILN_DEVICE when set)
};
int demo(const demo_options& o);

struct cache_options {
  bool clear = false;
  bool json = false;
};
int cache(const cache_options& o);

struct calibrate_options {
  bool query = true, tensor = true;  // the parts to measure
  bool json = false;
  bool progress = false;  // force the progress display on stderr (else only on a terminal)
};
int calibrate(const calibrate_options& o);

// `kiln train gpt`'s model and schedule (0: the device's default, train_gpt.cpp).
struct gpt_options {
  std::int64_t context = 0, layers = 0, heads = 0, width = 0;
  double dropout = 0;
  std::int64_t eval_every = 0;      // steps between validation reports (0: five reports)
  std::int64_t sample_chars = 300;  // the sampled paragraph's length
  std::int64_t grad_accum = 1;      // micro-batches per optimizer step (the batch split evenly)
};

struct train_options {
  std::string model = "both";        // mlp, lenet, both, mlp_wide, gpt
  std::string device_spec;           // empty: device::best()
  std::vector<std::string> devices;  // two or more: data parallel, one rank per device
  std::string data_dir;              // empty: data::default_mnist_dir()
  std::string save_dir;              // empty: no checkpoints
  int epochs = 10;
  std::int64_t batch = 64;
  std::uint64_t seed = 0;
  bool batch_norm = false;
  double lr = 1e-3;
  // fp32; tf32 (f32 GEMM/conv may use TensorFloat-32); bf16 or f16 (forward passes under
  // kiln::autocast; f16 with optim::grad_scaler).
  std::string precision = "fp32";
  std::int64_t max_steps = 0;  // > 0: at most this many steps per epoch (smoke tests)
  bool graph = false;          // the step captured once and replayed (kiln::step_graph)
  gpt_options gpt;             // model "gpt" only (--steps: its steps in all)
};
int train(const train_options& o);
int train_gpt(const train_options& o);  // train_gpt.cpp

std::string human_bytes(unsigned long long bytes);
// --json output: j on stdout, indented, with a newline (bytes that are not UTF-8, as in a path
// or a driver's string, are replaced rather than refused).
void print_json(const nlohmann::ordered_json& j);

}  // namespace kiln::tool
