// program::compile: in-memory cache -> parse and render -> disk cache -> backend compiler.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "codegen/render_source.hpp"
#include "codegen/target.hpp"
#include "runtime/cache_key.hpp"
#include "runtime/compiler_threads.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/log.hpp"
#include "runtime/nvtx.hpp"
#include "runtime/program_cache.hpp"
#include "runtime/runtime.hpp"

namespace kiln {
namespace detail {
namespace {

// Appended to the options of a checked program's cache keys (never passed to a compiler).
constexpr std::string_view checked_key_suffix = "\n#kiln-check=bounds";

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

// "a, b" for the log.
std::string kernel_list(const kernel_lang::parsed_source& p) {
  std::string names;
  for (const auto& k : p.kernels) names += (names.empty() ? "" : ", ") + k.name;
  return names;
}

double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Compiles rendered source with the backend; the blob's bytes are returned in `out`.
std::vector<std::byte> backend_compile(const kiln_backend& api, kiln_device_h dev,
                                       const std::string& arch, const std::string& rendered,
                                       std::string_view user_source, const std::string& options,
                                       const std::string& where) {
  // On a compiler thread where the plugin allows it (compiler_threads.hpp), with everything that
  // reads the plugin's per-thread log and error text.
  const auto build = [&] {
    kiln_blob blob{};
    const char* log = nullptr;
    kiln_status s = api.compile(dev, arch.c_str(), rendered.c_str(), options.c_str(), &blob, &log);
    if (s == KILN_ERR_COMPILE) throw_compile_error(where, user_source, log ? log : "");
    check(api, s, ("compiling a kernel for " + where).c_str());
    std::vector<std::byte> out(static_cast<const std::byte*>(blob.data),
                               static_cast<const std::byte*>(blob.data) + blob.size);
    api.free_blob(blob);
    return out;
  };
  std::vector<std::byte> bytes =
      api.flags & KILN_BACKEND_COMPILE_ANY_THREAD ? on_compiler_thread(build) : build();
  stats().compiles++;
  return bytes;
}

}  // namespace

check_mode parse_check_env(const char* value) {
  const std::string_view v = value ? value : "";
  if (v.empty()) return check_mode::automatic;
  if (v == "bounds") return check_mode::bounds;
  if (v == "off") return check_mode::off;
  throw invalid_argument("KILN_CHECK='" + std::string(v) +
                         "' is not a checking mode: use 'bounds' (check every buffer index of "
                         "every kernel) or 'off' (docs/kernel_language.md)");
}

bool resolve_checked(check_mode m) {
  if (m != check_mode::automatic) return m == check_mode::bounds;
  // Read once; a bad value is refused at every compile that would follow it.
  static const std::string env = [] {
    const char* v = std::getenv("KILN_CHECK");
    return std::string(v ? v : "");
  }();
  const check_mode from_env = parse_check_env(env.c_str());
  if (from_env != check_mode::automatic) return from_env == check_mode::bounds;
#ifdef NDEBUG
  return false;
#else
  return true;  // a Debug build of Kiln checks by default
#endif
}

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
  if (handle && !dev->stale(gen)) dev->api->program_unload(handle);
}

}  // namespace detail

