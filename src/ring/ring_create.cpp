// Creating a ring kernel: checks, code generation, the shared memory, and the resident launch.
#include <algorithm>
#include <bit>
#include <cctype>
#include <cstring>

#include "codegen/render_source.hpp"
#include "codegen/target.hpp"
#include "kernel_lang/parser.hpp"
#include "ring/ring_impl.hpp"
#include "runtime/runtime.hpp"

namespace kiln::ring_detail {

mapped_block::mapped_block(const device& d, std::uint64_t n) : dev(d), bytes(n) {
  ptr = detail::host_alloc(d, n);
  std::memset(ptr, 0, n);
}

mapped_block::~mapped_block() { detail::host_free(dev, ptr); }

}  // namespace kiln::ring_detail

namespace kiln::detail {
namespace {

using namespace ring_detail;

constexpr std::uint32_t max_stages = 4;
constexpr std::uint64_t gpu_staging_limit = 40 * 1024;  // static shared memory per block

std::uint64_t address_of(const buffer<std::uint8_t>& b) {
  const memory_impl& m = *b.view().memory();
  const kiln_backend& api = *m.dev->api;
  void* p = nullptr;
  check(api, api.mem_address(m.dev->handle(), kiln_mem_ref{m.handle, 0}, &p),
        "ring kernel: device address of a queue");
  return reinterpret_cast<std::uint64_t>(p);
}

bool is_identifier(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

// Seq words as they were one lap before `start`: no slot looks published.
void init_seqs(unsigned char* slots, std::uint64_t count, std::uint64_t bytes,
               std::uint64_t start) {
  for (std::uint64_t i = 0; i < count; ++i) {
    const std::uint64_t first = start + ((i - start) & (count - 1));  // first position of slot i
    const std::uint64_t seq = first + 1 - count;
    std::memcpy(slots + i * bytes, &seq, sizeof seq);
  }
}

void check_options(const device& dev, bool gpu, const ring_options& o, std::size_t stages) {
  const std::string who = "ring kernel on " + dev.id() + ": ";
  if (o.capacity == 0 || o.capacity > (1u << 24))
    throw invalid_argument(who + "capacity must be in [1, 2^24], not " +
                           std::to_string(o.capacity));
  if (o.batch == 0 || o.batch > 4096)
    throw invalid_argument(who + "batch must be in [1, 4096], not " + std::to_string(o.batch));
  if (gpu && o.batch > 32)
    throw invalid_argument(who +
                           "batch is at most 32 on CUDA (one message per lane of a warp), not " +
                           std::to_string(o.batch));
  const std::uint32_t max_units = gpu ? 4096 : 256;
  if (o.units > max_units)
    throw invalid_argument(who + "units must be at most " + std::to_string(max_units) + ", not " +
                           std::to_string(o.units));
  if (gpu && (o.warps_per_block == 0 || o.warps_per_block > 31))
    throw invalid_argument(who + "warps_per_block must be in [1, 31]");
  if (stages == 0 || stages > max_stages)
    throw invalid_argument(who + "a ring has 1 to " + std::to_string(max_stages) + " stages");
}

[[noreturn]] void rethrow_compile(const compile_error& e, std::string_view user,
                                  const device& dev) {
  const std::vector<int> lines = codegen::cited_lines(e.log());
  const std::string ex = lines.empty() ? "" : kernel_lang::excerpt(user, lines);
  std::string msg = "ring kernel for " + dev.id() + ": compilation failed";
  if (e.log().find(loop_file) != std::string::npos)
    msg += " (the serving loop calls each handler as void h(const In*, Out*, kiln_ring_ctx*))";
  msg += "\n" + ex + "compiler log:\n" + e.log();
  throw compile_error(msg, e.log(), ex);
}

}  // namespace

std::shared_ptr<ring_impl> ring_create(const device& dev, std::string_view source,
                                       const std::vector<std::string>& handlers,
                                       const std::vector<ring_type>& types,
                                       const ring_options& opts) {
  // The plugin says whether the device can host rings; the device's codegen target holds the
  // ring primitives and says what a unit is: a warp with shared staging (lanes > 1) or a thread.
  const codegen::target& target = codegen::target_for(dev.impl()->api->dialect);
  if (!dev.impl()->supports_op(KILN_OP_RING) || !target.ring)
    throw unsupported("ring kernels run on the cpu and cuda backends; " + dev.id() +
                      " cannot host them (OpenCL offers no system-scope atomics on mapped host "
                      "memory to build the queues with)");
  const bool gpu = target.ring->lanes > 1;
  if (gpu && !(dev.supports(feature::mapped_host) && dev.supports(feature::unified_address)))
    throw unsupported("ring kernels need mapped host memory and unified addressing; " + dev.id() +
                      " has not both");
  check_options(dev, gpu, opts, handlers.size());
  if (types.size() != handlers.size() + 1)
    throw invalid_argument("ring kernel: one message type per queue (stages + 1)");
  for (const std::string& h : handlers)
    if (!is_identifier(h)) throw invalid_argument("ring kernel: '" + h + "' is not a handler name");

  // Message types: layouts checked, one struct per name.
  std::vector<message_desc> msgs;
  std::vector<std::size_t> type_of(types.size());
  for (std::size_t i = 0; i < types.size(); ++i) {
    message_desc m{types[i].name, types[i].size, types[i].fields};
    check_layout(m);
    auto same = std::find_if(msgs.begin(), msgs.end(), [&](auto& o) { return o.name == m.name; });
    if (same == msgs.end()) {
      type_of[i] = msgs.size();
      msgs.push_back(std::move(m));
    } else if (same->size != m.size || same->fields.size() != m.fields.size()) {
      throw invalid_argument("ring kernel: two message types are both named " + m.name);
    } else {
      type_of[i] = static_cast<std::size_t>(same - msgs.begin());
    }
  }

  auto r = std::make_shared<ring_impl>();
  r->dev = dev;
  r->gpu = gpu;
  r->opts = opts;
  r->capacity = opts.capacity;
  r->slots = std::bit_ceil<std::uint64_t>(opts.capacity);
  r->mask = r->slots - 1;
  r->start = opts.start_id;
  r->sent = r->received = r->start;
  r->in_size = types.front().size;
  r->out_size = types.back().size;
  r->in_bytes = slot_bytes(r->in_size);
  r->out_bytes = slot_bytes(r->out_size);

  // Shape: on CUDA, batch and warps per block shrink until the shared staging fits.
  kernel_shape shape;
  shape.target = &target;
  const std::uint32_t units = opts.units ? opts.units : (gpu ? 4 : 1);
  shape.batch = opts.batch;
  if (gpu) {
    std::uint64_t widest = 0;
    for (std::size_t i = 0; i + 1 < types.size(); ++i)
      widest = std::max(widest, slot_bytes(types[i].size) + slot_bytes(types[i + 1].size));
    while (shape.batch > 1 && shape.batch * widest > gpu_staging_limit) shape.batch /= 2;
    if (shape.batch * widest > gpu_staging_limit)
      throw unsupported("ring kernel on " + dev.id() + ": a request and response of " +
                        std::to_string(widest) + " bytes do not fit the " +
                        std::to_string(gpu_staging_limit) + "-byte shared staging of a warp");
    shape.warps = std::min<std::uint32_t>(
        {opts.warps_per_block, units, std::uint32_t(gpu_staging_limit / (shape.batch * widest))});
  }
  std::vector<stage_desc> stages(handlers.size());
  std::uint32_t next_unit = 0;
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    stages[i].handler = handlers[i];
    stages[i].in = &msgs[type_of[i]];
    stages[i].out = &msgs[type_of[i + 1]];
    stages[i].unit_begin = next_unit;
    stages[i].units = units;
    next_unit += gpu ? (units + shape.warps - 1) / shape.warps * shape.warps : units;
    r->stage_units.push_back(units);
  }
  r->total_units = units * static_cast<std::uint32_t>(handlers.size());

