#include "query/plan.hpp"

#include <list>
#include <stdexcept>
#include <unordered_map>

#include "ir/hash.hpp"
#include "ir/print.hpp"
#include "ir/verify.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {

namespace {

// Whether two expressions compute the same value: the same nodes, operand for operand.
bool same_value(const ir::graph& g, ir::node_id a, ir::node_id b) {
  if (a == b) return true;
  if (a < 0 || b < 0) return false;
  const ir::node &x = g.nodes[static_cast<std::size_t>(a)],
                 &y = g.nodes[static_cast<std::size_t>(b)];
  if (x.o != y.o || x.dtype != y.dtype || x.slot != y.slot) return false;
  for (std::size_t k = 0; k < x.operands.size(); ++k)
    if (!same_value(g, x.operands[k], y.operands[k])) return false;
  return true;
}

// The columns a group stage reads, computed at the end of the segment before it: the key first
// (computed, or the single-valued element), then each distinct aggregated value (count reads
// none; sum and max of one value share its column, so the sort carries it once). Also the step
// that reduces them.
group_step plan_group(const query_desc& d, const stage& s, segment& seg, std::vector<int>& vars,
                      std::vector<scalar_type>& types, bool& indexed) {
  std::vector<int> cv;
  std::vector<scalar_type> ct;
  std::vector<ir::node_id> exprs;  // the expression of each column (-1: a component)
  if (s.expr >= 0) seg.stages.push_back(make_stage(stage_kind::map, s.var, s.expr, s.type));
  cv.push_back(s.expr >= 0 ? s.var : vars.at(0));
  ct.push_back(s.type);
  exprs.push_back(-2);  // the key is never shared
  group_step g;
  g.on = true;
  g.keep_key = !s.drop_key;
  for (const aggregate& a : s.aggregates) {
    int column = -1;
    if (a.kind != aggregate_kind::count) {
      for (std::size_t c = 1; c < cv.size() && column < 0; ++c)
        if (ct[c] == a.in_type && (cv[c] == a.in_var || (a.expr >= 0 && exprs[c] >= 0 &&
                                                         same_value(d.graph, exprs[c], a.expr))))
          column = static_cast<int>(c);
      if (column < 0) {
        if (a.expr >= 0)
          seg.stages.push_back(make_stage(stage_kind::map, a.in_var, a.expr, a.in_type));
        column = static_cast<int>(cv.size());
        cv.push_back(a.in_var);
        ct.push_back(a.in_type);
        exprs.push_back(a.expr);
      }
    }
    g.columns.push_back({a.kind, column, a.out_type});
  }
  indexed |= s.uses_index;
  vars = std::move(cv);
  types = std::move(ct);
  return g;
}

}  // namespace

