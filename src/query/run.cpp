// Enqueues a query: its plan (cached per shape, plan.cpp), then the segments in order, each
// segment's kernels from the plan (generated and compiled on its first run), on the queue the
// caller gives. The result is copied into a pinned slot; async.cpp reads it.
#include "query/run.hpp"

#include <cstdlib>

#include "kiln/kernel.hpp"
#include "query/codegen.hpp"
#include "query/group_step.hpp"
#include "query/host_input.hpp"
#include "query/join_step.hpp"
#include "query/plan.hpp"
#include "query/sort_step.hpp"
#include "runtime/generated_kernels.hpp"
#include "runtime/nvtx.hpp"
#include "runtime/runtime.hpp"

namespace kiln {
namespace {
thread_local query_stats t_stats;
}
query_stats last_query_stats() { return t_stats; }
}  // namespace kiln

namespace kiln::detail::q {
namespace {

// ---- argument lists ---------------------------------------------------------------------
// Fixed capacity, on the stack: no allocation per launch (launch() takes at most 63).
struct args {
  std::array<arg_binding, 63> v;
  std::size_t n = 0;
  void push(const arg_binding& b) {
    if (n == v.size())
      throw invalid_argument("kiln::query: more than 63 kernel arguments (captured values)");
    v[n++] = b;
  }
  void mem(const std::shared_ptr<memory_impl>& m, std::uint64_t byte_off, scalar_type t) {
    arg_binding b;
    b.is_mem = true;
    b.mem = m.get();
    b.byte_offset = byte_off;
    b.type = t;
    push(b);
  }
  template <class T>
  void val(T x) {
    push(bind_arg(x));
  }
};

// A segment's run-time half: its length and where its inputs are (memory, element offset).
struct bound {
  std::uint64_t n = 0;
  std::vector<std::pair<std::shared_ptr<memory_impl>, std::uint64_t>> inputs;
};

struct runner {
  query_desc& d;
  const device& dev;
  queue& q;
  scratch& sc;
  query_plan& plan;
  query_stats& st;
  unsigned char* slot;  // the query's pinned result slot
  bool gpu;
  const codegen::target& target;  // the device's: its dialect and the tile policy launches read
  bool dump = std::getenv("KILN_DUMP_KERNELS") != nullptr;

  // local 0: the backend's default work-group (lets the CPU backend vectorise a map).
  void launch(const kernel& k, std::uint64_t global, std::uint32_t local, args& a) {
    const range g(global);
    const local_size l(local ? local : 1);
    detail::launch(*k.impl(), *q.impl(), g, local ? &l : nullptr, a.v.data(), a.n);
    st.kernel_launches++;
  }
  // Inputs and captures: the parameters every kernel of a segment starts with.
  args common(const segment& s, const bound& b) {
    args a;
    for (std::size_t k = 0; k < s.inputs.size(); ++k) {
      const scalar_type t = s.inputs[k].type;
      a.mem(b.inputs[k].first, b.inputs[k].second * size_of(t), t);
    }
    for (const auto& c : d.graph.captures) {
      arg_binding b;
      b.type = c.type;
      b.size = static_cast<std::uint32_t>(size_of(c.type));
      b.scalar = c.bits;
      a.push(b);
    }
    return a;
  }
  std::uint64_t input_bytes(const segment& s, std::uint64_t n) const {
    std::uint64_t b = 0;
    for (const auto& in : s.inputs) b += size_of(in.type);
    return b * n;
  }
  // Segment i's kernels: from the plan after its first run (KILN_DUMP_KERNELS: looked up
  // every time, so that every query writes its dump).
  const std::vector<kernel>& kernels(std::size_t i, const reduce_spec* r) {
    const segment& s = plan.segments[i];
    const auto get = [&] {
      const codegen_in in{s, d.graph, r, dev.supports(feature::warp32)};
      generated_kernels g = get_generated(dev, "query", plan.keys[i], [&] {
        generated p = gpu ? render_gpu(in, target) : render_cpu(in);
        p.about = describe(s, d.graph);
        return p;
      });
      if (g.compiled) st.programs_compiled++;
      return std::move(g.kernels);
    };
    query_plan::program& p = plan.programs[i];
    if (dump) get();
    std::call_once(p.once, [&] { p.kernels = get(); });
    return p.kernels;
  }
  std::uint32_t compute_units() const {
    return std::max<std::uint32_t>(dev.info().compute_units, 1);
  }
  // CPU chunking: depends on n and the device only.
  std::pair<std::uint64_t, std::uint64_t> chunks(std::uint64_t n) const {
    const codegen::tile_policy& p = target.tiles;
    std::uint64_t c =
        std::clamp<std::uint64_t>((n + p.cpu_chunk_elems - 1) / p.cpu_chunk_elems, 1,
                                  compute_units() * std::uint64_t(p.cpu_chunks_per_unit));
    const std::uint64_t cs = (n + c - 1) / c;
    if (cs) c = (n + cs - 1) / cs;
    return {c, cs};
  }
  // Copies `bytes` of the small block at `off` into the slot (asynchronous).
  void to_slot(std::uint64_t off, std::uint64_t bytes) {
    copy_d2h(*q.impl(), slot, *sc.small, off, bytes);
    st.device_to_host_bytes += bytes;
  }

