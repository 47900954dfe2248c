#include <cstdio>

#include "commands.hpp"
#include "kiln/kiln.hpp"
#include "query/host_input.hpp"
#include "tensor/placement.hpp"

namespace kiln::tool {

std::string human_bytes(unsigned long long b) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(b);
  int u = 0;
  while (v >= 1024 && u < 4) v /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
  return buf;
}

int info(const std::vector<std::string>&) {
  std::printf("Kiln %s\n\nbackends:\n", kiln::version_string);
  for (const backend_status& b : backends()) {
    std::printf("  %-7s %s, %d device(s)%s%s\n", b.name.c_str(),
                b.loaded ? "loaded" : "unavailable", b.device_count, b.detail.empty() ? "" : ": ",
                b.detail.c_str());
    if (!b.path.empty()) std::printf("          plugin %s\n", b.path.c_str());
    if (b.loaded) {
      std::string ext;
      for (const std::string& e : b.extensions) ext += (ext.empty() ? "" : ", ") + e;
      std::printf("          extensions: %s\n", ext.empty() ? "none" : ext.c_str());
    }
  }
  std::printf("\ndevices:\n");
  for (const device& d : device::all()) {
    const device_info& i = d.info();
    std::printf("  %s  %s\n", d.id().c_str(), i.name.c_str());
    std::printf("    type %s, vendor %s, arch %s, driver %s\n",
                i.type == device_type::gpu   ? "gpu"
                : i.type == device_type::cpu ? "cpu"
                                             : "accelerator",
                i.vendor.c_str(), i.arch.c_str(), i.driver_version.c_str());
    if (i.compute_major)
      std::printf("    compute capability %u.%u\n", i.compute_major, i.compute_minor);
    std::printf("    memory %s (largest allocation %s), local memory %s per work-group\n",
                human_bytes(i.global_mem_bytes).c_str(), human_bytes(i.max_alloc_bytes).c_str(),
                human_bytes(i.local_mem_bytes).c_str());
    std::printf("    %u compute units, SIMD width %u, clock %u MHz\n", i.compute_units,
                i.simd_width, i.clock_mhz);
    std::printf("    work-group max %u (%u x %u x %u), groups max %llu x %llu x %llu\n",
                i.max_work_group_size, i.max_work_item_sizes[0], i.max_work_item_sizes[1],
                i.max_work_item_sizes[2], (unsigned long long)i.max_groups[0],
                (unsigned long long)i.max_groups[1], (unsigned long long)i.max_groups[2]);
    std::string feats;
    const std::pair<feature, const char*> names[] = {
        {feature::barrier, "barrier+local-memory"},
        {feature::atomics, "atomics"},
        {feature::fp64, "fp64"},
        {feature::float_atomics, "float-atomics"},
        {feature::cooperative, "cooperative-launch"},
        {feature::mapped_host, "mapped-host-memory"},
        {feature::unified_address, "unified-addressing"}};
    for (auto [f, n] : names)
      if (d.supports(f)) feats += std::string(feats.empty() ? "" : ", ") + n;
    std::printf("    features: %s\n", feats.c_str());
  }
  std::printf("\nkiln::automatic placement (`kiln calibrate` measures; docs/placement.md):\n");
  bool any_gpu = false;
  for (const device& d : device::all()) {
    if (d.info().type != device_type::gpu) continue;
    any_gpu = true;
    const auto crossover = detail::q::stored_placement(d, "");
    std::printf("  %s%s: query crossover %s (%s)\n", d.id().c_str(),
                d == detail::automatic_gpu() ? " (tensors' GPU)" : "",
                human_bytes(detail::q::gpu_crossover_bytes(d)).c_str(),
                crossover ? "calibrated" : "default");
    for (int c = 0; c < op_class_count; ++c) {
      const auto cls = static_cast<op_class>(c);
      const detail::threshold_value v = detail::resolve_threshold(cls, d);
      char work[32];
      std::snprintf(work, sizeof work, "%.3g", double(v.work));
      std::printf("    %-12s %10s %-8s (%s)\n", to_string(cls),
                  v.work == placement_never ? "never" : work,
                  cls == op_class::gemm || cls == op_class::conv ? "flops" : "elements",
                  detail::source_name(v.source));
    }
  }
  if (!any_gpu) std::printf("  no GPU: automatic tensors and queries run on the host CPU\n");
  try {
    std::printf("\nbest device: %s\n", device::best().id().c_str());
  } catch (const kiln::error& e) {
    std::printf("\nbest device: none (%s)\n", e.what());
  }
  return 0;
}

}  // namespace kiln::tool