  std::vector<const message_desc*> mptrs;
  for (auto& m : msgs) mptrs.push_back(&m);
  const std::string src = kernel_source(source, stages, mptrs, shape);
  try {
    r->prog = std::make_unique<program>(
        program::compile(dev, src, opts.compile_options, check_mode::off));
  } catch (const compile_error& e) {
    rethrow_compile(e, source, dev);
  }
  kernel k = r->prog->get_kernel("kiln_ring_main");

  // Shared memory: control block, host queues, unit records (mapped); claims, live count,
  // middle queues and state (device).
  r->control_mem = std::make_unique<mapped_block>(dev, sizeof(kiln_ring_control));
  r->in_mem = std::make_unique<mapped_block>(dev, r->slots * r->in_bytes);
  r->out_mem = std::make_unique<mapped_block>(dev, r->slots * r->out_bytes);
  r->records_mem =
      std::make_unique<mapped_block>(dev, sizeof(kiln_ring_unit_record) * r->total_units);
  init_seqs(static_cast<unsigned char*>(r->in_mem->ptr), r->slots, r->in_bytes, r->start);
  init_seqs(static_cast<unsigned char*>(r->out_mem->ptr), r->slots, r->out_bytes, r->start);
  r->send_time = std::make_unique<std::atomic<std::uint64_t>[]>(r->slots);

