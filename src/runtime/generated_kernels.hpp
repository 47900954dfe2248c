// The cache of generated kernels, for every generator (queries today, tensors later). A
// generator names its program by a structural key (ir::hasher over its IR and template
// parameters): a repeated shape finds its kernels without rendering any source. Bounded,
// thread-safe; KILN_DUMP_KERNELS=dir writes each program's source to dir/<generator>_<key>.kiln.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/kernel.hpp"

namespace kiln::detail {

// A rendered program and its kernels' names, in launch order. `about` (the generator's IR,
// say) heads the dumped file as // comments, so a dump can be tied to what produced it.
struct generated_program {
  std::string source;
  std::vector<std::string> kernels;
  std::string about;
  bool native = false;  // the backend's own language (compile_native), with these options
  std::string options = {};
};

struct generated_kernels {
  std::vector<kernel> kernels;
  bool compiled = false;  // this call ran a compiler (not a memory or disk cache hit)
};

// The kernels named by (dev, generator, key); on a miss, render() gives the source, which is
// compiled (through the program caches) and kept.
generated_kernels get_generated(const device& dev, const char* generator, std::uint64_t key,
                                const std::function<generated_program()>& render);

struct generated_kernel_stats {
  std::uint64_t hits = 0, misses = 0, compiles = 0;
};
generated_kernel_stats generated_stats();

// The dump file's name for a program: "<generator>_<key as 16 hex digits>.kiln".
std::string generated_name(const char* generator, std::uint64_t key);

}  // namespace kiln::detail
