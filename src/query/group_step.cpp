// The group barrier of kiln::query (group_step.hpp), on the device primitive reduce_by_key.
#include "query/group_step.hpp"

#include "runtime/runtime.hpp"
#include "sort/reduce_by_key.hpp"

namespace kiln::detail::q {

void group_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                     const group_step& g) {
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
  reduce_by_key_result out = reduce_by_key(q, a);
  r.outputs.clear();
  if (g.keep_key) r.outputs.push_back(std::move(out.keys));
  for (auto& m : out.values) r.outputs.push_back(std::move(m));
  r.count = out.runs;
}

}  // namespace kiln::detail::q
