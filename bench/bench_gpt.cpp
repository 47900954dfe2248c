// The GPT training step of issue 25 (nanoGPT's shakespeare-char size: 6 layers, 6 heads, width
// 384, context 256, batch 64, vocabulary 65): median wall time of forward + backward + clipped
// AdamW step, the device synchronised inside the timing, fp32 and bf16 autocast.
// bench/torch_gpt.py times the same model in PyTorch. --check DIR loads DIR/gpt.safetensors
// (written by torch_gpt.py --save) and compares kiln's logits with DIR/logits.safetensors.
//
//   bench_gpt [--device cuda:0] [--runs 20] [--warmup 3] [--batch 64] [--precision fp32|bf16]
//             [--check DIR]
// --precision runs one of the two (for profilers: --warmup 1 --runs 1 gives two steps).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <kiln/kiln.hpp>
#include <kiln/nn/checkpoint.hpp>
#include <kiln/nn/transformer.hpp>
#include <kiln/optim.hpp>
#include <kiln/optim/clip.hpp>
#include <kiln/tensor/autocast.hpp>
#include <kiln/tensor/safetensors.hpp>
#include <optional>
#include <string>
#include <vector>

namespace {
using clock_type = std::chrono::steady_clock;

kiln::nn::gpt_config shape(std::int64_t vocab) {
  return {
      .vocab_size = vocab, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384, .seed = 1};
}

int check(const kiln::device& dev, const std::string& dir) {
  const kiln::safetensors_file ref = kiln::load_safetensors(dir + "/logits.safetensors", dev);
  const kiln::tensor tokens = ref.at("tokens"), want = ref.at("logits");
  kiln::nn::gpt model(dev, shape(want.size(2)));
  kiln::nn::load_checkpoint(dir + "/gpt.safetensors", model);
  model.eval();
  kiln::no_grad off;
  const std::vector<float> got = model(tokens).contiguous().to_vector<float>();
  const std::vector<float> w = want.contiguous().to_vector<float>();
  double worst = 0;
  for (std::size_t i = 0; i < w.size(); ++i)
    worst = std::max(worst, double(std::fabs(got[i] - w[i])));
  std::printf("checkpoint from PyTorch: max |kiln logits - torch logits| = %.3g over %zu (%s)\n",
              worst, w.size(), worst <= 1e-4 ? "within 1e-4" : "NOT within 1e-4");
  return worst <= 1e-4 ? 0 : 1;
}
}  // namespace

int main(int argc, char** argv) {
  std::string spec = "cuda:0", check_dir, only;
  int runs = 20, warmup = 3;
  std::int64_t batch = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device")) spec = argv[i + 1];
    if (!std::strcmp(argv[i], "--runs")) runs = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--batch")) batch = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--check")) check_dir = argv[i + 1];
    if (!std::strcmp(argv[i], "--warmup")) warmup = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--precision")) only = argv[i + 1];
  }
  if (!only.empty() && only != "fp32" && only != "bf16") {
    std::fprintf(stderr, "bench_gpt: --precision takes fp32 or bf16, got '%s'\n", only.c_str());
    return 2;
  }
  try {
    const kiln::device dev = kiln::device::get(spec);
    if (!check_dir.empty()) return check(dev, check_dir);
    std::printf("bench_gpt on %s (%s), batch %lld x context 256\n", dev.id().c_str(),
                dev.info().name.c_str(), (long long)batch);
    for (const char* precision : {"fp32", "bf16"}) {
      if (!only.empty() && only != precision) continue;
      kiln::nn::gpt model(dev, shape(65));
      auto params = model.parameters();
      auto opt = kiln::optim::adamw(params, {.lr = 1e-3,
                                             .beta2 = 0.99,
                                             .weight_decay = 0.1,
                                             .no_weight_decay = kiln::optim::decay_split(params)});
      std::vector<std::int64_t> ids(std::size_t(batch * 257));
      for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int64_t((i * 2654435761u) % 65);
      const kiln::tensor all = kiln::tensor::from(dev, ids, {batch, 257});
      const kiln::tensor x = all.slice(1, 0, 256).contiguous(),
                         y = all.slice(1, 1, 257).contiguous();
      auto step = [&] {
        kiln::tensor loss;
        {
          std::optional<kiln::autocast> mixed;
          if (std::string(precision) == "bf16") mixed.emplace(kiln::scalar_type::bf16);
          loss = model.loss(x, y);
        }
        loss.backward();
        kiln::optim::clip_grad_norm_(opt, 1.0);
        opt.step();
        opt.zero_grad();
      };
      for (int i = 0; i < warmup; ++i) step();
      dev.synchronize();
      std::vector<double> t;
      for (int i = 0; i < runs; ++i) {
        const auto a = clock_type::now();
        step();
        dev.synchronize();
        t.push_back(std::chrono::duration<double, std::milli>(clock_type::now() - a).count());
      }
      std::sort(t.begin(), t.end());
      const double ms = t[t.size() / 2];
      std::printf("kiln gpt step %s: %.2f ms  (%.0f tokens/s, %lld parameters)\n", precision, ms,
                  double(batch * 256) / ms * 1e3, (long long)model.parameter_count());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
}
