// kernel::launch: argument checks against the declared parameters, work-group sizing, and the
// call into the backend. This is the hot path: no allocation, no formatting unless failing
// (checked mode aside: it allocates its error record and waits for the kernel).
#include <algorithm>
#include <cstdint>
#include <string>

#include "kernel_lang/checked_access.hpp"
#include "runtime/fault_injection.hpp"
#include "runtime/launch_count.hpp"
#include "runtime/nvtx.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail {
namespace {

constexpr std::size_t max_args = 64;
thread_local std::uint64_t t_launches = 0;
constexpr std::uint64_t gpu_default_group = 256;

[[noreturn]] void bad_arg(const kernel_impl& k, std::size_t i, const std::string& why) {
  const kernel_param& p = k.params[i];
  throw invalid_argument("kernel '" + k.name + "', argument " + std::to_string(i + 1) + " ('" +
                         p.name + "'): " + why);
}

std::string param_type(const kernel_param& p) {
  std::string t = type_name(p.type);
  return p.is_pointer ? std::string(p.is_const ? "const " : "") + t + "*" : t;
}

void check_args(const kernel_impl& k, const queue_impl& q, const arg_binding* args, std::size_t n) {
  if (n != k.params.size())
    throw invalid_argument("kernel '" + k.name + "' takes " + std::to_string(k.params.size()) +
                           " arguments, " + std::to_string(n) + " were given");
  for (std::size_t i = 0; i < n; ++i) {
    const kernel_param& p = k.params[i];
    const arg_binding& a = args[i];
    if (p.is_pointer != a.is_mem)
      bad_arg(k, i,
              std::string("expected ") + (p.is_pointer ? "a buffer of " : "a scalar ") +
                  param_type(p) + ", got a " + (a.is_mem ? "buffer" : "scalar") + " of " +
                  type_name(a.type));
    if (p.type != a.type)
      bad_arg(k, i,
              "expected " + param_type(p) + ", got " + (a.is_mem ? "a buffer of " : "") +
                  type_name(a.type));
    if (a.is_mem) {
      // A moved-from or default-constructed buffer: the kernel would dereference null (a
      // segfault on the CPU, an illegal address that poisons a CUDA context). A buffer of zero
      // elements is allowed: a kernel may be given one it does not read (GEMM with k = 0).
      if (!a.mem)
        bad_arg(k, i,
                "the buffer is empty and holds no memory (moved from, or default-constructed)");
      if (a.is_const && !p.is_const)
        bad_arg(k, i,
                "a view of const elements passed where the kernel writes (" + param_type(p) + ")");
      if (a.mem && a.mem->dev.get() != q.dev.get())
        bad_arg(k, i, "the buffer lives on " + a.mem->dev->id + ", the launch is on " + q.dev->id);
      if (a.mem && a.mem->handle) q.dev->check_alive(a.mem->gen, "launching a kernel");
    }
  }
}

// Default work-group shape from the kernel's preferred size (occupancy API on CUDA).
void default_local(const kernel_impl& k, const range& global, std::uint32_t local[3]) {
  const device_info& info = k.dev->info;
  std::uint64_t budget = k.preferred_size ? k.preferred_size : k.max_size ? k.max_size : 64;
  // On GPUs, cap at 256: the occupancy API favours 1024-item groups, but a memory-bound kernel
  // with one element per item measured 81% of copy bandwidth at 1024 and 91% at 256 on an H100
  // (docs/benchmarks.md). Same occupancy either way; a group's slot is freed only when its
  // slowest item finishes, so smaller groups refill the SM sooner.
  if (info.type == device_type::gpu) budget = std::min<std::uint64_t>(budget, gpu_default_group);
  local[0] = local[1] = local[2] = 1;
  if (global.dims == 1) {
    local[0] =
        static_cast<std::uint32_t>(std::min<std::uint64_t>(budget, info.max_work_item_sizes[0]));
    return;
  }
  // 2-D/3-D: a warp-wide row in x (coalescing), the rest in y, then z.
  const std::uint64_t x =
      std::min<std::uint64_t>({budget, 32u, std::uint64_t(info.max_work_item_sizes[0])});
  local[0] = static_cast<std::uint32_t>(x);
  budget /= x;
  const std::uint64_t y =
      std::min<std::uint64_t>({budget, global.dims == 3 ? std::uint64_t(4) : budget,
                               std::uint64_t(info.max_work_item_sizes[1])});
  local[1] = static_cast<std::uint32_t>(std::max<std::uint64_t>(1, y));
  if (global.dims == 3)
    local[2] = static_cast<std::uint32_t>(std::max<std::uint64_t>(
        1, std::min<std::uint64_t>(budget / local[1], info.max_work_item_sizes[2])));
}

std::string index_text(std::uint64_t i) {
  return i > std::uint64_t(INT64_MAX) ? std::to_string(static_cast<std::int64_t>(i))
                                      : std::to_string(i);
}

// Checked mode: reads the record the kernel left (kernel_lang/checked_access.hpp) once the
// launch has finished, and throws the first violation it holds.
void report_violation(const kernel_impl& k, queue_impl& q, memory_impl& record,
                      const arg_binding* args) {
  std::uint64_t r[kernel_lang::check_record_words] = {};
  copy_d2h(q, r, record, 0, sizeof r);
  check(*q.dev->api, q.dev->api->queue_finish(q.handle), "waiting for a checked kernel");
  if (r[0] == 0) return;
  const std::size_t i = r[1] < k.params.size() ? static_cast<std::size_t>(r[1]) : 0;
  throw out_of_bounds("kernel '" + k.name + "', argument " + std::to_string(i + 1) + " ('" +
                      k.params[i].name + "'): index " + index_text(r[2]) +
                      " is outside the buffer's " + std::to_string(args[i].count) +
                      " elements (line " + std::to_string(r[3]) +
                      " of the kernel source; checked mode)");
}

}  // namespace

