// kiln::automatic for tensors: the placement rule, the thresholds (override, environment,
// calibrated, built-in), the moves of automatic tensors' storage between devices, and the
// automatic creation functions. docs/placement.md has the design.
#include "tensor/placement.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <unordered_set>

#include "query/host_input.hpp"
#include "runtime/runtime.hpp"

namespace kiln {
namespace detail {
namespace {

constexpr const char* class_names[] = {"elementwise", "reduction", "gemm", "conv"};
constexpr const char* env_names[] = {"KILN_PLACE_ELEMENTWISE", "KILN_PLACE_REDUCTION",
                                     "KILN_PLACE_GEMM", "KILN_PLACE_CONV"};

// Built-in thresholds, used until `kiln calibrate` has measured the GPU. docs/placement.md
// ("Defaults") has the measurements behind them.
// In short (H200 over PCIe, 16-core host with OpenBLAS): one pass over host data is done by
// the CPU before the copy to the GPU is (elementwise, reduction: never); products win on the
// GPU from n = 181 to 256 (gemm), convolutions almost at once (cuDNN against im2col + GEMM).
constexpr std::array<std::uint64_t, op_class_count> defaults = {
    placement_never,  // elementwise: output elements
    placement_never,  // reduction: elements folded
    20'000'000,       // gemm: flops (2 n^3 at n = 215; measured 1.2e7 and 3.4e7)
    1'000'000};       // conv: flops (measured 5.9e5 and 1.3e6)

std::mutex overrides_mu;
std::array<std::optional<std::uint64_t>, op_class_count> overrides;

// Calibrated values per (file, device), read once; store_threshold drops the cache.
std::mutex calibrated_mu;
std::map<std::pair<std::string, const device_impl*>,
         std::array<std::optional<std::uint64_t>, op_class_count>>
    calibrated;

thread_local const device* t_pin = nullptr;  // the innermost live `placed`'s device
thread_local placement_info t_last;

std::optional<std::uint64_t> from_environment(op_class c) {
  const char* name = env_names[class_index(c)];
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  const std::string s(v);
  if (s == "never") return placement_never;
  char* end = nullptr;
  const double d = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(d >= 0))
    throw invalid_argument(std::string(name) + "='" + s +
                           "' is not a threshold (a number of at least 0, such as 1e6, or "
                           "\"never\")");
  return d >= 1.8e19 ? placement_never : static_cast<std::uint64_t>(d);
}

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

std::string threshold_text(std::uint64_t t) {
  return t == placement_never ? "never" : fmt(static_cast<double>(t));
}

std::int64_t numel(const shape_t& s) { return numel_of(s); }

// The bytes [lo, hi) of its storage a stored tensor reads (no strides are negative here).
std::pair<std::uint64_t, std::uint64_t> span_of(const tensor_impl& x) {
  const std::uint64_t size = size_of(x.dtype);
  const auto lo = static_cast<std::uint64_t>(x.offset) * size;
  if (numel(x.shape) == 0) return {lo, lo};
  std::int64_t last = 0;
  for (std::size_t d = 0; d < x.shape.size(); ++d) {
    if (x.strides[d] < 0) return {0, x.mem->bytes};
    last += (x.shape[d] - 1) * x.strides[d];
  }
  return {lo, lo + (static_cast<std::uint64_t>(last) + 1) * size};
}

// Stored tensors grouped by the storage they view: each storage moves once.
struct storage_group {
  memory_impl* mem;
  device dev;
  std::uint64_t lo, hi;
  std::vector<tensor_impl*> members;
};

std::vector<storage_group> group_by_storage(const std::vector<tensor_impl*>& ts) {
  std::vector<storage_group> out;
  for (tensor_impl* t : ts) {
    if (t->kind != tensor_kind::stored || !t->mem) continue;
    const auto [lo, hi] = span_of(*t);
    auto g = std::find_if(out.begin(), out.end(),
                          [&](const storage_group& x) { return x.mem == t->mem.get(); });
    if (g == out.end()) {
      out.push_back({t->mem.get(), t->dev, lo, hi, {t}});
    } else {
      if (std::find(g->members.begin(), g->members.end(), t) != g->members.end()) continue;
      g->lo = std::min(g->lo, lo);
      g->hi = std::max(g->hi, hi);
      g->members.push_back(t);
    }
  }
  return out;
}

std::uint64_t bytes_of(const storage_group& g) { return g.hi - g.lo; }

// A host pointer to memory m at off, when m is the built-in host backend's (its memory is
// host memory); else null.
void* host_address(memory_impl& m, std::uint64_t off) {
  if (!m.handle || m.dev != registry::get().host_device()) return nullptr;
  void* p = nullptr;
  if (m.dev->api->mem_address(m.dev->handle(), kiln_mem_ref{m.handle, off}, &p) != KILN_OK)
    return nullptr;
  return p;
}

// Copies len bytes of src (on from) at src_off to the start of dst (on to), synchronously.
void copy_across(memory_impl& src, const device& from, std::uint64_t src_off, memory_impl& dst,
                 const device& to, std::uint64_t len) {
  if (!len) return;
  finish_users(src);  // kernels still writing it
  if (void* p = host_address(src, src_off)) {
    queue& q = to.default_queue();
    copy_h2d(*q.impl(), dst, 0, p, len);
    q.finish();  // the source may be freed once we return
    return;
  }
  if (void* p = host_address(dst, 0)) {
    queue& q = from.default_queue();
    copy_d2h(*q.impl(), p, src, src_off, len);
    q.finish();
    return;
  }
  std::vector<unsigned char> bounce(len);  // neither side is host memory: through the host
  queue& qf = from.default_queue();
  copy_d2h(*qf.impl(), bounce.data(), src, src_off, len);
  qf.finish();
  queue& qt = to.default_queue();
  copy_h2d(*qt.impl(), dst, 0, bounce.data(), len);
  qt.finish();
}

std::uint64_t move_groups(std::vector<storage_group>& groups, const device& to) {
  std::uint64_t moved = 0;
  for (storage_group& g : groups) {
    if (g.dev == to) continue;
    const std::uint64_t lo = g.lo & ~std::uint64_t(7);  // aligned for every dtype
    const std::uint64_t len = g.hi - lo;
    auto dst = allocate(to, std::max<std::uint64_t>(len, 1));
    copy_across(*g.mem, g.dev, lo, *dst, to, len);
    for (tensor_impl* t : g.members) {
      const std::uint64_t size = size_of(t->dtype);
      t->offset =
          static_cast<std::int64_t>((static_cast<std::uint64_t>(t->offset) * size - lo) / size);
      t->mem = dst;
      t->dev = to;
    }
    moved += len;
  }
  return moved;
}

struct decision {
  device dev;
  std::uint64_t threshold;
  std::string reason;
};

// The rule (docs/placement.md): the GPU when at least half of the input bytes are already on
// it; else when work >= threshold x (share of the input bytes not on it); else the host CPU.
decision decide(op_class c, double work, const std::vector<storage_group>& groups) {
  const device& gpu = automatic_gpu();
  if (!gpu.impl()) return {device::host(), 0, "no GPU device: the host CPU"};
  const std::uint64_t t = resolve_threshold(c, gpu).work;
  std::uint64_t total = 0, away = 0;
  for (const storage_group& g : groups) {
    total += bytes_of(g);
    if (!(g.dev == gpu)) away += bytes_of(g);
  }
  const double share = total ? static_cast<double>(away) / static_cast<double>(total) : 1.0;
  const std::string head = std::string(to_string(c)) + " work " + fmt(work) + ", " +
                           fmt(share * 100) + "% of input bytes off " + gpu.id();
  if (total && 2 * away <= total) return {gpu, t, head + ": at least half are on it: " + gpu.id()};
  const bool on_gpu = t != placement_never && (t == 0 || work >= static_cast<double>(t) * share);
  return {on_gpu ? gpu : device::host(), t,
          head + (on_gpu ? ": work >= " : ": work < ") + "threshold " + threshold_text(t) +
              " x that share: " + (on_gpu ? gpu.id() : device::host().id())};
}

void record(op_class c, const device& dev, double work, std::uint64_t threshold,
            const std::vector<storage_group>& groups, std::uint64_t moved, std::string reason) {
  std::uint64_t total = 0;
  for (const storage_group& g : groups) total += bytes_of(g);
  t_last = {c, dev, work, threshold, total, moved, std::move(reason)};
}

std::uint64_t gpu_threshold_or_zero(op_class c) {
  const device& gpu = automatic_gpu();
  return gpu.impl() ? resolve_threshold(c, gpu).work : 0;
}

}  // namespace

int class_index(op_class c) {
  const auto i = static_cast<int>(c);
  if (i < 0 || i >= op_class_count)
    throw invalid_argument("kiln: op_class value " + std::to_string(i) +
                           " is not elementwise, reduction, gemm or conv");
  return i;
}

const char* source_name(threshold_source s) {
  constexpr const char* names[] = {"override", "environment", "calibrated", "default"};
  return names[static_cast<int>(s)];
}

std::uint64_t default_threshold(op_class c) {
  return defaults[static_cast<std::size_t>(class_index(c))];
}

std::optional<std::uint64_t> calibrated_threshold(op_class c, const device& dev) {
  const auto i = static_cast<std::size_t>(class_index(c));
  const auto file = q::placement_file();
  if (file.empty() || !dev.impl()) return std::nullopt;
  std::lock_guard lock(calibrated_mu);
  const auto key = std::make_pair(file.string(), dev.impl().get());
  auto it = calibrated.find(key);
  if (it == calibrated.end()) {
    std::array<std::optional<std::uint64_t>, op_class_count> v;
    for (int k = 0; k < op_class_count; ++k)
      v[static_cast<std::size_t>(k)] = q::stored_placement(dev, class_names[k]);
    it = calibrated.emplace(key, v).first;
  }
  return it->second[i];
}

std::string store_threshold(op_class c, const device& dev, std::uint64_t work) {
  const std::string file = q::store_placement(dev, class_names[class_index(c)], work);
  std::lock_guard lock(calibrated_mu);
  calibrated.clear();
  return file;
}

threshold_value resolve_threshold(op_class c, const device& gpu) {
  const auto i = static_cast<std::size_t>(class_index(c));
  {
    std::lock_guard lock(overrides_mu);
    if (overrides[i]) return {*overrides[i], threshold_source::override};
  }
  if (auto e = from_environment(c)) return {*e, threshold_source::environment};
  if (auto s = calibrated_threshold(c, gpu)) return {*s, threshold_source::calibrated};
  return {defaults[i], threshold_source::builtin};
}

const device& automatic_gpu() {
  // The first GPU of a native backend (CUDA before NVIDIA's OpenCL platform), else the first.
  static const device gpu = [] {
    std::optional<device> first;
    for (const device& d : device::all()) {
      if (d.info().type != device_type::gpu) continue;
      if (!d.impl()->portable()) return d;
      if (!first) first = d;
    }
    return first.value_or(device{nullptr});
  }();
  return gpu;
}

placed::placed(device d, bool a) : dev(std::move(d)), automatic(a), outer_(t_pin) {
  if (dev.impl()) t_pin = &dev;  // no operands, no device: nothing to pin
}
placed::~placed() { t_pin = outer_; }

std::uint64_t move_storage(const std::vector<tensor_impl*>& ts, const device& to) {
  std::vector<tensor_impl*> xs;
  for (tensor_impl* t : ts)
    if (t) xs.push_back(t);
  auto groups = group_by_storage(xs);
  return move_groups(groups, to);
}

placed place(op_class c, std::initializer_list<tensor_impl*> operands, double work) {
  class_index(c);
  std::vector<tensor_impl*> xs;
  for (tensor_impl* t : operands)
    if (t && t->kind != tensor_kind::scalar && std::find(xs.begin(), xs.end(), t) == xs.end())
      xs.push_back(t);
  for (tensor_impl* t : xs) materialise(*t);  // lazy operands: placed as their own kernels
  const tensor_impl* fixed = nullptr;
  bool any_automatic = false;
  for (const tensor_impl* t : xs) {
    if (t->automatic) {
      any_automatic = true;
      continue;
    }
    if (!fixed)
      fixed = t;
    else if (!(t->dev == fixed->dev))
      throw device_mismatch(std::string("kiln: ") + to_string(c) +
                            " operands are on different devices: " + fixed->dev.id() + " and " +
                            t->dev.id());
  }
  if (!any_automatic) return placed(fixed ? fixed->dev : device{nullptr}, false);
  std::vector<tensor_impl*> autos;
  for (tensor_impl* t : xs)
    if (t->automatic) autos.push_back(t);
  const auto groups = group_by_storage(xs);
  auto moving = group_by_storage(autos);
  decision d = [&]() -> decision {
    if (t_pin)
      return {*t_pin, gpu_threshold_or_zero(c), "inside an operation placed on " + t_pin->id()};
    if (fixed)
      return {fixed->dev, gpu_threshold_or_zero(c),
              "pinned by an operand fixed on " + fixed->dev.id()};
    return decide(c, work, groups);
  }();
  const std::uint64_t moved = move_groups(moving, d.dev);
  record(c, d.dev, work, d.threshold, groups, moved, std::move(d.reason));
  return placed(d.dev, fixed == nullptr);
}

void place_expression(tensor_impl& root) {
  if (root.kind != tensor_kind::op) return;
  std::vector<tensor_impl*> nodes, leaves;
  std::unordered_set<const tensor_impl*> seen;
  std::vector<tensor_impl*> stack{&root};
  while (!stack.empty()) {
    tensor_impl* t = stack.back();
    stack.pop_back();
    if (!seen.insert(t).second) continue;
    if (t->kind == tensor_kind::stored) leaves.push_back(t);
    if (t->kind != tensor_kind::op) continue;
    nodes.push_back(t);
    for (auto& a : t->args) stack.push_back(a.get());
  }
  bool any = false;
  for (const tensor_impl* t : nodes) any |= t->automatic;
  for (const tensor_impl* t : leaves) any |= t->automatic;
  if (!any) return;
  op_class c = op_class::elementwise;
  double work = static_cast<double>(numel(root.shape));
  for (const tensor_impl* n : nodes)
    if (ir::info(n->o).cls == ir::op_class::reduce) {
      c = op_class::reduction;
      work = std::max(work, static_cast<double>(numel(n->args.at(0)->shape)));
    }
  // Fixed leaves pin the device (ops.cpp lets a fixed operand pin an automatic expression).
  const tensor_impl* fixed = nullptr;
  std::vector<tensor_impl*> autos;
  for (tensor_impl* t : leaves) {
    if (t->automatic) {
      autos.push_back(t);
    } else if (!fixed) {
      fixed = t;
    } else if (!(t->dev == fixed->dev)) {
      throw device_mismatch("kiln::tensor: operands are on different devices: " + fixed->dev.id() +
                            " and " + t->dev.id());
    }
  }
  auto groups = group_by_storage(leaves);
  // Inside an operation (a copy it makes): that operation recorded its own placement.
  const bool keep_record = t_pin == nullptr;
  decision d = [&]() -> decision {
    if (t_pin) return {*t_pin, 0, ""};
    if (fixed || !root.automatic) {
      const device& at = fixed ? fixed->dev : root.dev;
      return {at, gpu_threshold_or_zero(c), "pinned by an operand fixed on " + at.id()};
    }
    return decide(c, work, groups);
  }();
  if (fixed && !(fixed->dev == d.dev))
    throw device_mismatch("kiln::tensor: an operand fixed on " + fixed->dev.id() +
                          " meets an operation running on " + d.dev.id());
  auto moving = group_by_storage(autos);
  const std::uint64_t moved = move_groups(moving, d.dev);
  for (tensor_impl* n : nodes) n->dev = d.dev;
  if (keep_record) record(c, d.dev, work, d.threshold, groups, moved, std::move(d.reason));
}

tensor automatic_of(tensor x) {
  x.impl()->automatic = true;
  return x;
}

}  // namespace detail