std::vector<segment> plan(const query_desc& d, segment_end terminal, bool no_filter_at_end,
                          bool no_scan_at_end) {
#ifndef NDEBUG
  // The header templates built the graph; a debug build checks what they built.
  if (const std::string e = ir::verify(d.graph); !e.empty())
    throw std::logic_error("kiln::query: malformed IR: " + e);
#endif
  std::vector<segment> out;
  segment seg;
  std::vector<int> vars;
  std::vector<scalar_type> types;
  // Sources number their inputs first: input k is value k.
  for (std::size_t k = 0; k < d.inputs.size(); ++k) {
    const int v = static_cast<int>(k);
    seg.inputs.push_back({v, v, d.inputs[k].type, {}});
    vars.push_back(v);
    types.push_back(d.inputs[k].type);
  }
  bool filtered = false, scanned = false, indexed = false;

  auto close = [&] {
    seg.out_vars = vars;
    seg.out_types = types;
    seg.end = scanned ? segment_end::scan : segment_end::collect;
  };
  auto materialize = [&] {
    close();
    seg.materialise = true;
    segment next;
    next.after = static_cast<int>(out.size());
    for (std::size_t k = 0; k < vars.size(); ++k)
      next.inputs.push_back({static_cast<int>(k), vars[k], types[k], {}});
    out.push_back(std::move(seg));
    seg = std::move(next);
    filtered = scanned = indexed = false;
  };

  for (std::size_t si = 0; si < d.stages.size(); ++si) {
    const stage& s = d.stages[si];
    const bool positional = s.kind == stage_kind::take || s.kind == stage_kind::skip ||
                            s.kind == stage_kind::enumerate || s.kind == stage_kind::scan ||
                            s.uses_index;
    if ((filtered && positional) ||
        (scanned && s.kind != stage_kind::map && s.kind != stage_kind::enumerate))
      materialize();
    if (s.kind == stage_kind::group) {
      group_step g = plan_group(d, s, seg, vars, types, indexed);
      materialize();
      seg.sort = {s.sorted, false, false};
      seg.group = std::move(g);
      // After the stage: the key (unless dropped), then one component per aggregate.
      seg.inputs.clear();
      vars.clear();
      types.clear();
      if (!s.drop_key) {
        seg.inputs.push_back({0, s.var, s.type, {}});
        vars.push_back(s.var);
        types.push_back(s.type);
      }
      for (std::size_t k = 0; k < s.aggregates.size(); ++k) {
        const aggregate& a = s.aggregates[k];
        const int column = static_cast<int>(k) + (s.drop_key ? 0 : 1);
        seg.inputs.push_back({column, a.out_var, a.out_type, {}});
        vars.push_back(a.out_var);
        types.push_back(a.out_type);
      }
      continue;
    }
    if (s.kind == stage_kind::join) {
      // This side's key first, then its components; after: both elements' components.
      seg.stages.push_back(make_stage(stage_kind::map, s.var, s.expr, s.type));
      indexed |= s.uses_index;
      vars.insert(vars.begin(), s.var);
      types.insert(types.begin(), s.type);
      materialize();
      seg.join = {true, s.left, static_cast<int>(si)};
      seg.inputs.clear();
      vars = s.out_vars;
      types = s.out_types;
      for (std::size_t k = 0; k < vars.size(); ++k)
        seg.inputs.push_back({static_cast<int>(k), vars[k], types[k], {}});
      continue;
    }
    if (s.kind == stage_kind::top_k) {  // a descending sort, then the first `count`
      materialize();
      seg.sort = {true, true, false};
      seg.slices.push_back({stage_kind::take, s.count, static_cast<int>(si), true});
      continue;
    }
    if (s.kind == stage_kind::sort) {
      // The key first among the outputs: computed here (order_by) or the element itself.
      if (s.expr >= 0) {
        stage key = s;
        key.kind = stage_kind::map;  // defines the key's value; the element keeps its own
        seg.stages.push_back(key);
        vars.insert(vars.begin(), s.var);
        types.insert(types.begin(), s.type);
        indexed |= s.uses_index;
      }
      materialize();
      seg.sort = {true, s.descending, s.expr >= 0};
      if (s.expr >= 0) {
        seg.inputs.erase(seg.inputs.begin());
        vars.erase(vars.begin());
        types.erase(types.begin());
      }
      continue;
    }
    if (s.kind == stage_kind::take || s.kind == stage_kind::skip) {
      // take keeps earlier positions; skip would shift the ones earlier stages saw.
      if (indexed && s.kind == stage_kind::skip) materialize();
      seg.slices.push_back({s.kind, s.count, static_cast<int>(si)});
      continue;
    }
    seg.stages.push_back(s);
    switch (s.kind) {
      case stage_kind::map:
      case stage_kind::scan:
        vars = {s.var};
        types = {s.type};
        break;
      case stage_kind::enumerate:
        vars.insert(vars.begin(), s.var);
        types.insert(types.begin(), s.type);
        break;
      default: break;
    }
    filtered |= s.kind == stage_kind::filter;
    scanned |= s.kind == stage_kind::scan;
    indexed |= s.uses_index;
  }
  if ((no_filter_at_end && filtered) || (no_scan_at_end && scanned)) materialize();
  close();
  if (terminal == segment_end::reduce) seg.end = segment_end::reduce;
  out.push_back(std::move(seg));
  return out;
}

std::uint64_t segment_key(const segment& s, const query_desc& d, const reduce_spec* r, bool gpu,
                          const char* target) {
  ir::hasher h;
  const auto u = [](auto x) { return static_cast<std::uint64_t>(x); };
  h.add(gpu ? "gpu" : "cpu").add(target).add(u(s.end)).add(s.inputs.size());
  for (const auto& in : s.inputs) h.add(u(in.var)).add(u(in.type)).add(in.shape);
  h.add(s.stages.size());
  for (const auto& st : s.stages) {
    h.add(u(st.kind)).add(u(st.var)).add(u(st.type)).add(u(st.uses_index));
    h.add(u(st.exclusive)).add(u(st.init)).add(u(st.arg));
    if (st.expr >= 0) h.add(d.graph, st.expr);
  }
  h.add(s.out_vars.size());
  for (std::size_t k = 0; k < s.out_vars.size(); ++k)
    h.add(u(s.out_vars[k])).add(u(s.out_types[k]));
  // Every kernel of a query takes all its captures and defines the helpers of all its roots.
  h.add(ir::structural_hash(d.graph));
  if (r) {
    h.add(u(r->kind)).add(u(r->acc)).add(u(r->init));
    if (r->op >= 0) h.add(d.graph, r->op);
  }
  return h.value();
}

