// The host as one device: properties from /proc/cpuinfo and sysconf.
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string_view>

#include "backends/cpu/cpu_backend.hpp"

namespace kiln::cpu::abi {
namespace {

struct cpu_facts {
  std::string model = "host CPU", vendor = "unknown", flags;
};

const cpu_facts& facts() {
  static const cpu_facts f = [] {
    cpu_facts r;
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);) {
      auto value = [&] {
        auto c = line.find(':');
        return c == std::string::npos ? std::string()
                                      : line.substr(line.find_first_not_of(" \t", c + 1));
      };
      if (line.starts_with("model name") && r.model == "host CPU")
        r.model = value();
      else if (line.starts_with("vendor_id") && r.vendor == "unknown")
        r.vendor = value();
      else if (line.starts_with("flags") && r.flags.empty()) {
        r.flags = value();
        r.flags.insert(r.flags.begin(), ' ');
        r.flags.push_back(' ');
      }
    }
    return r;
  }();
  return f;
}

bool has(std::string_view flag) {
  const std::string& f = facts().flags;  // " flag1 flag2 ... "
  for (std::size_t p = f.find(flag); p != std::string::npos; p = f.find(flag, p + 1))
    if (f[p - 1] == ' ' && p + flag.size() < f.size() && f[p + flag.size()] == ' ') return true;
  return false;
}

}  // namespace

kiln_status device_info(int index, kiln_device_info* out) {
  if (index != 0) return fail(KILN_ERR_INVALID_ARGUMENT, "the cpu backend has one device");
  *out = kiln_device_info{};
  const cpu_facts& f = facts();
  std::snprintf(out->name, sizeof out->name, "%s", f.model.c_str());
  std::snprintf(out->vendor, sizeof out->vendor, "%s", f.vendor.c_str());
  // Kernels are built with -march=native: the cache key must tell CPUs apart.
  const char* isa = has("avx512f") ? "avx512" : has("avx2") ? "avx2" : has("avx") ? "avx" : "base";
  const std::size_t h = std::hash<std::string>{}(f.model + f.flags);
#if defined(__x86_64__)
  const char* machine = "x86_64";
#elif defined(__aarch64__)
  const char* machine = "aarch64";
#else
  const char* machine = "host";
#endif
  std::snprintf(out->arch, sizeof out->arch, "%s-%s-%08zx", machine, isa, h & 0xffffffffu);
  std::snprintf(out->driver_version, sizeof out->driver_version, "kiln-cpu 1");
  out->type = KILN_DEVICE_CPU;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  out->global_mem_bytes = pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
  out->max_alloc_bytes = out->global_mem_bytes;
  out->local_mem_bytes = 0;
  out->compute_units = pool().size();
  out->simd_width = std::strcmp(isa, "avx512") == 0 ? 16 : std::strcmp(isa, "base") == 0 ? 4 : 8;
  out->max_work_group_size = 4096;
  for (int d = 0; d < 3; ++d) {
    out->max_work_item_sizes[d] = 4096;
    out->max_groups[d] = uint64_t(1) << 48;
  }
  out->features = KILN_FEATURE_ATOMICS | KILN_FEATURE_DOUBLE | KILN_FEATURE_FLOAT_ATOMICS |
                  KILN_FEATURE_MAPPED_HOST | KILN_FEATURE_UNIFIED_ADDR;
  return KILN_OK;
}

kiln_status device_open(int index, kiln_device_h* out) {
  if (index != 0) return fail(KILN_ERR_INVALID_ARGUMENT, "the cpu backend has one device");
  static kiln_device_s the_cpu;
  *out = &the_cpu;
  return KILN_OK;
}

void device_close(kiln_device_h) {}

}  // namespace kiln::cpu::abi
