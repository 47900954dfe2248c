#include <algorithm>
#include <cstdlib>

#include "runtime/program_cache.hpp"
#include "runtime/resilience_log.hpp"
#include "runtime/runtime.hpp"

namespace kiln {
namespace detail {

kiln_device_h device_impl::handle() {
  std::call_once(open_once_, [&] {
    check(*api, api->device_open(index, &handle_), "opening device");
    opened_.store(true, std::memory_order_release);
  });
  return handle_;
}

queue& device_impl::default_queue() {
  std::lock_guard lock(queue_mu_);
  const std::uint32_t gen = generation.load(std::memory_order_acquire);
  if (!default_queue_ || default_queue_gen_ != gen) {
    if (default_queue_) retired_queues_.push_back(std::move(default_queue_));
    default_queue_ = std::make_unique<queue>(make_queue());
    default_queue_gen_ = gen;
  }
  return *default_queue_;
}

std::shared_ptr<queue_impl> device_impl::make_queue() {
  auto self = shared_from_this();
  auto q = std::make_shared<queue_impl>();
  q->dev = self;
  q->public_device = kiln::device(self);
  q->gen = generation.load(std::memory_order_acquire);
  check_alive(q->gen, "creating a queue");
  check(*api, api->queue_create(handle(), &q->handle), "creating a queue");
  std::lock_guard lock(mu);
  std::erase_if(queues, [](const std::weak_ptr<queue_impl>& w) { return w.expired(); });
  queues.push_back(q);
  return q;
}

void device_impl::synchronize() {
  std::vector<std::shared_ptr<queue_impl>> live;
  {
    std::lock_guard lock(mu);
    for (auto& w : queues)
      if (auto q = w.lock(); q && !q->resident) live.push_back(std::move(q));
  }
  for (auto& q : live) {
    check_alive(q->gen, "synchronizing a queue");
    check(*api, api->queue_finish(q->handle), "synchronizing a queue");
  }
}

bool device_impl::ring_blocks(const char* op) {
  std::vector<std::shared_ptr<queue_impl>> resident;
  {
    std::lock_guard lock(mu);
    for (auto& w : queues)
      if (auto q = w.lock(); q && q->resident && !stale(q->gen)) resident.push_back(std::move(q));
  }
  if (resident.empty() || supports_op(op)) return false;
  for (auto& q : resident) {
    try {
      if (!kiln::queue(q).record().done()) return true;  // the ring's grid is still running
    } catch (const error&) {
    }
  }
  return false;
}

void device_impl::refuse_if_ring_running(const char* op, const char* what) {
  if (ring_blocks(op))
    throw unsupported(std::string(what) + " on " + id +
                      " would wait until the resident ring kernel ends (the driver serialises "
                      "it behind the running grid); do it before starting the ring, or stop "
                      "the ring first (docs/ring.md)");
}

void device_impl::refresh_lost() noexcept {
  if (!opened_.load(std::memory_order_acquire) || !KILN_BACKEND_HAS(api, device_status)) return;
  if (api->device_status(handle_) == KILN_ERR_DEVICE_LOST && !lost.exchange(true))
    log_device_lost(*this, api->last_error());
}

void device_impl::throw_lost(std::uint32_t gen, const char* what) const {
  if (gen != generation.load())
    throw device_lost(std::string(what) + ": the object was made on " + id +
                      " before kiln::device::reset(); its driver objects are gone");
  std::string failure;
  {
    std::lock_guard failure_lock(failure_mu);
    failure = reset_failure;
  }
  if (!failure.empty())
    throw device_lost(std::string(what) + ": " + id +
                      " is lost and a reset could not bring it back: " + failure);
  throw device_lost(std::string(what) + ": " + id +
                    " is lost (a kernel failed with a sticky error); call kiln::device::reset()");
}

namespace {
device_hooks& reset_hooks() {
  static auto* hooks = new device_hooks;
  return *hooks;
}
}  // namespace

void on_device_reset(void (*hook)(const device_impl*)) { reset_hooks().add(hook); }

void device_impl::reset() {
  if (!KILN_BACKEND_HAS(api, device_reset))
    throw unsupported("kiln::device::reset: the " + info.backend + " plugin cannot reset " + id);
  kiln_status st;
  {
    std::lock_guard lock(queue_mu_);
    st = api->device_reset(handle());
    // A reset that failed with DEVICE_LOST may still have destroyed the driver objects (CUDA
    // destroys the context, then cannot make it again while the driver keeps a sticky error):
    // the old generation retires either way, and the device stays lost.
    if (st != KILN_OK && st != KILN_ERR_DEVICE_LOST) check(*api, st, ("resetting " + id).c_str());
    {
      std::lock_guard failure_lock(failure_mu);
      reset_failure = st != KILN_OK ? api->last_error() : "";
    }
    const bool destroyed = !supports_op(KILN_OP_RESET_KEEPS_OBJECTS);
    reset_destroys.store(destroyed);
    // Objects of the old generation stop reaching the plugin from here on (where the reset
    // destroyed them; else they still free what they hold).
    generation.fetch_add(1, std::memory_order_acq_rel);
    lost.store(st != KILN_OK, std::memory_order_release);
    if (destroyed) {
      bytes_in_use.store(0);
      peak_bytes.store(0);
    }
  }
  {
    std::lock_guard lock(mu);
    queues.clear();
  }
  if (programs_) programs_->clear();
  reset_hooks().run(this);
  if (st != KILN_OK) {
    std::string why;
    {
      std::lock_guard failure_lock(failure_mu);
      why = reset_failure;
    }
    log_device_lost(*this, why);
    throw device_lost("kiln::device::reset: " + id + " could not be brought back: " + why);
  }
  log_device_reset(*this);
}

const std::string& device_impl::compiler_id() {
  std::call_once(compiler_once_, [&] {
    char buf[512] = {};
    check(*api, api->compiler_id(buf, sizeof buf), "querying the kernel compiler");
    compiler_id_ = buf;
  });
  return compiler_id_;
}

program_cache& device_impl::programs() {
  std::call_once(cache_once_, [&] { programs_ = std::make_unique<program_cache>(); });
  return *programs_;
}

const void* device_impl::extension(const char* name, std::uint32_t version) const {
  if (!KILN_BACKEND_HAS(api, get_extension)) return nullptr;
  const auto* h = static_cast<const kiln_extension_header*>(api->get_extension(name, version));
  // A table of another version would be read with the wrong layout: treat it as absent.
  if (!h || h->version != version || h->struct_size < sizeof *h) return nullptr;
  return h;
}

bool device_impl::supports_op(const char* op, kiln_dtype dtype) const {
  return KILN_BACKEND_HAS(api, supports_op) && api->supports_op(index, op, dtype) != 0;
}

}  // namespace detail

namespace {

// Higher is better: GPUs before CPUs; then a native backend over a portable layer for the
// same kind of device (CUDA over OpenCL for NVIDIA GPUs, Kiln's own CPU backend over PoCL), as
// the plugins report it; then size.
double score(const device& d) {
  const device_info& i = d.info();
  double s = i.type == device_type::gpu ? 1e12 : i.type == device_type::accelerator ? 1e11 : 0;
  if (!d.impl()->portable()) s += 1e10;
  return s + double(i.compute_units) * std::max(1u, i.clock_mhz) * std::max(1u, i.simd_width);
}

std::string known_devices() {
  std::string s;
  for (const device& d : device::all()) s += (s.empty() ? "" : ", ") + d.id();
  for (const backend_status& b : backends())
    if (!b.loaded || b.device_count == 0)
      s += "; " + b.name + ": " + (b.detail.empty() ? "no devices" : b.detail);
  return s;
}

}  // namespace

std::vector<device> device::all() {
  std::vector<device> out;
  for (const auto& b : detail::registry::get().backends)
    for (const auto& d : b->devices) out.emplace_back(d);
  return out;
}

device device::best() {
  if (const char* spec = std::getenv("KILN_DEVICE"); spec && *spec) return get(spec);
  auto all_devices = all();
  if (all_devices.empty()) throw not_found("no device available: " + known_devices());
  return *std::max_element(all_devices.begin(), all_devices.end(),
                           [](const device& a, const device& b) { return score(a) < score(b); });
}

device device::get(std::string_view spec) {
  std::string_view name = spec;
  int index = 0;
  if (auto colon = spec.find(':'); colon != std::string_view::npos) {
    name = spec.substr(0, colon);
    std::string_view num = spec.substr(colon + 1);
    if (num.empty() || num.size() > 6 || !std::all_of(num.begin(), num.end(), ::isdigit))
      throw invalid_argument("device '" + std::string(spec) +
                             "': expected <backend> or <backend>:<index>, e.g. cuda:0");
    index = std::atoi(std::string(num).c_str());
  }
  const detail::backend* b = detail::registry::get().find(name);
  if (!b || index >= static_cast<int>(b->devices.size()))
    throw not_found("no device '" + std::string(spec) + "'; available: " + known_devices());
  return device(b->devices[static_cast<std::size_t>(index)]);
}

device device::host() {
  auto d = detail::registry::get().host_device();
  if (!d) throw not_found("no host device: Kiln was built without its CPU backend");
  return device(std::move(d));
}

namespace {
// A moved-from or null device handle is refused with a clear error, never dereferenced.
detail::device_impl& live(const std::shared_ptr<detail::device_impl>& d, const char* what) {
  if (!d) detail::throw_empty_handle(what, "device");
  return *d;
}
}  // namespace

const device_info& device::info() const { return live(impl_, "device::info").info; }
std::string device::id() const { return live(impl_, "device::id").id; }
const std::string& device::backend() const { return live(impl_, "device::backend").info.backend; }
int device::index() const { return live(impl_, "device::index").index; }
bool device::supports(feature f) const {
  return (live(impl_, "device::supports").info.features & static_cast<std::uint32_t>(f)) != 0;
}
queue& device::default_queue() const {
  return live(impl_, "device::default_queue").default_queue();
}
void device::synchronize() const { live(impl_, "device::synchronize").synchronize(); }

device::memory_usage_t device::memory_usage() const {
  detail::device_impl& d = live(impl_, "device::memory_usage");
  return {d.bytes_in_use.load(), d.peak_bytes.load()};
}

void device::reset_peak_memory() const {
  detail::device_impl& d = live(impl_, "device::reset_peak_memory");
  d.peak_bytes = d.bytes_in_use.load();
}

bool device::lost() const {
  detail::device_impl& d = live(impl_, "device::lost");
  d.refresh_lost();
  return d.lost.load();
}

void device::reset() const { live(impl_, "device::reset").reset(); }

memory_statistics memory_stats(const device& dev) {
  return detail::query_memory_stats(live(dev.impl(), "kiln::memory_stats"));
}

}  // namespace kiln
