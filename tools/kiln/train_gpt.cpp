// `kiln train gpt`: a character-level GPT (kiln::nn::gpt) on the fortune cookies of Debian's
// fortunes package (kiln::data::load_fortunes), nanoGPT's recipe: AdamW (no decay on biases and
// norms), warm-up then cosine learning rate, gradients clipped to norm 1. Prints the training
// and validation loss every --eval-every steps beside the unigram baseline, then a sampled
// paragraph; --save writes a safetensors checkpoint (weights and optimizer state). With
// --grad-accum N each step's batch runs as N micro-batches whose gradients accumulate (each
// loss scaled by 1/N), then one clipped optimizer step: the same update, a smaller activation
// footprint.
// GPUs get nanoGPT's shakespeare-char size (6 layers, 6 heads, width 384, context 256); the
// CPU a smaller one (4 layers, 4 heads, width 128, context 64), unless given.
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>

#include "commands.hpp"
#include "kiln/data/text.hpp"
#include "kiln/nn/checkpoint.hpp"
#include "kiln/nn/transformer.hpp"
#include "kiln/optim.hpp"
#include "kiln/optim/clip.hpp"
#include "kiln/tensor/autocast.hpp"

namespace kiln::tool {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Windows of `steps` steps at once, uploaded together: one host-to-device copy per chunk
// instead of one per step (a copy from pageable memory waits for the device's queue).
struct window_chunk {
  tensor x, y;  // [steps * batch, block]
  std::int64_t first = 0, steps = 0;
};
window_chunk next_chunk(const data::char_corpus& c, std::int64_t first, std::int64_t steps,
                        std::int64_t batch, std::int64_t block, std::uint64_t seed,
                        const device& dev) {
  auto [x, y] = c.batch(c.train, steps * batch, block, seed * 1000003u + std::uint64_t(first), dev);
  return {x, y, first, steps};
}

// Mean loss over `batches` seeded batches of the validation split, without recording.
double validation_loss(nn::gpt& m, const data::char_corpus& c, std::int64_t batches,
                       std::int64_t batch, std::int64_t block, const std::string& precision,
                       const device& dev) {
  no_grad off;
  m.eval();
  tensor sum = tensor::zeros(dev, {});
  for (std::int64_t k = 0; k < batches; ++k) {
    auto [x, y] = c.batch(c.val, batch, block, 7777 + std::uint64_t(k), dev);
    std::optional<kiln::autocast> mixed;
    if (precision == "bf16" || precision == "f16")
      mixed.emplace(precision == "f16" ? scalar_type::f16 : scalar_type::bf16);
    sum = (sum + m.loss(x, y).to(scalar_type::f32)).eval();
  }
  m.train();
  return double(sum.item<float>()) / double(batches);
}

}  // namespace

