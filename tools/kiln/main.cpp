// kiln: information, a demo, kernel-cache management, placement calibration and MNIST training.
// The command line lives here (CLI11): every command has --help and --version; an unknown
// option, command or argument is refused with exit status 2, as is a missing command.
#include <CLI/CLI.hpp>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "kiln/error.hpp"
#include "kiln/version.hpp"

namespace {

constexpr const char* environment =
    "Environment:\n"
    "  KILN_DEVICE       the device `best` picks: cuda:0, opencl:1, cpu, ...\n"
    "  KILN_PLUGIN_PATH  directories (':'-separated) searched for backend plugins first\n"
    "  KILN_CACHE_DIR    the kernel cache (default $XDG_CACHE_HOME/kiln, else ~/.cache/kiln)\n"
    "  KILN_CACHE=0      no disk cache (no placement.txt either)\n"
    "  KILN_CXX          the host C++ compiler the CPU backend compiles kernels with\n"
    "  KILN_CPU_THREADS  the CPU backend's threads (default: every core)\n";

const std::string version_line = std::string("kiln ") + kiln::version_string;

// "kiln cache clear": the command path of a subcommand.
std::string path_of(const CLI::App* a) {
  std::string p = a->get_name();
  for (a = a->get_parent(); a; a = a->get_parent()) p = a->get_name() + " " + p;
  return p;
}

// The deepest subcommand the parse reached (the app itself when none).
const CLI::App* deepest(const CLI::App& app) {
  const CLI::App* a = &app;
  while (!a->get_subcommands().empty()) a = a->get_subcommands().front();
  return a;
}

// a's help (App::help would give the help of the subcommand parsed, here `help`).
std::string usage(const CLI::App* a) {
  return a->get_formatter()->make_help(a, path_of(a), CLI::AppFormatMode::Normal);
}

int refuse(const std::string& where, const std::string& what) {
  std::fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", where.c_str(), what.c_str(),
               where.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace kiln::tool;
  CLI::App app{std::string("Kiln ") + kiln::version_string +
                   ": data-parallel work on GPUs and CPUs from one code base.",
               "kiln"};
  app.set_version_flag("--version", version_line, "Print Kiln's version and exit");
  app.require_subcommand(0, 1);  // none: usage and status 2, below

  // The command chosen, once parsed; each subcommand gets --help (CLI11's) and --version.
  std::vector<std::pair<CLI::App*, std::function<int()>>> commands;
  auto command = [&](const char* name, const char* what, std::function<int()> run) {
    CLI::App* c = app.add_subcommand(name, what);
    c->set_version_flag("--version", version_line, "Print Kiln's version and exit");
    commands.emplace_back(c, std::move(run));
    return c;
  };

  info_options io;
  command("info", "Backends (and why any is unavailable), devices, placement thresholds", [&] {
    return info(io);
  })->add_flag("--json", io.json, "Print it as JSON (docs/tool.md has the keys)");

  demo_options dm;
  command("demo", "Compile a kernel, run it over 16M elements, check it, report GB/s",
          [&] { return demo(dm); })
      ->add_option("device", dm.device,
                   "The device (cuda:0, cpu, ...); default KILN_DEVICE, "
                   "else the best one");

  cache_options co;
  CLI::App* cache_cmd =
      command("cache", "Kernel-cache location, entries and size (`cache clear` empties it)",
              [&] { return cache(co); });
  cache_cmd->add_flag("--json", co.json, "Print it as JSON");
  CLI::App* clear = cache_cmd->add_subcommand("clear", "Remove every cached kernel");
  clear->set_version_flag("--version", version_line, "Print Kiln's version and exit");
  clear->add_flag("--json", co.json, "Print what was removed as JSON");
  clear->callback([&] { co.clear = true; });

  calibrate_options ko;
  std::string part;
  CLI::App* cal = command(
      "calibrate", "Measure where each GPU beats the CPU on host data (kiln::automatic)", [&] {
        ko.query = part.empty() || part == "query";
        ko.tensor = part.empty() || part == "tensor";
        return calibrate(ko);
      });
  cal->add_option("part", part, "query or tensor (default: both)")
      ->check(CLI::IsMember({"query", "tensor"}));
  cal->add_flag("--json", ko.json, "Print the measured tables as JSON");
  cal->add_flag("--progress", ko.progress,
                "Show progress on stderr even when it is not a terminal");
  cal->footer(
      "Stores the thresholds in the cache directory's placement.txt, where kiln::automatic "
      "reads them\n(docs/placement.md). Progress goes to stderr when it is a terminal.");

  train_options to;
  CLI::Option* autocast = nullptr;  // the deprecated alias of --precision bf16|f16
  CLI::App* tr = command("train", "Train the MLP and LeNet on MNIST (scripts/fetch_mnist.sh)", [&] {
    if (autocast->count() > 0)
      std::fprintf(stderr,
                   "kiln train: --autocast is deprecated: use "
                   "--precision %s\n",
                   to.precision.c_str());
    return train(to);
  });
  tr->footer(
      "Trains on the MNIST digits of scripts/fetch_mnist.sh (8,000 train / 2,000 test); gpt on\n"
      "the fortune cookies of Debian's fortunes package (--data: their directory).");
  tr->add_option("model", to.model,
                 "mlp, lenet, both, mlp_wide (10M parameters), or gpt (character-level)")
      ->check(CLI::IsMember({"mlp", "lenet", "both", "mlp_wide", "gpt"}))
      ->capture_default_str();
  CLI::Option* one = tr->add_option("--device", to.device_spec,
                                    "The device; default KILN_DEVICE, else the best one")
                         ->type_name("SPEC");
  tr->add_option("--devices", to.devices,
                 "Data parallel over these devices (one rank each, kiln::nn::data_parallel); "
                 "each step's batch is split evenly over them")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->type_name("SPEC,SPEC,...")
      ->excludes(one);
  tr->add_option("--epochs", to.epochs, "Epochs per model")
      ->check(CLI::Range(1, INT_MAX).description(""))
      ->type_name("N")
      ->capture_default_str();
  tr->add_option("--batch", to.batch, "Images per step")
      ->check(CLI::Range(std::int64_t{1}, INT64_MAX).description(""))
      ->type_name("N")
      ->capture_default_str();
  tr->add_option("--seed", to.seed, "Seeds the split, the initialisation and the shuffles")
      ->type_name("N")
      ->capture_default_str();
  tr->add_option("--lr", to.lr, "Adam's learning rate")->type_name("X")->capture_default_str();
  tr->add_flag("--batch-norm", to.batch_norm, "LeNet with batch normalisation");
  tr->add_flag("--graph", to.graph,
               "capture the training step once and replay it as a CUDA graph (kiln::step_graph; "
               "other backends run it eagerly)");
  CLI::Option* precision =
      tr->add_option("--precision", to.precision,
                     "fp32; tf32 (f32 products and convolutions may use TensorFloat-32 where the "
                     "device has it); bf16 or f16 (mixed precision: matrix products in 16 bits "
                     "under kiln::autocast, f32 parameters; f16 adds loss scaling)")
          ->check(CLI::IsMember({"fp32", "tf32", "bf16", "f16"}))
          ->type_name("fp32|tf32|bf16|f16")
          ->capture_default_str();
  autocast = tr->add_option("--autocast", to.precision, "Deprecated: --precision bf16|f16")
                 ->check(CLI::IsMember({"bf16", "f16"}))
                 ->type_name("bf16|f16")
                 ->excludes(precision);
  tr->add_option("--steps", to.max_steps,
                 "At most N steps per epoch (0: the whole epoch); gpt: N steps in all (default "
                 "2000 GPU, 300 CPU)")
      ->check(CLI::Range(std::int64_t{0}, INT64_MAX).description(""))
      ->type_name("N")
      ->capture_default_str();
  tr->add_option("--data", to.data_dir, "The MNIST directory (default: scripts/fetch_mnist.sh's)")
      ->type_name("DIR");
  tr->add_option("--save", to.save_dir, "Save each model's checkpoint (safetensors) there")
      ->type_name("DIR");
  auto positive = CLI::Range(std::int64_t{1}, INT64_MAX).description("");
  tr->add_option("--context", to.gpt.context, "gpt: tokens of context (default 256 GPU, 64 CPU)")
      ->check(positive)
      ->type_name("N");
  tr->add_option("--layers", to.gpt.layers, "gpt: transformer blocks (default 6 GPU, 4 CPU)")
      ->check(positive)
      ->type_name("N");
  tr->add_option("--heads", to.gpt.heads, "gpt: attention heads (default 6 GPU, 4 CPU)")
      ->check(positive)
      ->type_name("N");
  tr->add_option("--width", to.gpt.width, "gpt: embedding width (default 384 GPU, 128 CPU)")
      ->check(positive)
      ->type_name("N");
  tr->add_option("--dropout", to.gpt.dropout, "gpt: dropout probability")
      ->check(CLI::Range(0.0, 0.99).description(""))
      ->type_name("P")
      ->capture_default_str();
  tr->add_option("--eval-every", to.gpt.eval_every, "gpt: steps between validation reports")
      ->check(positive)
      ->type_name("N");
  tr->add_option("--grad-accum", to.gpt.grad_accum,
                 "gpt: micro-batches per optimizer step: the batch is split into N equal parts, "
                 "each one's gradient accumulated (the memory of batch / N)")
      ->check(positive)
      ->type_name("N")
      ->capture_default_str();
  tr->add_option("--sample", to.gpt.sample_chars, "gpt: characters to sample at the end")
      ->check(CLI::Range(std::int64_t{0}, INT64_MAX).description(""))
      ->type_name("N")
      ->capture_default_str();

  command("version", "Print Kiln's version", [] {
    std::printf("%s\n", version_line.c_str());
    return 0;
  });

  std::string topic;
  command("help", "Print this help, or a command's", [&] {
    for (const auto& [c, run] : commands)
      if (c->get_name() == topic && topic != "help") return std::printf("%s", usage(c).c_str()), 0;
    if (topic.empty()) return std::printf("%s", usage(&app).c_str()), 0;
    return refuse("kiln help", "unknown command '" + topic + "'");
  })->add_option("command", topic, "The command");
  app.footer(environment);  // after the subcommands: they would inherit it

  // Extras are allowed at the top level only, so that an unknown command or option there gets
  // its own message below; each subcommand refuses its own.
  app.allow_extras();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version: stdout, status 0
    return refuse(path_of(deepest(app)), e.what());
  }
  if (const std::vector<std::string> extra = app.remaining(); !extra.empty()) {
    const std::string& a = extra.front();
    return refuse("kiln", (a[0] == '-' ? "unknown option '" : "unknown command '") + a + "'");
  }
  for (const auto& [c, run] : commands) {
    if (!c->parsed()) continue;
    try {
      return run();
    } catch (const kiln::error& e) {
      std::fprintf(stderr, "%s: %s: %s\n", path_of(c).c_str(), kiln::to_string(e.category()),
                   e.what());
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s: %s\n", path_of(c).c_str(), e.what());
    }
    return 1;
  }
  std::fprintf(stderr, "%skiln: a command is required\n", usage(&app).c_str());
  return 2;
}
