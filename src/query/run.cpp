// Runs a query: plans it (plan.cpp), then executes the segments in order: each segment's
// kernels come from the generated-kernel cache (rendered and compiled on a miss) and run on
// the device's default queue; the last one ends in the terminal, whose result is read back.
#include <mutex>

#include "kiln/kernel.hpp"
#include "kiln/query.hpp"
#include "query/codegen.hpp"
#include "query/host_input.hpp"
#include "query/plan.hpp"
#include "query/scratch.hpp"
#include "runtime/generated_kernels.hpp"
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
struct args {
  std::vector<arg_binding> v;
  void mem(const std::shared_ptr<memory_impl>& m, std::uint64_t byte_off, scalar_type t) {
    arg_binding b;
    b.is_mem = true;
    b.mem = m.get();
    b.byte_offset = byte_off;
    b.type = t;
    v.push_back(b);
  }
  template <class T>
  void val(T x) {
    v.push_back(bind_arg(x));
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
  query_stats& st;
  bool gpu;
  const codegen::target& target;  // the device's: its dialect and the tile policy launches read

  // local 0: the backend's default work-group (lets the CPU backend vectorise a map).
  void launch(const kernel& k, std::uint64_t global, std::uint32_t local, args& a) {
    const range g(global);
    const local_size l(local ? local : 1);
    detail::launch(*k.impl(), *q.impl(), g, local ? &l : nullptr, a.v.data(), a.v.size());
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
      a.v.push_back(b);
    }
    return a;
  }
  std::uint64_t input_bytes(const segment& s, std::uint64_t n) const {
    std::uint64_t b = 0;
    for (const auto& in : s.inputs) b += size_of(in.type);
    return b * n;
  }
  std::vector<kernel> kernels(const segment& s, const reduce_spec* r) {
    const codegen_in in{s, d.graph, r, dev.supports(feature::warp32)};
    generated_kernels g = get_generated(dev, "query", segment_key(s, d, r, gpu, target.name), [&] {
      generated p = gpu ? render_gpu(in, target) : render_cpu(in);
      p.about = describe(s, d.graph);
      return p;
    });
    if (g.compiled) st.programs_compiled++;
    return std::move(g.kernels);
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
  std::uint64_t read_u64(std::uint64_t off) {
    std::uint64_t v = 0;
    copy_d2h(*q.impl(), &v, *sc.small, off, sizeof v);
    q.finish();
    st.device_to_host_bytes += sizeof v;
    return v;
  }

  collect_result collect_segment(const segment& s, const bound& b) {
    const std::uint64_t n = b.n;
    collect_result r;
    r.dev = dev;
    for (scalar_type t : s.out_types)
      r.outputs.push_back(allocate(dev, std::max<std::uint64_t>(n, 1) * size_of(t)));
    if (n == 0) return r;
    const std::vector<kernel> ks = kernels(s, nullptr);
    args a = common(s, b);
    const bool filtered = s.has_filter() && s.end != segment_end::scan;
    sc.prepare_small(dev, q);
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
        const std::uint32_t epoch = sc.prepare_lookback(dev, q, tiles);
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
        sc.prepare_parts(dev, nc);
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
    r.count = filtered ? read_u64(scratch::count_offset) : n;
    std::uint64_t out_bytes = 0;
    for (scalar_type t : s.out_types) out_bytes += size_of(t);
    st.bytes_read += input_bytes(s, n);
    st.bytes_written += out_bytes * r.count;
    return r;
  }

  reduce_result reduce_segment(const segment& s, const bound& b, const reduce_spec& spec) {
    const std::uint64_t n = b.n;
    const std::vector<kernel> ks = kernels(s, &spec);
    args a = common(s, b);
    sc.prepare_small(dev, q);
    if (gpu) {
      const codegen::tile_policy& p = target.tiles;
      const std::uint64_t groups =
          std::clamp<std::uint64_t>((n + p.reduce_group_elems - 1) / p.reduce_group_elems, 1,
                                    compute_units() * std::uint64_t(p.reduce_groups_per_unit));
      sc.prepare_parts(dev, groups);
      a.mem(sc.part, 0, scalar_type::u64);
      a.mem(sc.small, 0, scalar_type::u32);
      a.mem(sc.small, scratch::result_offset, scalar_type::u64);
      a.val(n);
      launch(ks[0], groups * p.group, p.group, a);
    } else {
      const auto [nc, cs] = chunks(n);
      sc.prepare_parts(dev, nc);
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
    reduce_result r;
    copy_d2h(*q.impl(), &r, *sc.small, scratch::result_offset, sizeof r);
    q.finish();
    st.device_to_host_bytes += sizeof r;
    st.bytes_read += input_bytes(s, n);
    return r;
  }
};

// Where segment s's inputs are and how many elements it runs over: known once the segment it
// reads (s.after) ran, since a filter's survivor count is known only then.
bound bind_segment(const query_desc& d, const segment& s, const std::vector<collect_result>& done) {
  std::uint64_t n = s.after < 0 ? d.n : done[static_cast<std::size_t>(s.after)].count;
  std::uint64_t skipped = 0;
  for (const slice& sl : s.slices) {
    if (sl.kind == stage_kind::skip) {
      const std::uint64_t k = std::min(sl.count, n);
      skipped += k;
      n -= k;
    } else {
      n = std::min(n, sl.count);
    }
  }
  bound b;
  b.n = n;
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
auto execute(runner& run, const std::vector<segment>& plan, const Terminal& terminal) {
  std::vector<collect_result> done(plan.size());
  const auto read_later = [&](std::size_t i, int k) {
    for (std::size_t j = i + 1; j < plan.size(); ++j)
      if (plan[j].after == k) return true;
    return false;
  };
  for (std::size_t i = 0; i + 1 < plan.size(); ++i) {
    const segment& s = plan[i];
    done[i] = run.collect_segment(s, bind_segment(run.d, s, done));
    // Outputs no later segment reads are released as soon as possible.
    if (s.after >= 0 && !read_later(i, s.after)) done[static_cast<std::size_t>(s.after)] = {};
  }
  return terminal(plan.back(), bind_segment(run.d, plan.back(), done));
}

struct session {
  device dev;
  scratch& sc;
  std::unique_lock<std::recursive_mutex> lock;
  runner run;
  session(query_desc& d, const device& dv)
      : dev(dv),
        sc(scratch_for(dev)),
        lock(sc.mu),
        run{d,
            dev,
            dev.default_queue(),
            sc,
            t_stats,
            dev.info().type != device_type::cpu,
            codegen::target_for(dev.impl()->api->dialect)} {}
};

device prepare(query_desc& d) {
  t_stats = query_stats{};
  if (d.host_input()) stage_host_inputs(d, t_stats);
  if (!d.dev.impl())
    throw invalid_argument("kiln::query: the input has no device (an empty, moved-from buffer?)");
  for (const auto& in : d.inputs)
    if (!in.mem) throw invalid_argument("kiln::query: an input buffer is empty (moved-from?)");
  t_stats.device = d.dev.id();
  return d.dev;
}

}  // namespace

collect_result collect(query_desc& d) {
  const device dev = prepare(d);
  const std::vector<segment> p = plan(d, segment_end::collect, false, false);
  session s(d, dev);
  return execute(s.run, p,
                 [&](const segment& seg, const bound& b) { return s.run.collect_segment(seg, b); });
}

reduce_result reduce(query_desc& d, const reduce_spec& r) {
  const device dev = prepare(d);
  const bool positional = r.kind == reduce_kind::argmin || r.kind == reduce_kind::argmax;
  const std::vector<segment> p = plan(d, segment_end::reduce, positional, true);
  session s(d, dev);
  return execute(s.run, p, [&](const segment& seg, const bound& b) {
    return s.run.reduce_segment(seg, b, r);
  });
}

}  // namespace kiln::detail::q
