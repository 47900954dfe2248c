// program::compile: in-memory cache -> parse and render -> disk cache -> backend compiler.
#include <atomic>
#include <cstdlib>
#include <optional>

#include "codegen/render_source.hpp"
#include "codegen/target.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/program_cache.hpp"
#include "runtime/runtime.hpp"

namespace kiln {
namespace detail {
namespace {

struct counters {
  std::atomic<std::uint64_t> memory_hits{0}, disk_hits{0}, compiles{0}, disk_rejects{0};
};
counters& stats() {
  static counters c;
  return c;
}

const disk_cache* the_disk_cache() {
  static const std::optional<disk_cache> cache = []() -> std::optional<disk_cache> {
    if (auto dir = disk_cache::configured_dir()) return disk_cache(*dir);
    return std::nullopt;
  }();
  return cache ? &*cache : nullptr;
}

[[noreturn]] void throw_compile_error(const std::string& where, std::string_view source,
                                      const std::string& log) {
  std::vector<int> lines = codegen::cited_lines(log);
  std::string ex = lines.empty() ? "" : kernel_lang::excerpt(source, lines);
  std::string msg = "kernel compilation failed for " + where;
  if (!ex.empty()) msg += "\n" + ex;
  msg += "compiler log:\n" + log;
  throw compile_error(msg, log, ex);
}

// Compiles rendered source with the backend; the blob's bytes are returned in `out`.
std::vector<std::byte> backend_compile(const kiln_backend& api, kiln_device_h dev,
                                       const std::string& arch, const std::string& rendered,
                                       std::string_view user_source, const std::string& options,
                                       const std::string& where) {
  kiln_blob blob{};
  const char* log = nullptr;
  kiln_status s = api.compile(dev, arch.c_str(), rendered.c_str(), options.c_str(), &blob, &log);
  if (s == KILN_ERR_COMPILE) throw_compile_error(where, user_source, log ? log : "");
  check(api, s, ("compiling a kernel for " + where).c_str());
  std::vector<std::byte> bytes(static_cast<const std::byte*>(blob.data),
                               static_cast<const std::byte*>(blob.data) + blob.size);
  api.free_blob(blob);
  stats().compiles++;
  return bytes;
}

}  // namespace

void check_features(const kernel_lang::parsed_source& p, const device_info& info,
                    const std::string& id) {
  auto refuse = [&](const char* what, int line) {
    throw unsupported("the kernel uses " + std::string(what) + " (line " + std::to_string(line) +
                      "), which the " + info.backend + " backend (" + id +
                      ") does not support; see docs/kernel_language.md");
  };
  if (!(info.features & KILN_FEATURE_BARRIER)) {
    if (p.uses_barrier) refuse("kiln_barrier()", p.barrier_line);
    if (p.uses_local_memory) refuse("KILN_LOCAL memory", p.local_line);
  }
  // Checked here, before the driver's compiler gives a less direct message (or, on some
  // OpenCL drivers, silently demotes double to float).
  if (!(info.features & KILN_FEATURE_DOUBLE) && p.uses_double) refuse("double", p.double_line);
}

program_impl::~program_impl() {
  kernels.clear();
  if (handle) dev->api->program_unload(handle);
}

}  // namespace detail

program program::compile(const device& dev, std::string_view source, std::string_view options) {
  detail::device_impl& d = *dev.impl();
  if (auto hit = d.programs().find(source, options)) {
    detail::stats().memory_hits++;
    return program(std::move(hit));
  }
  auto p = std::make_shared<detail::program_impl>();
  p->dev = dev.impl();
  p->public_device = dev;
  p->parsed = kernel_lang::parse(source);
  detail::check_features(p->parsed, d.info, d.id);
  const kiln_backend& api = *d.api;
  const std::string rendered = codegen::render(source, p->parsed, api.dialect);
  const std::string opts(options);

  const detail::disk_cache* disk = detail::the_disk_cache();
  // The device's identity joins the compiler's: OpenCL binaries belong to one platform,
  // device and driver version (the plugin's compiler id names every platform's version).
  const detail::cache_key key = detail::make_cache_key(
      d.info.backend, d.info.arch,
      d.compiler_id() + '|' + d.info.vendor + '|' + d.info.name + '|' + d.info.driver_version, opts,
      rendered);
  std::optional<std::vector<std::byte>> bytes;
  if (disk) bytes = disk->load(key);
  bool from_disk = bytes.has_value();
  if (!bytes)
    bytes = detail::backend_compile(api, d.handle(), d.info.arch, rendered, source, opts, d.id);
  kiln_status s = api.program_load(d.handle(), bytes->data(), bytes->size(), &p->handle);
  if (s != KILN_OK && from_disk) {
    // A valid-looking entry the driver refuses (e.g. a driver update): rebuild it.
    detail::stats().disk_rejects++;
    from_disk = false;
    bytes = detail::backend_compile(api, d.handle(), d.info.arch, rendered, source, opts, d.id);
    s = api.program_load(d.handle(), bytes->data(), bytes->size(), &p->handle);
  }
  detail::check(api, s, "loading a compiled program");
  if (from_disk)
    detail::stats().disk_hits++;
  else if (disk)
    disk->store(key, *bytes);
  d.programs().insert(source, options, p);
  return program(std::move(p));
}

namespace {
detail::program_impl& live(const std::shared_ptr<detail::program_impl>& p, const char* what) {
  if (!p) detail::throw_empty_handle(what, "program");
  return *p;
}
const detail::kernel_impl& live(const std::shared_ptr<detail::kernel_impl>& k, const char* what) {
  if (!k) detail::throw_empty_handle(what, "kernel");
  return *k;
}
}  // namespace

kernel program::get_kernel(std::string_view name) const {
  live(impl_, "program::get_kernel");
  std::lock_guard lock(impl_->mu);
  if (auto it = impl_->kernels.find(std::string(name)); it != impl_->kernels.end())
    if (auto k = it->second.lock()) return kernel(std::move(k));
  const kernel_lang::kernel_decl* decl = nullptr;
  std::string names;
  for (const auto& k : impl_->parsed.kernels) {
    if (k.name == name) decl = &k;
    names += (names.empty() ? "" : ", ") + k.name;
  }
  if (!decl)
    throw not_found("no kernel '" + std::string(name) + "' in the program; it defines: " + names);
  auto k = std::make_shared<detail::kernel_impl>();
  k->program = impl_;
  k->api = impl_->dev->api;
  k->dev = impl_->dev.get();
  k->name = decl->name;
  k->params = decl->params;
  k->uses_barrier = impl_->parsed.uses_barrier;
  detail::check(*k->api, k->api->kernel_get(impl_->handle, decl->name.c_str(), &k->handle),
                ("finding kernel '" + decl->name + "'").c_str());
  detail::check(*k->api, k->api->kernel_limits(k->handle, &k->max_size, &k->preferred_size),
                "querying kernel limits");
  impl_->kernels[k->name] = k;
  return kernel(std::move(k));
}

std::vector<std::string> program::kernel_names() const {
  std::vector<std::string> out;
  for (const auto& k : live(impl_, "program::kernel_names").parsed.kernels) out.push_back(k.name);
  return out;
}

const device& program::get_device() const {
  return live(impl_, "program::get_device").public_device;
}

void compile_only(std::string_view backend_name, std::string_view arch, std::string_view source,
                  std::string_view options) {
  const detail::backend* b = detail::registry::get().find(backend_name);
  if (!b || !b->loaded)
    throw unsupported("backend '" + std::string(backend_name) + "' is not available" +
                      (b ? ": " + b->detail : std::string()));
  auto parsed = kernel_lang::parse(source);
  const std::string rendered = codegen::render(source, parsed, b->api->dialect);
  detail::backend_compile(*b->api, nullptr, std::string(arch), rendered, source,
                          std::string(options), b->name + " (" + std::string(arch) + ")");
}

kernel_cache_stats cache_stats() {
  auto& c = detail::stats();
  return {c.memory_hits.load(), c.disk_hits.load(), c.compiles.load(), c.disk_rejects.load()};
}

const std::string& kernel::name() const { return live(impl_, "kernel::name").name; }
const std::vector<kernel_param>& kernel::params() const {
  return live(impl_, "kernel::params").params;
}
std::uint32_t kernel::max_work_group_size() const {
  return live(impl_, "kernel::max_work_group_size").max_size;
}
std::uint32_t kernel::preferred_work_group_size() const {
  return live(impl_, "kernel::preferred_work_group_size").preferred_size;
}

}  // namespace kiln
