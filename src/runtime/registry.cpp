// Finds and loads backends: the built-in CPU backend, then plugins named
// libkiln_backend_<name>.so in KILN_PLUGIN_PATH and next to libkiln.
#include <dirent.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include "runtime/runtime.hpp"

extern "C" const kiln_backend_v1* kiln_cpu_backend_entry(uint32_t core_abi_version);

namespace kiln::detail {
namespace {

// Plugins Kiln ships; listed even when absent, so `kiln info` can say why.
const char* const known_plugins[] = {"cuda", "opencl"};
constexpr const char* plugin_prefix = "libkiln_backend_";

std::vector<std::string> plugin_dirs() {
  std::vector<std::string> dirs;
  if (const char* p = std::getenv("KILN_PLUGIN_PATH")) {
    std::stringstream ss(p);
    for (std::string d; std::getline(ss, d, ':');)
      if (!d.empty()) dirs.push_back(d);
  }
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&kiln_cpu_backend_entry), &info) && info.dli_fname) {
    std::error_code ec;
    auto lib = std::filesystem::canonical(info.dli_fname, ec);
    if (!ec) dirs.push_back(lib.parent_path().string());
  }
  return dirs;
}

void init_backend(backend& b) {
  if (b.api->abi_version != KILN_BACKEND_ABI_VERSION) {
    b.detail = "plugin " + b.path + " has backend ABI version " +
               std::to_string(b.api->abi_version) + ", this Kiln needs version " +
               std::to_string(KILN_BACKEND_ABI_VERSION) + ": rebuild the plugin";
    b.api = nullptr;
    return;
  }
  b.name = b.api->name;
  if (kiln_status s = b.api->init(); s != KILN_OK) {
    b.detail = b.api->last_error();
    return;
  }
  b.loaded = true;
  b.detail = b.api->availability ? b.api->availability() : "";
  const int n = b.api->device_count();
  for (int i = 0; i < n; ++i) {
    kiln_device_info ci{};
    if (b.api->device_info(i, &ci) != KILN_OK) continue;
    auto d = std::make_shared<device_impl>();
    d->owner = &b;
    d->api = b.api;
    d->index = i;
    d->id = b.name + ":" + std::to_string(i);
    device_info& di = d->info;
    di.name = ci.name;
    di.backend = b.name;
    di.arch = ci.arch;
    di.vendor = ci.vendor;
    di.driver_version = ci.driver_version;
    di.type = ci.type == KILN_DEVICE_GPU   ? device_type::gpu
              : ci.type == KILN_DEVICE_CPU ? device_type::cpu
                                           : device_type::accelerator;
    di.global_mem_bytes = ci.global_mem_bytes;
    di.max_alloc_bytes = ci.max_alloc_bytes;
    di.local_mem_bytes = ci.local_mem_bytes;
    di.compute_units = ci.compute_units;
    di.simd_width = ci.simd_width;
    di.max_work_group_size = ci.max_work_group_size;
    di.clock_mhz = ci.clock_mhz;
    for (int k = 0; k < 3; ++k) {
      di.max_work_item_sizes[k] = ci.max_work_item_sizes[k];
      di.max_groups[k] = ci.max_groups[k];
    }
    di.compute_major = ci.compute_major;
    di.compute_minor = ci.compute_minor;
    di.features = ci.features;
    b.devices.push_back(std::move(d));
  }
}

std::unique_ptr<backend> load_plugin(const std::string& path, const std::string& name) {
  auto b = std::make_unique<backend>();
  b->path = path;
  b->name = name;
  b->library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!b->library) {
    const char* e = dlerror();
    b->detail = std::string("cannot load plugin: ") + (e ? e : path);
    return b;
  }
  auto entry =
      reinterpret_cast<kiln_backend_entry_fn>(dlsym(b->library, KILN_BACKEND_ENTRY_SYMBOL));
  if (!entry) {
    b->detail = "plugin " + path + " does not export " + KILN_BACKEND_ENTRY_SYMBOL;
    return b;
  }
  b->api = entry(KILN_BACKEND_ABI_VERSION);
  if (!b->api) {
    b->detail = "plugin " + path + " refused backend ABI version " +
                std::to_string(KILN_BACKEND_ABI_VERSION) + ": it was built for another version";
    return b;
  }
  init_backend(*b);
  return b;
}

}  // namespace

registry& registry::get() {
  static registry* r = new registry();  // never destroyed: see runtime.hpp
  return *r;
}

registry::registry() {
  auto cpu = std::make_unique<backend>();
  cpu->name = "cpu";
  cpu->api = kiln_cpu_backend_entry(KILN_BACKEND_ABI_VERSION);
  init_backend(*cpu);
  backends.push_back(std::move(cpu));

  std::set<std::string> seen = {"cpu"};
  const auto dirs = plugin_dirs();
  for (const std::string& dir : dirs) {
    std::error_code ec;
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string f = e.path().filename().string();
      if (f.starts_with(plugin_prefix) && f.ends_with(".so")) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (const std::string& f : files) {
      const std::string name =
          std::filesystem::path(f).stem().string().substr(std::string(plugin_prefix).size());
      if (!seen.insert(name).second) continue;  // earlier directories win
      backends.push_back(load_plugin(f, name));
    }
  }
  for (const char* name : known_plugins) {
    if (seen.count(name)) continue;
    auto b = std::make_unique<backend>();
    b->name = name;
    std::string where;
    for (const auto& d : dirs) where += (where.empty() ? "" : ", ") + d;
    b->detail = std::string("plugin ") + plugin_prefix + name +
                ".so not found (searched: " + (where.empty() ? "nothing" : where) +
                "; set KILN_PLUGIN_PATH)";
    backends.push_back(std::move(b));
  }
}

const backend* registry::find(std::string_view name) const {
  for (const auto& b : backends)
    if (b->name == name) return b.get();
  return nullptr;
}

}  // namespace kiln::detail

namespace kiln {

std::vector<backend_status> backends() {
  std::vector<backend_status> out;
  for (const auto& b : detail::registry::get().backends)
    out.push_back({b->name, b->loaded, b->detail, b->path, static_cast<int>(b->devices.size())});
  return out;
}

}  // namespace kiln