  // `last`: the query's final segment, whose survivor count the host reads later (from the
  // slot); an earlier segment's count is read now, as the next segment's length.
  collect_result collect_segment(std::size_t i, const bound& b, bool last, bool* count_in_slot) {
    const segment& s = plan.segments[i];
    const std::uint64_t n = b.n;
    collect_result r;
    r.dev = dev;
    for (scalar_type t : s.out_types)
      r.outputs.push_back(allocate_on(*q.impl(), std::max<std::uint64_t>(n, 1) * size_of(t)));
    if (n == 0) return r;
    const std::vector<kernel>& ks = kernels(i, nullptr);
    args a = common(s, b);
    const bool filtered = s.has_filter() && s.end != segment_end::scan;
    sc.prepare_small(q);
    if (gpu) {
      for (std::size_t k = 0; k < r.outputs.size(); ++k) a.mem(r.outputs[k], 0, s.out_types[k]);
      if (s.end == segment_end::collect && !filtered) {
        a.val(n);
        const codegen::tile_policy& p = target.tiles;
        launch(ks[0], ((n + p.map_tile() - 1) / p.map_tile()) * p.group, p.group, a);
      } else {
        const codegen::tile_policy& p = target.tiles;
        const std::uint64_t tile = s.end == segment_end::scan ? p.scan_tile() : p.compact_tile();
        const std::uint64_t tiles = (n + tile - 1) / tile;
        const std::uint32_t epoch = sc.prepare_lookback(q, tiles);
        a.mem(sc.status, 0, scalar_type::u32);
        a.mem(sc.agg, 0, scalar_type::u64);
        a.mem(sc.incl, 0, scalar_type::u64);
        a.val(epoch);
        if (filtered) a.mem(sc.small, scratch::count_offset, scalar_type::u64);
        a.val(n);
        launch(ks[0], tiles * p.group, p.group, a);
      }
    } else {
      const auto [nc, cs] = chunks(n);
      if (s.end == segment_end::collect && !filtered) {
        for (std::size_t k = 0; k < r.outputs.size(); ++k) a.mem(r.outputs[k], 0, s.out_types[k]);
        a.val(n);
        launch(ks[0], n, 0, a);
      } else {
        sc.prepare_parts(q, nc);
        args a1 = a;
        a1.mem(sc.part, 0, scalar_type::u64);
        a1.val(n);
        a1.val(cs);
        launch(ks[0], nc, 1, a1);
        for (std::size_t k = 0; k < r.outputs.size(); ++k) a.mem(r.outputs[k], 0, s.out_types[k]);
        a.mem(sc.part, 0, scalar_type::u64);
        if (filtered) a.mem(sc.small, scratch::count_offset, scalar_type::u64);
        a.val(n);
        a.val(cs);
        if (filtered) a.val(nc);
        launch(ks[1], nc, 1, a);
      }
    }
    st.bytes_read += input_bytes(s, n);
    r.count = n;
    if (filtered) {
      to_slot(scratch::count_offset, sizeof(std::uint64_t));
      if (last) {
        *count_in_slot = true;
        return r;  // the survivors' bytes are counted when the count is read
      }
      // TODO(device-side n): a later segment could read this count on the device instead.
      q.finish();
      std::memcpy(&r.count, slot, sizeof r.count);
    }
    std::uint64_t out_bytes = 0;
    for (scalar_type t : s.out_types) out_bytes += size_of(t);
    st.bytes_written += out_bytes * r.count;
    return r;
  }