namespace detail {
namespace {

// Appended to the options of native programs' cache keys (never passed to a compiler).
constexpr std::string_view native_key_suffix = "\n#kiln-native";

// The disk cache, the backend compiler and the driver for a program whose dialect text is
// `rendered`; the program joins the device's memory cache under (source, key_options).
program build_and_load(const device& dev, std::uint32_t gen, std::shared_ptr<program_impl> p,
                       std::string_view source, std::string_view key_options,
                       const std::string& rendered, std::string_view options,
                       std::chrono::steady_clock::time_point t0) {
  device_impl& d = *dev.impl();
  const kiln_backend& api = *d.api;
  const std::string opts(options);
  const disk_cache* disk = the_disk_cache();
  // The device's identity joins the compiler's: OpenCL binaries belong to one platform,
  // device and driver version (the plugin's compiler id names every platform's version).
  const cache_key key = make_cache_key(
      d.info.backend, d.info.arch,
      d.compiler_id() + '|' + d.info.vendor + '|' + d.info.name + '|' + d.info.driver_version,
      std::string(key_options), rendered);
  std::optional<std::vector<std::byte>> bytes;
  if (disk) bytes = disk->load(key);
  bool from_disk = bytes.has_value();
  if (const kiln_status f = maybe_fault(d, testing::fault::compile); f != KILN_OK)
    throw_injected(d, testing::fault::compile, f, "compiling a kernel for " + d.id);
  if (!bytes) bytes = backend_compile(api, d.handle(), d.info.arch, rendered, source, opts, d.id);
  d.refuse_if_ring_running(KILN_OP_LOAD_WHILE_RESIDENT, "loading a new program");
  kiln_status s = api.program_load(d.handle(), bytes->data(), bytes->size(), &p->handle);
  if (s != KILN_OK && from_disk) {
    // A valid-looking entry the driver refuses (e.g. a driver update): rebuild it.
    stats().disk_rejects++;
    from_disk = false;
    bytes = backend_compile(api, d.handle(), d.info.arch, rendered, source, opts, d.id);
    s = api.program_load(d.handle(), bytes->data(), bytes->size(), &p->handle);
  }
  check(api, s, "loading a compiled program");
  if (from_disk)
    stats().disk_hits++;
  else if (disk)
    disk->store(key, *bytes);
  if (log_enabled(from_disk ? log_level::debug : log_level::info))
    logf(from_disk ? log_level::debug : log_level::info, "{} on {} in {:.1f} ms: {}",
         from_disk ? "program cache hit (disk)" : "compiled program", d.id, ms_since(t0),
         kernel_list(p->parsed));
  // Another thread may have compiled the same source meanwhile: both use the cached program.
  return program(d.programs().insert(source, key_options, gen, std::move(p)));
}

std::optional<program> memory_hit(device_impl& d, std::string_view source,
                                  std::string_view key_options, std::uint32_t gen) {
  auto hit = d.programs().find(source, key_options, gen);
  if (!hit) return std::nullopt;
  stats().memory_hits++;
  if (log_enabled(log_level::debug))
    logf(log_level::debug, "program cache hit (memory) on {}: {}", d.id, kernel_list(hit->parsed));
  return program(std::move(hit));
}

std::shared_ptr<program_impl> new_program(const device& dev, std::uint32_t gen,
                                          std::string_view source, bool checked) {
  auto p = std::make_shared<program_impl>();
  p->dev = dev.impl();
  p->public_device = dev;
  p->gen = gen;
  p->parsed = kernel_lang::parse(source);
  p->checked = checked;
  return p;
}

}  // namespace

program compile_native(const device& dev, std::string_view source, std::string_view options) {
  device_impl& d = *dev.impl();
  const std::uint32_t gen = d.generation.load(std::memory_order_acquire);
  d.check_alive(gen, "compiling a program");
  const std::string key_options = std::string(options).append(native_key_suffix);
  if (auto hit = memory_hit(d, source, key_options, gen)) return std::move(*hit);
  KILN_TRACE_RANGE("compile");
  const auto t0 = std::chrono::steady_clock::now();
  auto p = new_program(dev, gen, source, false);
  return build_and_load(dev, gen, std::move(p), source, key_options, std::string(source), options,
                        t0);
}

}  // namespace detail

program program::compile(const device& dev, std::string_view source, std::string_view options,
                         check_mode checks) {
  detail::device_impl& d = *dev.impl();
  const std::uint32_t gen = d.generation.load(std::memory_order_acquire);
  d.check_alive(gen, "compiling a program");
  const bool checked = detail::resolve_checked(checks);
  // Checked and unchecked programs of one source never share a cache entry, in memory or on
  // disk: the mode joins the options of both keys.
  std::string checked_options;
  if (checked) checked_options.append(options).append(detail::checked_key_suffix);
  const std::string_view key_options = checked ? std::string_view(checked_options) : options;
  if (auto hit = detail::memory_hit(d, source, key_options, gen)) return std::move(*hit);
  KILN_TRACE_RANGE("compile");
  const auto t0 = std::chrono::steady_clock::now();
  auto p = detail::new_program(dev, gen, source, checked);
  detail::check_features(p->parsed, d.info, d.id);
  const std::string rendered = codegen::render(source, p->parsed, d.api->dialect, checked);
  return detail::build_and_load(dev, gen, std::move(p), source, key_options, rendered, options, t0);
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
  impl_->dev->check_alive(impl_->gen, "getting a kernel");
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
  k->checked = impl_->checked;
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
bool program::checked() const { return live(impl_, "program::checked").checked; }

namespace detail {
namespace {
// Compiles dialect text `rendered` (of `source`) for `arch` of a loaded backend, without a device.
void compile_for_arch(std::string_view backend_name, std::string_view arch,
                      const std::string& rendered, std::string_view source,
                      std::string_view options) {
  const backend* b = registry::get().find(backend_name);
  if (!b || !b->loaded)
    throw unsupported("backend '" + std::string(backend_name) + "' is not available" +
                      (b ? ": " + b->detail : std::string()));
  backend_compile(*b->api, nullptr, std::string(arch), rendered, source, std::string(options),
                  b->name + " (" + std::string(arch) + ")");
}
}  // namespace

void compile_native_only(std::string_view backend_name, std::string_view arch,
                         std::string_view source, std::string_view options) {
  compile_for_arch(backend_name, arch, std::string(source), source, options);
}
}  // namespace detail

void compile_only(std::string_view backend_name, std::string_view arch, std::string_view source,
                  std::string_view options, check_mode checks) {
  const bool checked = detail::resolve_checked(checks);
  const detail::backend* b = detail::registry::get().find(backend_name);
  if (!b || !b->loaded)
    throw unsupported("backend '" + std::string(backend_name) + "' is not available" +
                      (b ? ": " + b->detail : std::string()));
  auto parsed = kernel_lang::parse(source);
  detail::compile_for_arch(backend_name, arch,
                           codegen::render(source, parsed, b->api->dialect, checked), source,
                           options);
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