namespace {

std::uint64_t shape_key(const query_desc& d, segment_end terminal, bool no_filter_at_end,
                        bool no_scan_at_end, const reduce_spec* r) {
  ir::hasher h;
  const auto u = [](auto x) { return static_cast<std::uint64_t>(x); };
  h.add(reinterpret_cast<std::uintptr_t>(d.dev.impl().get()));
  h.add(d.dev.impl()->generation.load(std::memory_order_relaxed));  // a reset re-plans
  h.add(ir::structural_hash(d.graph));
  h.add(u(terminal)).add(u(no_filter_at_end)).add(u(no_scan_at_end)).add(d.inputs.size());
  for (const auto& in : d.inputs) h.add(u(in.type));
  h.add(d.stages.size());
  // Node ids too: the segments name them (equal structure built another way just misses).
  for (const stage& st : d.stages) {
    h.add(u(st.kind)).add(u(st.var)).add(u(st.expr)).add(u(st.type)).add(u(st.uses_index));
    h.add(u(st.exclusive)).add(u(st.init)).add(u(st.arg)).add(u(st.descending));
    h.add(u(st.sorted)).add(u(st.drop_key)).add(st.aggregates.size()).add(u(st.left));
    for (std::size_t k = 0; k < st.out_vars.size(); ++k)
      h.add(u(st.out_vars[k])).add(u(st.out_types[k]));
    for (const aggregate& a : st.aggregates) {
      h.add(u(a.kind)).add(u(a.expr)).add(u(a.in_var)).add(u(a.in_type));
      h.add(u(a.out_var)).add(u(a.out_type));
    }
  }
  if (r) h.add(u(r->kind)).add(u(r->acc)).add(u(r->op)).add(u(r->init));
  return h.value();
}

// Keyed by device and shape in one hash (the device's address folded in).
struct plan_cache {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::shared_ptr<query_plan>> entries;
  std::list<std::uint64_t> order;  // oldest first
  static constexpr std::size_t max_entries = 1024;
};

}  // namespace

std::shared_ptr<query_plan> cached_plan(const query_desc& d, segment_end terminal,
                                        bool no_filter_at_end, bool no_scan_at_end,
                                        const reduce_spec* r, bool gpu, const char* target) {
  static auto* cache = new plan_cache;  // never destroyed: holds kernels (device objects)
  const std::uint64_t k = shape_key(d, terminal, no_filter_at_end, no_scan_at_end, r);
  {
    std::lock_guard lock(cache->mu);
    if (auto it = cache->entries.find(k); it != cache->entries.end()) return it->second;
  }
  auto p = std::make_shared<query_plan>();
  p->segments = plan(d, terminal, no_filter_at_end, no_scan_at_end);
  for (const segment& s : p->segments)
    p->keys.push_back(segment_key(s, d, s.end == segment_end::reduce ? r : nullptr, gpu, target));
  p->programs = std::make_unique<query_plan::program[]>(p->segments.size());
  std::lock_guard lock(cache->mu);
  auto [it, fresh] = cache->entries.emplace(k, p);
  if (fresh) {
    cache->order.push_back(k);
    if (cache->entries.size() > plan_cache::max_entries) {
      cache->entries.erase(cache->order.front());
      cache->order.pop_front();
    }
  }
  return it->second;
}

std::string describe(const segment& s, const ir::graph& g) {
  static constexpr const char* kinds[] = {"map",  "filter", "take",  "skip",  "enumerate",
                                          "scan", "sort",   "group", "top_k", "join"};
  static constexpr const char* ends[] = {"collect", "reduce", "scan"};
  std::string t = "kiln::query segment ending in ";
  t.append(ends[static_cast<int>(s.end)]).append(":");
  for (const stage& st : s.stages) {
    t.append(" ").append(kinds[static_cast<int>(st.kind)]);
    if (st.var >= 0) t.append(" v").append(std::to_string(st.var));
    t.append(" %").append(std::to_string(st.expr)).append(";");
  }
  return t.append("\n").append(ir::print(g));
}

}  // namespace kiln::detail::q