  void reduce_segment(std::size_t i, const bound& b, const reduce_spec& spec) {
    const segment& s = plan.segments[i];
    const std::uint64_t n = b.n;
    const std::vector<kernel>& ks = kernels(i, &spec);
    args a = common(s, b);
    sc.prepare_small(q);
    if (gpu) {
      const codegen::tile_policy& p = target.tiles;
      const std::uint64_t groups =
          std::clamp<std::uint64_t>((n + p.reduce_group_elems - 1) / p.reduce_group_elems, 1,
                                    compute_units() * std::uint64_t(p.reduce_groups_per_unit));
      sc.prepare_parts(q, groups);
      a.mem(sc.part, 0, scalar_type::u64);
      a.mem(sc.small, 0, scalar_type::u32);
      a.mem(sc.small, scratch::result_offset, scalar_type::u64);
      a.val(n);
      launch(ks[0], groups * p.group, p.group, a);
    } else {
      const auto [nc, cs] = chunks(n);
      sc.prepare_parts(q, nc);
      args a1 = a;
      a1.mem(sc.part, 0, scalar_type::u64);
      a1.val(n);
      a1.val(cs);
      launch(ks[0], nc, 1, a1);
      a.mem(sc.part, 0, scalar_type::u64);
      a.mem(sc.small, scratch::result_offset, scalar_type::u64);
      a.val(nc);
      launch(ks[1], 1, 1, a);
    }
    to_slot(scratch::result_offset, sizeof(reduce_result));
    st.bytes_read += input_bytes(s, n);
  }
};

// Where segment s's inputs are and how many elements it runs over: known once the segment it
// reads (s.after) ran, since a filter's survivor count is known only then.
bound bind_segment(const query_desc& d, const segment& s, const std::vector<collect_result>& done) {
  std::uint64_t n = s.after < 0 ? d.n : done[static_cast<std::size_t>(s.after)].count;
  std::uint64_t skipped = 0;
  for (const slice& sl : s.slices) {
    // A cached plan serves every count: the query's own stage holds it.
    const std::uint64_t count = d.stages[static_cast<std::size_t>(sl.stage)].count;
    if (sl.exact && count > n)
      throw invalid_argument("kiln::top_k: k = " + std::to_string(count) + " but the query has " +
                             std::to_string(n) + " element(s)");
    if (sl.kind == stage_kind::skip) {
      const std::uint64_t k = std::min(count, n);
      skipped += k;
      n -= k;
    } else {
      n = std::min(n, count);
    }
  }
  bound b;
  b.n = n;
  b.inputs.reserve(s.inputs.size());
  for (const segment_input& in : s.inputs) {
    const auto c = static_cast<std::size_t>(in.component);
    if (s.after < 0)
      b.inputs.emplace_back(d.inputs[c].mem, d.inputs[c].offset + skipped);
    else
      b.inputs.emplace_back(done[static_cast<std::size_t>(s.after)].outputs[c], skipped);
  }
  return b;
}

// Runs every materialised segment of the plan in order, then `terminal` on the last one.
template <class Terminal>
void execute(runner& run, const Terminal& terminal) {
  const std::vector<segment>& plan = run.plan.segments;
  std::vector<collect_result> done(plan.size() - 1);
  const auto read_later = [&](std::size_t i, int k) {
    for (std::size_t j = i + 1; j < plan.size(); ++j)
      if (plan[j].after == k) return true;
    return false;
  };
  for (std::size_t i = 0; i + 1 < plan.size(); ++i) {
    const segment& s = plan[i];
    done[i] = run.collect_segment(i, bind_segment(run.d, s, done), false, nullptr);
    if (const segment& next = plan[i + 1]; next.after == static_cast<int>(i)) {
      if (next.group.on)
        group_collected(run.q, done[i], s.out_types, next.group, next.sort.on);
      else if (next.sort.on)
        sort_collected(run.q, done[i], s.out_types, next.sort.descending);
      if (next.join.on)
        join_collected(run.q, done[i], s.out_types,
                       *run.d.stages[static_cast<std::size_t>(next.join.stage)].other,
                       next.join.left);
    }
    // Outputs no later segment reads are released as soon as possible.
    if (s.after >= 0 && !read_later(i, s.after)) done[static_cast<std::size_t>(s.after)] = {};
  }
  terminal(plan.size() - 1, bind_segment(run.d, plan.back(), done));
}

// One query being enqueued: the scratch set leased, the plan and the result slot.
struct session {
  scratch_lease lease;
  std::shared_ptr<query_plan> plan;
  runner run;
  session(query_desc& d, queue& q, enqueued& e, segment_end end, bool positional,
          const reduce_spec* r, bool gpu, const codegen::target& target)
      : lease(q),
        plan(cached_plan(d, end, positional, end == segment_end::reduce, r, gpu, target.name)),
        run{d, e.dev, q, *lease, *plan, t_stats, e.slot.host, gpu, target} {}
};

bool is_gpu(const device& dev) { return dev.info().type != device_type::cpu; }

}  // namespace

query_stats& thread_stats() { return t_stats; }

device prepare(query_desc& d, const queue* q) {
  t_stats = query_stats{};
  if (q && d.where == placement::automatic) {  // the queue decides
    d.dev = q->get_device();
    d.where = placement::fixed;
  }
  const bool staged = d.host_input();
  if (staged) stage_host_inputs(d, t_stats);
  if (!d.dev.impl())
    throw invalid_argument("kiln::query: the input has no device (an empty, moved-from buffer?)");
  for (const auto& in : d.inputs)
    if (!in.mem) throw invalid_argument("kiln::query: an input buffer is empty (moved-from?)");
  if (q && !(q->get_device() == d.dev))
    throw invalid_argument("kiln::async: the query's data lives on " + d.dev.id() +
                           ", the queue belongs to " + q->get_device().id());
  // Host inputs are copied on the device's default queue: another queue waits for them.
  if (staged && q && q->impl() != d.dev.default_queue().impl())
    const_cast<queue*>(q)->wait(d.dev.default_queue().record());
  t_stats.device = d.dev.id();
  return d.dev;
}

enqueued::enqueued(enqueued&& o) noexcept
    : dev(o.dev),
      slot(std::exchange(o.slot, result_slot{})),
      count_in_slot(o.count_in_slot),
      collected(std::move(o.collected)),
      out_bytes(o.out_bytes) {}

enqueued& enqueued::operator=(enqueued&& o) noexcept {
  if (this != &o) {
    if (slot.host) release_slot(dev, take_slot(), std::nullopt);
    dev = o.dev;
    slot = o.take_slot();
    count_in_slot = o.count_in_slot;
    collected = std::move(o.collected);
    out_bytes = o.out_bytes;
  }
  return *this;
}

enqueued::~enqueued() {
  if (slot.host) release_slot(dev, slot, std::nullopt);
}

enqueued enqueue_collect(query_desc& d, queue& q) {
  KILN_TRACE_RANGE("query collect");
  enqueued e;
  e.dev = d.dev;
  e.slot = acquire_slot(e.dev);
  const bool gpu = is_gpu(e.dev);
  const codegen::target& target = codegen::target_for(e.dev.impl()->api->dialect);
  session s(d, q, e, segment_end::collect, false, nullptr, gpu, target);
  execute(s.run, [&](std::size_t i, const bound& b) {
    e.collected = s.run.collect_segment(i, b, true, &e.count_in_slot);
  });
  for (scalar_type t : s.plan->segments.back().out_types) e.out_bytes += size_of(t);
  return e;
}

enqueued enqueue_reduce(query_desc& d, const reduce_spec& r, queue& q) {
  constexpr const char* kinds[] = {"count", "sum",     "product", "min",    "max",   "any",
                                   "all",   "average", "argmin",  "argmax", "custom"};
  static_assert(std::size(kinds) == static_cast<std::size_t>(reduce_kind::custom) + 1);
  const trace_range traced("query", kinds[static_cast<std::size_t>(r.kind)]);
  enqueued e;
  e.dev = d.dev;
  e.slot = acquire_slot(e.dev);
  const bool gpu = is_gpu(e.dev);
  const codegen::target& target = codegen::target_for(e.dev.impl()->api->dialect);
  const bool positional = r.kind == reduce_kind::argmin || r.kind == reduce_kind::argmax;
  session s(d, q, e, segment_end::reduce, positional, &r, gpu, target);
  execute(s.run, [&](std::size_t i, const bound& b) { s.run.reduce_segment(i, b, r); });
  return e;
}

}  // namespace kiln::detail::q
