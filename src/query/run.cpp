// Runs a query: cuts it into segments (one fused kernel each; a new segment starts only where
// a step needs positions after a filter), generates and compiles each segment's kernels
// (cached), launches them on the device's default queue and reads the result.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <list>
#include <map>
#include <mutex>

#include "kiln/kernel.hpp"
#include "kiln/query.hpp"
#include "query/codegen.hpp"
#include "query/host_input.hpp"
#include "query/scratch.hpp"
#include "runtime/runtime.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln {
namespace {
thread_local query_stats t_stats;
}
query_stats last_query_stats() { return t_stats; }
}  // namespace kiln

namespace kiln::detail::q {
namespace {

// ---- compiled kernels, cached by source -----------------------------------------------------
struct kernel_cache {
  std::mutex mu;
  std::map<std::pair<const device_impl*, std::string>, std::vector<kernel>> entries;
  std::list<decltype(entries)::iterator> order;  // oldest first, for a bounded size
  static constexpr std::size_t max_entries = 512;
};
kernel_cache& kcache() {
  static auto* c = new kernel_cache;  // never destroyed (holds device objects)
  return *c;
}

void dump(const generated& g) {
  const char* dir = std::getenv("KILN_DUMP_KERNELS");
  if (!dir || !*dir) return;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  char name[40];
  std::snprintf(name, sizeof name, "query_%016llx.kiln",
                static_cast<unsigned long long>(XXH3_64bits(g.source.data(), g.source.size())));
  std::ofstream(std::filesystem::path(dir) / name) << g.source;
}

// The shape of a segment: everything its generated source depends on, much shorter than the
// source, so a repeated query skips rendering.
std::string shape_key(const segment& seg, const query_desc& d, const reduce_spec* r, bool gpu) {
  std::string k = gpu ? "g" : "c";
  k += std::to_string(static_cast<int>(seg.end));
  for (const auto& in : seg.inputs) k += "|i" + in.name + ":" + type_name(in.type);
  for (const auto& st : seg.stages)
    k += "|s" + std::to_string(static_cast<int>(st.kind)) + st.var + ":" + type_name(st.type) +
         "=" + st.code + (st.exclusive ? "x" + st.init : "") + "@" + st.arg;
  for (std::size_t i = 0; i < seg.out_names.size(); ++i)
    k += "|o" + seg.out_names[i] + ":" + type_name(seg.out_types[i]);
  for (const auto& c : d.captures) k += std::string("|c") + type_name(c.type);
  for (const auto& h : d.helpers) k += "|h" + h;
  if (r)
    k += "|r" + std::to_string(static_cast<int>(r->kind)) + type_name(r->acc) + r->op + r->init;
  return k;
}

const std::vector<kernel>& kernels_for(const device& dev, const std::string& shape,
                                       const std::function<generated()>& render, query_stats& st) {
  kernel_cache& c = kcache();
  std::lock_guard lock(c.mu);
  auto key = std::make_pair(dev.impl().get(), shape);
  if (auto it = c.entries.find(key); it != c.entries.end()) {
    if (std::getenv("KILN_DUMP_KERNELS")) dump(render());
    return it->second;
  }
  const generated g = render();
  dump(g);
  const auto before = cache_stats().compiles;
  program p = program::compile(dev, g.source);
  if (cache_stats().compiles > before) st.programs_compiled++;
  std::vector<kernel> ks;
  for (const auto& name : g.kernels) ks.push_back(p.get_kernel(name));
  if (c.entries.size() >= kernel_cache::max_entries) {
    c.entries.erase(c.order.front());
    c.order.pop_front();
  }
  auto [it, ok] = c.entries.emplace(std::move(key), std::move(ks));
  c.order.push_back(it);
  return it->second;
}

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
  args common(const segment& s) {
    args a;
    for (const auto& in : s.inputs) a.mem(in.mem, in.offset * size_of(in.type), in.type);
    for (const auto& c : d.captures) {
      arg_binding b;
      b.type = c.type;
      b.size = static_cast<std::uint32_t>(size_of(c.type));
      b.scalar = c.bits;
      a.v.push_back(b);
    }
    return a;
  }
  std::uint64_t input_bytes(const segment& s) const {
    std::uint64_t b = 0;
    for (const auto& in : s.inputs) b += size_of(in.type);
    return b * s.n;
  }
  generated render(const segment& s, const reduce_spec* r) {
    codegen_in in{s, d.captures, d.helpers, r};
    return gpu ? render_gpu(in, target) : render_cpu(in);
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

  collect_result collect_segment(const segment& s) {
    collect_result r;
    r.dev = dev;
    for (scalar_type t : s.out_types)
      r.outputs.push_back(allocate(dev, std::max<std::uint64_t>(s.n, 1) * size_of(t)));
    if (s.n == 0) return r;
    const std::vector<kernel> ks = kernels_for(
        dev, shape_key(s, d, nullptr, gpu), [&] { return render(s, nullptr); }, st);
    args a = common(s);
    const bool filtered = s.has_filter() && s.end != segment_end::scan;
    sc.prepare_small(dev, q);
    if (gpu) {
      for (std::size_t k = 0; k < r.outputs.size(); ++k) a.mem(r.outputs[k], 0, s.out_types[k]);
      if (s.end == segment_end::collect && !filtered) {
        a.val(s.n);
        const codegen::tile_policy& p = target.tiles;
        launch(ks[0], ((s.n + p.map_tile() - 1) / p.map_tile()) * p.group, p.group, a);
      } else {
        const codegen::tile_policy& p = target.tiles;
        const std::uint64_t tile = s.end == segment_end::scan ? p.scan_tile() : p.compact_tile();
        const std::uint64_t tiles = (s.n + tile - 1) / tile;
        const std::uint32_t epoch = sc.prepare_lookback(dev, q, tiles);
        a.mem(sc.status, 0, scalar_type::u32);
        a.mem(sc.agg, 0, scalar_type::u64);
        a.mem(sc.incl, 0, scalar_type::u64);
        a.val(epoch);
        if (filtered) a.mem(sc.small, scratch::count_offset, scalar_type::u64);
        a.val(s.n);
        launch(ks[0], tiles * p.group, p.group, a);
      }
    } else {
      const auto [nc, cs] = chunks(s.n);
      if (s.end == segment_end::collect && !filtered) {
        for (std::size_t k = 0; k < r.outputs.size(); ++k) a.mem(r.outputs[k], 0, s.out_types[k]);
        a.val(s.n);
        launch(ks[0], s.n, 0, a);
      } else {
        sc.prepare_parts(dev, nc);
        args a1 = a;
        a1.mem(sc.part, 0, scalar_type::u64);
        a1.val(s.n);
        a1.val(cs);
        launch(ks[0], nc, 1, a1);
        for (std::size_t k = 0; k < r.outputs.size(); ++k) a.mem(r.outputs[k], 0, s.out_types[k]);
        a.mem(sc.part, 0, scalar_type::u64);
        if (filtered) a.mem(sc.small, scratch::count_offset, scalar_type::u64);
        a.val(s.n);
        a.val(cs);
        if (filtered) a.val(nc);
        launch(ks[1], nc, 1, a);
      }
    }
    r.count = filtered ? read_u64(scratch::count_offset) : s.n;
    std::uint64_t out_bytes = 0;
    for (scalar_type t : s.out_types) out_bytes += size_of(t);
    st.bytes_read += input_bytes(s);
    st.bytes_written += out_bytes * r.count;
    return r;
  }

  reduce_result reduce_segment(const segment& s, const reduce_spec& spec) {
    const std::vector<kernel> ks = kernels_for(
        dev, shape_key(s, d, &spec, gpu), [&] { return render(s, &spec); }, st);
    args a = common(s);
    sc.prepare_small(dev, q);
    if (gpu) {
      const codegen::tile_policy& p = target.tiles;
      const std::uint64_t groups =
          std::clamp<std::uint64_t>((s.n + p.reduce_group_elems - 1) / p.reduce_group_elems, 1,
                                    compute_units() * std::uint64_t(p.reduce_groups_per_unit));
      sc.prepare_parts(dev, groups);
      a.mem(sc.part, 0, scalar_type::u64);
      a.mem(sc.small, 0, scalar_type::u32);
      a.mem(sc.small, scratch::result_offset, scalar_type::u64);
      a.val(s.n);
      launch(ks[0], groups * p.group, p.group, a);
    } else {
      const auto [nc, cs] = chunks(s.n);
      sc.prepare_parts(dev, nc);
      args a1 = a;
      a1.mem(sc.part, 0, scalar_type::u64);
      a1.val(s.n);
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
    st.bytes_read += input_bytes(s);
    return r;
  }
};

// The C name the header gave input k ("v0", "v1", ...: sources name their inputs first).
std::string input_name(std::size_t k) {
  std::string s = std::to_string(k);
  s.insert(s.begin(), 'v');
  return s;
}

// Splits the query into segments, materialising where a step needs positions after a filter
// (take, skip, enumerate, _i, a scan) or anything but a map follows a scan. Returns the last
// segment, not yet run; `rank_end` asks for the last segment to hold no filter (argmin/argmax).
segment plan(runner& run, bool no_filter_at_end, bool no_scan_at_end) {
  query_desc& d = run.d;
  segment seg;
  seg.n = d.n;
  for (std::size_t k = 0; k < d.inputs.size(); ++k)
    seg.inputs.push_back({d.inputs[k].mem, d.inputs[k].offset, input_name(k), d.inputs[k].type});
  std::vector<std::string> names;
  std::vector<scalar_type> types;
  for (const auto& in : seg.inputs) names.push_back(in.name), types.push_back(in.type);
  bool filtered = false, scanned = false, indexed = false;

  auto materialize = [&] {
    seg.out_names = names;
    seg.out_types = types;
    seg.end = scanned ? segment_end::scan : segment_end::collect;
    collect_result r = run.collect_segment(seg);
    segment next;
    next.n = r.count;
    for (std::size_t k = 0; k < names.size(); ++k)
      next.inputs.push_back({r.outputs[k], 0, names[k], types[k]});
    seg = std::move(next);
    filtered = scanned = indexed = false;
  };

  for (const stage& s : d.stages) {
    const bool positional = s.kind == stage_kind::take || s.kind == stage_kind::skip ||
                            s.kind == stage_kind::enumerate || s.kind == stage_kind::scan ||
                            s.uses_index;
    if ((filtered && positional) ||
        (scanned && s.kind != stage_kind::map && s.kind != stage_kind::enumerate))
      materialize();
    if (s.kind == stage_kind::take || s.kind == stage_kind::skip) {
      // take keeps earlier positions; skip would shift the ones earlier stages saw.
      if (indexed && s.kind == stage_kind::skip) materialize();
      if (s.kind == stage_kind::skip) {
        const std::uint64_t k = std::min(s.count, seg.n);
        for (auto& in : seg.inputs) in.offset += k;
        seg.n -= k;
      } else {
        seg.n = std::min(seg.n, s.count);
      }
      continue;
    }
    seg.stages.push_back(s);
    switch (s.kind) {
      case stage_kind::map:
      case stage_kind::scan:
        names = {s.var};
        types = {s.type};
        break;
      case stage_kind::enumerate:
        names.insert(names.begin(), s.var);
        types.insert(types.begin(), s.type);
        break;
      default: break;
    }
    filtered |= s.kind == stage_kind::filter;
    scanned |= s.kind == stage_kind::scan;
    indexed |= s.uses_index;
  }
  if ((no_filter_at_end && filtered) || (no_scan_at_end && scanned)) materialize();
  seg.out_names = names;
  seg.out_types = types;
  seg.end = scanned ? segment_end::scan : segment_end::collect;
  return seg;
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
  session s(d, dev);
  segment seg = plan(s.run, false, false);
  return s.run.collect_segment(seg);
}

reduce_result reduce(query_desc& d, const reduce_spec& r) {
  const device dev = prepare(d);
  session s(d, dev);
  const bool positional = r.kind == reduce_kind::argmin || r.kind == reduce_kind::argmax;
  segment seg = plan(s.run, positional, true);
  seg.end = segment_end::reduce;
  return s.run.reduce_segment(seg, r);
}

}  // namespace kiln::detail::q