  std::vector<std::uint64_t> counters(handlers.size() + 1, r->start);
  counters.back() = r->total_units;  // live units
  auto& cnt = r->device_mem.emplace_back(dev, counters.size() * 8);
  cnt.copy_from(std::span<const std::uint8_t>(
      reinterpret_cast<const std::uint8_t*>(counters.data()), counters.size() * 8));
  const std::uint64_t counters_at = address_of(cnt);
  std::vector<std::uint64_t> queue_at;  // device address of queue i (0 = host's first)
  queue_at.push_back(reinterpret_cast<std::uint64_t>(r->in_mem->ptr));
  for (std::size_t i = 1; i + 1 < types.size(); ++i) {
    const std::uint64_t bytes = slot_bytes(types[i].size);
    std::vector<std::uint8_t> init(r->slots * bytes, 0);
    init_seqs(init.data(), r->slots, bytes, r->start);
    auto& q = r->device_mem.emplace_back(dev, init.size());
    q.copy_from(init);
    queue_at.push_back(address_of(q));
  }
  queue_at.push_back(reinterpret_cast<std::uint64_t>(r->out_mem->ptr));
  r->state_bytes = std::max<std::uint64_t>(opts.state.size(), 16);
  std::vector<std::uint8_t> st(r->state_bytes, 0);
  if (!opts.state.empty()) std::memcpy(st.data(), opts.state.data(), opts.state.size());
  r->state = &r->device_mem.emplace_back(dev, st.size());
  r->state->copy_from(st);

  kiln_ring_control* c = r->control();
  c->command = KILN_RING_INACTIVE;
  c->tail = r->start;
  c->slots_mask = r->mask;
  c->idle_sleep_max_ns = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(opts.idle_sleep_max).count());
  c->stage_count = handlers.size();
  for (std::size_t i = 0; i < handlers.size(); ++i) {
    kiln_ring_stage& s = c->stages[i];
    s.in_slots = queue_at[i];
    s.out_slots = queue_at[i + 1];
    s.claim = counters_at + 8 * i;
    s.live = counters_at + 8 * handlers.size();
    s.state = address_of(*r->state);
    s.units = units;
    s.unit_records = reinterpret_cast<std::uint64_t>(r->records() + i * units);
  }
  // The launch below publishes these plain writes: CPU queues hand the launch over under a
  // mutex, and a CUDA launch sees host memory written before it.

  // Launch: CUDA, one grid (worker warps plus a watchdog warp per block) on a resident queue;
  // CPU, one single-item launch per unit, each on its own queue (its own thread).
  try {
    if (gpu) {
      const std::uint32_t threads = (shape.warps + 1) * 32;
      const std::uint64_t blocks = next_unit / shape.warps;
      // One block per SM always fits (<= 1024 threads, <= 40 KiB shared): a grid no larger is
      // co-resident, so no stage waits on blocks that never start.
      if (blocks > dev.info().compute_units)
        throw invalid_argument("ring kernel on " + dev.id() + ": " + std::to_string(blocks) +
                               " blocks (" + std::to_string(r->total_units) +
                               " units) cannot all be resident on " +
                               std::to_string(dev.info().compute_units) +
                               " SMs; use fewer units or more warps_per_block");
      queue& q = r->queues.emplace_back(dev);
      q.impl()->resident = true;
      k.launch(q, range(blocks * threads), local_size(threads), reinterpret_cast<std::uint64_t>(c),
               std::uint32_t(0));
      r->ended.push_back(q.record());
    } else {
      for (std::uint32_t u = 0; u < next_unit; ++u) {
        queue& q = r->queues.emplace_back(dev);
        q.impl()->resident = true;
        k.launch(q, range(1), reinterpret_cast<std::uint64_t>(c), u);
        r->ended.push_back(q.record());
      }
    }
  } catch (...) {
    // Units already launched wait, inactive: tell them to stop before the queues are destroyed.
    std::atomic_ref<std::uint64_t>(c->command).store(KILN_RING_DROP, std::memory_order_release);
    for (queue& q : r->queues) {
      try {
        q.finish();
      } catch (...) {
      }
    }
    throw;
  }
  return r;
}

}  // namespace kiln::detail