int train_gpt(const train_options& o) {
  const device dev = o.device_spec.empty() ? device::best() : device::get(o.device_spec);
  const bool gpu = dev.info().type == device_type::gpu;
  const std::string dir = o.data_dir.empty() ? data::default_fortunes_dir() : o.data_dir;
  data::char_corpus corpus;
  try {
    corpus = data::load_fortunes(dir, 0.1, o.seed);
  } catch (const not_found& e) {
    std::fprintf(stderr, "kiln train gpt: %s\n", e.what());
    return 1;
  }
  nn::gpt_config cfg;
  cfg.vocab_size = corpus.vocab_size();
  cfg.block_size = o.gpt.context > 0 ? o.gpt.context : (gpu ? 256 : 64);
  cfg.n_layer = o.gpt.layers > 0 ? o.gpt.layers : (gpu ? 6 : 4);
  cfg.n_head = o.gpt.heads > 0 ? o.gpt.heads : (gpu ? 6 : 4);
  cfg.n_embd = o.gpt.width > 0 ? o.gpt.width : (gpu ? 384 : 128);
  cfg.dropout = o.gpt.dropout;
  cfg.seed = o.seed + 1;
  const std::int64_t steps = o.max_steps > 0 ? o.max_steps : (gpu ? 2000 : 300);
  const std::int64_t batch = o.batch, block = cfg.block_size, accum = o.gpt.grad_accum;
  if (accum < 1 || batch % accum != 0) {
    std::fprintf(stderr,
                 "kiln train gpt: --grad-accum %lld must divide the batch (%lld) into equal "
                 "micro-batches\n",
                 (long long)accum, (long long)batch);
    return 2;
  }
  const std::int64_t micro = batch / accum;
  const std::int64_t eval_every =
      o.gpt.eval_every > 0 ? o.gpt.eval_every : std::max<std::int64_t>(1, steps / 5);
  if (std::int64_t(corpus.val.size()) <= block || std::int64_t(corpus.train.size()) <= block) {
    std::fprintf(stderr, "kiln train gpt: the corpus in %s is too small for a context of %lld\n",
                 dir.c_str(), (long long)block);
    return 1;
  }
  nn::gpt model(dev, cfg);
  const std::vector<tensor> params = model.parameters();
  optim::optimizer opt = optim::adamw(params, {.lr = o.lr,
                                               .beta1 = 0.9,
                                               .beta2 = 0.99,
                                               .weight_decay = 0.1,
                                               .no_weight_decay = optim::decay_split(params)});
  optim::warmup_cosine_lr schedule(opt, std::max<std::int64_t>(1, steps / 20), steps, o.lr / 10);
  const double baseline = corpus.unigram_loss();
  std::printf(
      "fortunes: %lld documents from %s, %zu train / %zu validation bytes, vocabulary %lld; "
      "unigram baseline %.4f\n",
      (long long)corpus.documents, dir.c_str(), corpus.train.size(), corpus.val.size(),
      (long long)cfg.vocab_size, baseline);
  const std::string split =
      accum > 1 ? " (" + std::to_string(accum) + " micro-batches of " + std::to_string(micro) + ")"
                : "";
  std::printf(
      "gpt: %lld parameters (%lld layers, %lld heads, width %lld, context %lld), AdamW lr %g, "
      "batch %lld%s, %lld steps, on %s, precision %s\n",
      (long long)model.parameter_count(), (long long)cfg.n_layer, (long long)cfg.n_head,
      (long long)cfg.n_embd, (long long)block, o.lr, (long long)batch, split.c_str(),
      (long long)steps, dev.id().c_str(), o.precision.c_str());
  std::fflush(stdout);

  const std::int64_t chunk_steps = 50;
  window_chunk chunk;
  tensor loss_sum = tensor::zeros(dev, {});
  std::int64_t since_report = 0;
  double train_seconds = 0, val = 0;
  auto t0 = clock_type::now();
  for (std::int64_t step = 0; step < steps; ++step) {
    if (step == 0 || step >= chunk.first + chunk.steps)
      chunk =
          next_chunk(corpus, step, std::min(chunk_steps, steps - step), batch, block, o.seed, dev);
    tensor loss;  // the step's mean loss: the micro-batches' scaled losses summed
    for (std::int64_t m = 0; m < accum; ++m) {
      const std::int64_t row = (step - chunk.first) * batch + m * micro;
      const tensor x = chunk.x.slice(0, row, row + micro), y = chunk.y.slice(0, row, row + micro);
      tensor part;
      {
        std::optional<kiln::autocast> mixed;
        if (o.precision == "bf16" || o.precision == "f16")
          mixed.emplace(o.precision == "f16" ? scalar_type::f16 : scalar_type::bf16);
        part = model.loss(x, y);
      }
      if (accum > 1) part = part / float(accum);
      part.backward();  // accumulates into the optimizer's gradient buffer
      loss = m == 0 ? part.detach() : loss + part.detach();
    }
    optim::clip_grad_norm_(opt, 1.0);
    opt.step();
    schedule.step();
    opt.zero_grad();
    {
      no_grad off;
      loss_sum = (loss_sum + loss.detach().to(scalar_type::f32)).eval();
    }
    ++since_report;
    if ((step + 1) % eval_every == 0 || step + 1 == steps) {
      const double train_loss = double(loss_sum.item<float>()) / double(since_report);
      const double secs = since(t0);
      train_seconds += secs;
      const double tokens_per_s = double(since_report * batch * block) / secs;
      val = validation_loss(model, corpus, gpu ? 20 : 4, batch, block, o.precision, dev);
      std::printf("step %5lld/%lld  train loss %.4f  val loss %.4f  lr %.2e  %9.0f tokens/s\n",
                  (long long)(step + 1), (long long)steps, train_loss, val, schedule.last_lr(),
                  tokens_per_s);
      std::fflush(stdout);
      loss_sum = tensor::zeros(dev, {});
      since_report = 0;
      t0 = clock_type::now();
    }
  }
  const std::vector<std::int64_t> prompt = corpus.encode("\n");
  const std::vector<std::int64_t> text =
      model.generate(prompt, o.gpt.sample_chars, {.temperature = 0.8, .top_k = 0, .seed = o.seed});
  std::printf("sample:\n%s\n", corpus.decode(std::span(text).subspan(prompt.size())).c_str());
  std::printf(
      "summary: validation loss %.4f against the unigram baseline %.4f (%s), %.1f s "
      "training\n",
      val, baseline, val < baseline ? "below" : "NOT below", train_seconds);
  if (!o.save_dir.empty()) {
    const std::string path = o.save_dir + "/gpt.safetensors";
    nn::save_checkpoint(path, model, &opt);
    std::printf("gpt: saved %s\n", path.c_str());
  }
  return 0;
}

}  // namespace kiln::tool
