// kiln: information, a demo, and kernel-cache management.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "commands.hpp"
#include "kiln/error.hpp"
#include "kiln/version.hpp"

namespace {
void usage() {
  std::puts(
      "usage: kiln <command>\n"
      "  info            backends found (and why any is unavailable), devices and properties\n"
      "  demo [device]   compile a kernel, run it over 16M elements, check it, report GB/s\n"
      "  cache           kernel-cache location, entries and size\n"
      "  cache clear     remove every cached kernel\n"
      "  calibrate       measure where GPUs beat the CPU on host data (kiln::automatic)\n"
      "  train [model]   train the MLP and LeNet on MNIST (scripts/fetch_mnist.sh)\n"
      "  version         print Kiln's version\n"
      "environment: KILN_DEVICE (e.g. cuda:0, cpu), KILN_PLUGIN_PATH, KILN_CACHE_DIR,\n"
      "             KILN_CACHE=0, KILN_CXX, KILN_CPU_THREADS");
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    usage();
    return args.empty() ? 2 : 0;
  }
  const std::string cmd = args[0];
  args.erase(args.begin());
  try {
    if (cmd == "info") return kiln::tool::info(args);
    if (cmd == "demo") return kiln::tool::demo(args);
    if (cmd == "cache") return kiln::tool::cache(args);
    if (cmd == "calibrate") return kiln::tool::calibrate(args);
    if (cmd == "train") return kiln::tool::train(args);
    if (cmd == "version") {
      std::printf("kiln %s\n", kiln::version_string);
      return 0;
    }
  } catch (const kiln::error& e) {
    std::fprintf(stderr, "kiln %s: %s: %s\n", cmd.c_str(), kiln::to_string(e.category()), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kiln %s: %s\n", cmd.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "kiln: unknown command '%s'\n", cmd.c_str());
  usage();
  return 2;
}
