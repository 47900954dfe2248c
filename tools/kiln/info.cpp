// `kiln info [--json]`: the backends Kiln found (and why any is unavailable), each backend's
// devices with their properties, and kiln::automatic's placement for each GPU.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "commands.hpp"
#include "kiln/kiln.hpp"
#include "query/host_input.hpp"
#include "sort/cub_radix_sort.hpp"
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

void print_json(const nlohmann::ordered_json& j) {
  std::printf("%s\n",
              j.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace).c_str());
}

namespace {

using json = nlohmann::ordered_json;

const char* type_name(device_type t) {
  return t == device_type::gpu ? "gpu" : t == device_type::cpu ? "cpu" : "accelerator";
}

// Each feature: its JSON name (the enumerator's) and the text report's label.
struct feature_name {
  feature f;
  const char* key;
  const char* label;
};
constexpr feature_name feature_names[] = {
    {feature::barrier, "barrier", "barrier+local-memory"},
    {feature::atomics, "atomics", "atomics"},
    {feature::fp64, "fp64", "fp64"},
    {feature::float_atomics, "float_atomics", "float-atomics"},
    {feature::cooperative, "cooperative", "cooperative-launch"},
    {feature::mapped_host, "mapped_host", "mapped-host-memory"},
    {feature::unified_address, "unified_address", "unified-addressing"},
    {feature::warp32, "warp32", "warp32"}};

const char* units_of(op_class c) {
  return c == op_class::gemm || c == op_class::conv ? "flops" : "elements";
}

// kiln::automatic's view of one GPU: the query crossover and the tensor classes' thresholds.
struct gpu_placement {
  bool tensors_gpu;  // the GPU automatic tensors use
  std::uint64_t crossover;
  bool crossover_calibrated;
  detail::threshold_value thresholds[op_class_count];
};

gpu_placement placement_of(const device& d) {
  gpu_placement p{d == detail::automatic_gpu(),
                  detail::q::gpu_crossover_bytes(d),
                  detail::q::stored_placement(d, "").has_value(),
                  {}};
  for (int c = 0; c < op_class_count; ++c)
    p.thresholds[c] = detail::resolve_threshold(static_cast<op_class>(c), d);
  return p;
}

// device::best(), or why there is none.
std::pair<std::optional<device>, std::string> best_device() {
  try {
    return {device::best(), ""};
  } catch (const kiln::error& e) {
    return {std::nullopt, e.what()};
  }
}

// CUDA devices: whether sorts run CUB's agents, and where its headers are (or why not).
std::optional<std::pair<bool, std::string>> cub_sort(const device& d) {
  if (d.info().backend != "cuda") return std::nullopt;
  const std::string why = detail::cub_sort_unavailable(d);
  if (!why.empty()) return std::pair{false, why};
  return std::pair{true, "CCCL headers at " + *detail::cccl_include_dir()};
}

json device_json(const device& d) {
  const device_info& i = d.info();
  json features = json::array();
  for (const feature_name& f : feature_names)
    if (d.supports(f.f)) features.push_back(f.key);
  const device::memory_usage_t mem = d.memory_usage();
  const auto cub = cub_sort(d);
  return {
      {"id", d.id()},
      {"index", d.index()},
      {"name", i.name},
      {"backend", i.backend},
      {"type", type_name(i.type)},
      {"vendor", i.vendor},
      {"arch", i.arch},
      {"driver_version", i.driver_version},
      {"global_mem_bytes", i.global_mem_bytes},
      {"max_alloc_bytes", i.max_alloc_bytes},
      {"local_mem_bytes", i.local_mem_bytes},
      {"compute_units", i.compute_units},
      {"simd_width", i.simd_width},
      {"max_work_group_size", i.max_work_group_size},
      {"clock_mhz", i.clock_mhz},
      {"max_work_item_sizes", i.max_work_item_sizes},
      {"max_groups", i.max_groups},
      {"compute_major", i.compute_major},
      {"compute_minor", i.compute_minor},
      {"features", features},
      {"memory_usage", {{"in_use_bytes", mem.in_use}, {"peak_bytes", mem.peak}}},
      {"cub_sort", cub ? json{{"available", cub->first}, {"detail", cub->second}} : json(nullptr)}};
}

int info_json(const std::vector<backend_status>& backends, const std::vector<device>& devices) {
  json out = {{"version", version_string}, {"backends", json::array()}};
  for (const backend_status& b : backends) {
    json devs = json::array();
    for (const device& d : devices)
      if (d.backend() == b.name) devs.push_back(device_json(d));
    out["backends"].push_back({{"name", b.name},
                               {"loaded", b.loaded},
                               {"detail", b.detail},
                               {"path", b.path.empty() ? json(nullptr) : json(b.path)},
                               {"device_count", b.device_count},
                               {"extensions", b.extensions},
                               {"devices", devs}});
  }
  json placement = json::array();
  for (const device& d : devices) {
    if (d.info().type != device_type::gpu) continue;
    const gpu_placement p = placement_of(d);
    json thresholds = json::object();
    for (int c = 0; c < op_class_count; ++c) {
      const auto cls = static_cast<op_class>(c);
      const detail::threshold_value v = p.thresholds[c];
      const bool never = v.work == placement_never;
      thresholds[to_string(cls)] = {{"work", never ? json(nullptr) : json(v.work)},
                                    {"never", never},
                                    {"units", units_of(cls)},
                                    {"source", detail::source_name(v.source)}};
    }
    placement.push_back(
        {{"device", d.id()},
         {"tensors_gpu", p.tensors_gpu},
         {"query_crossover_bytes", p.crossover},
         {"query_crossover_source", p.crossover_calibrated ? "calibrated" : "default"},
         {"thresholds", thresholds}});
  }
  out["placement"] = placement;
  const auto [best, why] = best_device();
  out["best_device"] = best ? json(best->id()) : json(nullptr);
  out["best_device_error"] = best ? json(nullptr) : json(why);
  print_json(out);
  return 0;
}

int info_text(const std::vector<backend_status>& backends, const std::vector<device>& devices) {
  std::printf("Kiln %s\n\nbackends:\n", version_string);
  for (const backend_status& b : backends) {
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
  for (const device& d : devices) {
    const device_info& i = d.info();
    std::printf("  %s  %s\n", d.id().c_str(), i.name.c_str());
    std::printf("    type %s, vendor %s, arch %s, driver %s\n", type_name(i.type), i.vendor.c_str(),
                i.arch.c_str(), i.driver_version.c_str());
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
    for (const feature_name& f : feature_names)
      if (d.supports(f.f)) feats += std::string(feats.empty() ? "" : ", ") + f.label;
    std::printf("    features: %s\n", feats.c_str());
    if (const auto cub = cub_sort(d))
      std::printf("    sort: %s (%s)\n", cub->first ? "CUB's onesweep agents" : "Kiln's kernels",
                  cub->second.c_str());
  }
  std::printf("\nkiln::automatic placement (`kiln calibrate` measures; docs/placement.md):\n");
  bool any_gpu = false;
  for (const device& d : devices) {
    if (d.info().type != device_type::gpu) continue;
    any_gpu = true;
    const gpu_placement p = placement_of(d);
    std::printf("  %s%s: query crossover %s (%s)\n", d.id().c_str(),
                p.tensors_gpu ? " (tensors' GPU)" : "", human_bytes(p.crossover).c_str(),
                p.crossover_calibrated ? "calibrated" : "default");
    for (int c = 0; c < op_class_count; ++c) {
      const auto cls = static_cast<op_class>(c);
      const detail::threshold_value v = p.thresholds[c];
      char work[32];
      std::snprintf(work, sizeof work, "%.3g", double(v.work));
      std::printf("    %-12s %10s %-8s (%s)\n", to_string(cls),
                  v.work == placement_never ? "never" : work, units_of(cls),
                  detail::source_name(v.source));
    }
  }
  if (!any_gpu) std::printf("  no GPU: automatic tensors and queries run on the host CPU\n");
  const auto [best, why] = best_device();
  const std::string best_text = best ? best->id() : "none (" + why + ")";
  std::printf("\nbest device: %s\n", best_text.c_str());
  return 0;
}

}  // namespace

int info(const info_options& o) {
  const std::vector<backend_status> b = backends();
  const std::vector<device> d = device::all();
  return o.json ? info_json(b, d) : info_text(b, d);
}

}  // namespace kiln::tool
