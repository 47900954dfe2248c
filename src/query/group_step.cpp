// The group barrier of kiln::query (group_step.hpp), on the device primitive reduce_by_key.
#include "query/group_step.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "query/sort_step.hpp"
#include "runtime/runtime.hpp"
#include "sort/cub_radix_sort.hpp"
#include "sort/hash_group.hpp"
#include "sort/reduce_by_key.hpp"

namespace kiln::detail::q {

void group_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                     const group_step& g, bool sort_first) {
  static_assert(int(aggregate_kind::first) == int(run_op::first) &&
                int(aggregate_kind::count) == int(run_op::count));
  reduce_by_key_args a;
  a.key_type = types.at(0);
  a.n = r.count;
  a.keys = {r.outputs.at(0), 0};
  for (const group_step::column& c : g.columns) {
    run_value v;
    v.op = static_cast<run_op>(c.kind);
    v.out_type = c.out_type;
    if (c.input >= 0) {
      v.in = {r.outputs.at(static_cast<std::size_t>(c.input)), 0};
      v.type = types.at(static_cast<std::size_t>(c.input));
    } else {
      v.type = scalar_type::u64;  // count reads nothing
    }
    a.values.push_back(v);
  }
  reduce_by_key_result out;
  bool hashed = false;
  // The hash path (src/sort/hash_group.cpp) where it is exact and measured faster: on GPUs, for
  // aggregates whose result does not depend on the order rows arrive in (count, integer sums,
  // min, max, first); it gives up past its table's group count and the rows are sorted instead.
  // On CPU devices sorting is faster beyond ~100 groups (docs/query.md). Where the sort is
  // CUB's (CUDA), sorting 256M rows costs 7-13 ms, and the table's global atomics lose to it as
  // soon as value columns are aggregated (H200, 1M groups: 38.7 ms hashed, ~12 ms sorted): it
  // keeps the groupings that read keys only (distinct, count), which it reads once.
  // KILN_QUERY_GROUP=hash|sort overrides the device rule (tests, benchmarks).
  const char* force = std::getenv("KILN_QUERY_GROUP");
  const bool reads_values = std::any_of(g.columns.begin(), g.columns.end(),
                                        [](const group_step::column& c) { return c.input >= 0; });
  const bool by_device = q.get_device().info().type == device_type::gpu &&
                         (!reads_values || !cub_sort_unavailable(q.get_device()).empty());
  const bool want_hash = force && *force ? std::string(force) == "hash" : by_device;
  if (sort_first && want_hash && std::all_of(a.values.begin(), a.values.end(), hash_group_exact)) {
    hash_group_args h;
    h.key_type = a.key_type;
    h.n = a.n;
    h.keys = a.keys;
    h.values = a.values;
    hash_group_result hr = hash_group(q, h);
    if ((hashed = hr.done)) out = std::move(hr.groups);
  }
  if (!hashed) {
    if (sort_first) {
      sort_collected(q, r, types, false);
      a.keys = {r.outputs.at(0), 0};
      for (std::size_t k = 0; k < g.columns.size(); ++k)
        if (g.columns[k].input >= 0)
          a.values[k].in = {r.outputs.at(static_cast<std::size_t>(g.columns[k].input)), 0};
    }
    out = reduce_by_key(q, a);
  }
  r.outputs.clear();
  if (g.keep_key) r.outputs.push_back(std::move(out.keys));
  for (auto& m : out.values) r.outputs.push_back(std::move(m));
  r.count = out.runs;
}

}  // namespace kiln::detail::q