std::uint64_t launches_on_this_thread() noexcept { return t_launches; }

void launch(const kernel_impl& k, queue_impl& q, const range& global, const range* local,
            arg_binding* args, std::size_t n) {
  const trace_range traced("launch", k.name);
  if (q.dev.get() != k.dev)
    throw invalid_argument("kernel '" + k.name + "' was compiled for " + k.dev->id +
                           ", the queue belongs to " + q.dev->id);
  q.dev->check_alive(q.gen, "launching a kernel");
  q.dev->check_alive(k.program->gen, "launching a kernel");
  check_args(k, q, args, n);
  // Checked mode's hidden arguments: one element count per buffer, then the error record.
  std::size_t buffers = 0;
  if (k.checked)
    for (std::size_t i = 0; i < n; ++i) buffers += args[i].is_mem;
  const std::size_t hidden = 1 + (k.checked ? buffers + 1 : 0);
  if (n + hidden > max_args)
    throw invalid_argument("kernel '" + k.name + "': more than " +
                           std::to_string(max_args - hidden) + " arguments");
  const device_info& info = k.dev->info;
  kiln_launch_dims dims{};
  dims.dims = global.dims;
  for (std::uint32_t d = 0; d < global.dims; ++d)
    if (global.size[d] == 0)
      throw invalid_argument("kernel '" + k.name + "': launch range dimension " +
                             std::to_string(d) + " is zero");
  if (local) {
    if (local->dims != global.dims)
      throw invalid_argument("kernel '" + k.name + "': local size has " +
                             std::to_string(local->dims) + " dimensions, the range " +
                             std::to_string(global.dims));
    std::uint64_t total = 1;
    for (std::uint32_t d = 0; d < 3; ++d) {
      const std::uint64_t l = local->size[d];
      if (l == 0 ||
          (d < local->dims && info.max_work_item_sizes[d] && l > info.max_work_item_sizes[d]))
        throw invalid_argument("kernel '" + k.name + "': work-group size " + std::to_string(l) +
                               " in dimension " + std::to_string(d) + " is outside 1.." +
                               std::to_string(info.max_work_item_sizes[d]) + " on " + k.dev->id);
      dims.local[d] = static_cast<std::uint32_t>(l);
      total *= l;
    }
    if (total > k.max_size)
      throw invalid_argument("kernel '" + k.name + "': work-group of " + std::to_string(total) +
                             " items exceeds this kernel's limit of " + std::to_string(k.max_size) +
                             " on " + k.dev->id);
  } else {
    default_local(k, global, dims.local);
  }
  for (std::uint32_t d = 0; d < 3; ++d) {
    const std::uint64_t g = global.size[d], l = dims.local[d];
    if (g > UINT64_MAX - (l - 1))
      throw invalid_argument("kernel '" + k.name + "': the range " + std::to_string(g) +
                             " in dimension " + std::to_string(d) +
                             " overflows 64 bits when rounded up to whole work-groups of " +
                             std::to_string(l));
    dims.groups[d] = (g + l - 1) / l;
    if (k.uses_barrier && g % l != 0)
      throw invalid_argument("kernel '" + k.name + "' uses kiln_barrier(): its range (" +
                             std::to_string(g) + " in dimension " + std::to_string(d) +
                             ") must be a multiple of the work-group size (" + std::to_string(l) +
                             ")");
    if (info.max_groups[d] && dims.groups[d] > info.max_groups[d])
      throw invalid_argument("kernel '" + k.name + "': " + std::to_string(dims.groups[d]) +
                             " work-groups in dimension " + std::to_string(d) +
                             " exceed the device limit of " + std::to_string(info.max_groups[d]));
  }

  kiln_kernel_arg kargs[max_args];
  kiln_mem_ref refs[max_args];
  for (std::size_t i = 0; i < n; ++i) {
    arg_binding& a = args[i];
    if (a.is_mem) {
      refs[i] = {a.mem ? a.mem->handle : nullptr, a.byte_offset};
      kargs[i] = {&refs[i], sizeof(kiln_mem_ref), 1};
      if (a.mem && a.mem->handle) note_queue_use(*a.mem, q);
    } else {
      kargs[i] = {&a.scalar, a.size, 0};
    }
  }
  struct {
    std::uint64_t n[3];
  } range_arg = {{global.size[0], global.size[1], global.size[2]}};
  kargs[n] = {&range_arg, sizeof range_arg, 0};
  if (g_faults_armed.load(std::memory_order_relaxed)) [[unlikely]]
    for (auto f : {testing::fault::launch, testing::fault::device_lost})
      if (kiln_status s = take_fault(*k.dev, f); s != KILN_OK)
        throw_injected(*k.dev, f, s, "launching kernel '" + k.name + "'");
  std::shared_ptr<memory_impl> record;
  if (k.checked) {
    std::size_t at = n + 1;
    for (std::size_t i = 0; i < n; ++i)
      if (args[i].is_mem) kargs[at++] = {&args[i].count, sizeof args[i].count, 0};
    record = allocate_on(q, kernel_lang::check_record_words * sizeof(std::uint64_t));
    const std::uint64_t zero = 0;
    fill(q, *record, 0, &zero, sizeof zero, kernel_lang::check_record_words);
    refs[at] = {record->handle, 0};
    kargs[at] = {&refs[at], sizeof(kiln_mem_ref), 1};
  }
  kiln_status s =
      k.api->launch(k.handle, q.handle, &dims, kargs, static_cast<std::uint32_t>(n + hidden));
  if (s != KILN_OK) throw_status(*k.api, s, "launching kernel '" + k.name + "'");
  ++t_launches;
  if (record) report_violation(k, q, *record, args);
}

}  // namespace kiln::detail