const char* to_string(op_class c) { return detail::class_names[detail::class_index(c)]; }

void set_placement_threshold(op_class c, std::uint64_t work) {
  const auto i = static_cast<std::size_t>(detail::class_index(c));
  std::lock_guard lock(detail::overrides_mu);
  detail::overrides[i] = work;
}

void reset_placement_threshold(op_class c) {
  const auto i = static_cast<std::size_t>(detail::class_index(c));
  std::lock_guard lock(detail::overrides_mu);
  detail::overrides[i].reset();
}

void reset_placement_thresholds() {
  std::lock_guard lock(detail::overrides_mu);
  for (auto& o : detail::overrides) o.reset();
}

std::uint64_t placement_threshold(op_class c, const device& gpu) {
  return detail::resolve_threshold(c, gpu).work;
}

std::uint64_t placement_threshold(op_class c) {
  return detail::resolve_threshold(c, detail::automatic_gpu()).work;
}

placement_info last_placement() { return detail::t_last; }

// ---- automatic creation, and the flag ----
tensor tensor::empty(automatic_t, const shape_t& shape, scalar_type dtype) {
  return detail::automatic_of(empty(device::host(), shape, dtype));
}
tensor tensor::zeros(automatic_t, const shape_t& shape, scalar_type dtype) {
  return detail::automatic_of(zeros(device::host(), shape, dtype));
}
tensor tensor::ones(automatic_t, const shape_t& shape, scalar_type dtype) {
  return detail::automatic_of(ones(device::host(), shape, dtype));
}
tensor tensor::arange(automatic_t, double start, double end, double step, scalar_type dtype) {
  return detail::automatic_of(arange(device::host(), start, end, step, dtype));
}
tensor tensor::linspace(automatic_t, double start, double end, std::int64_t steps,
                        scalar_type dtype) {
  return detail::automatic_of(linspace(device::host(), start, end, steps, dtype));
}
tensor tensor::rand(automatic_t, const shape_t& shape, std::uint64_t seed, scalar_type dtype) {
  return detail::automatic_of(rand(device::host(), shape, seed, dtype));
}
tensor tensor::randn(automatic_t, const shape_t& shape, std::uint64_t seed, scalar_type dtype) {
  return detail::automatic_of(randn(device::host(), shape, seed, dtype));
}

bool tensor::is_automatic() const { return detail::impl_of(*this, "is_automatic").automatic; }

tensor tensor::to(automatic_t) const {
  detail::tensor_impl& x = detail::impl_of(*this, "to");
  if (x.automatic) return *this;
  if (x.kind != detail::tensor_kind::stored) {
    detail::reset_stats();
    detail::materialise(x);
  }
  auto v = detail::share_storage(x);
  v->automatic = true;
  return tensor(std::move(v));
}

tensor tensor::to(const device& dev) const {
  detail::tensor_impl& x = detail::impl_of(*this, "to");
  if (!dev.impl()) throw invalid_argument("kiln::tensor::to: an empty (null) device");
  if (x.kind != detail::tensor_kind::stored) {
    detail::reset_stats();
    detail::materialise(x);
  }
  if (x.dev == dev) return *this;
  auto v = detail::share_storage(x);
  detail::move_storage({v.get()}, dev);
  return tensor(std::move(v));
}

}  // namespace kiln
