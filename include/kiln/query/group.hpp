// Grouping stages of kiln::query: group_by(key) | aggregate(...), distinct, distinct_by,
// reduce_by_key, unique_by_key, and top_k. Each is a barrier like sort (sort.hpp): the stages
// before it run as one kernel and write the key and the aggregated values, the device sorts them
// by the key (group_by, distinct) and reduces each run of equal keys to one element. The number
// of groups is read back on the host (one wait); the stages after it read the groups.
//
//   using namespace kiln::placeholders;
//   // (key, sum, count) per distinct key, ascending by key:
//   std::vector<std::tuple<int, float, std::uint64_t>> g =
//       kiln::zip(keys, vals) | kiln::group_by(_1)
//       | kiln::aggregate(kiln::agg::sum(_2), kiln::agg::count()) | kiln::to_vector();
//   auto u = xs | kiln::distinct() | kiln::to_vector();           // sorted unique values
//   auto top = xs | kiln::top_k(10) | kiln::to_vector();          // the 10 largest, descending
//   // consecutive runs only (CUB's ReduceByKey / UniqueByKey), no sort:
//   auto runs = kiln::zip(keys, vals) | kiln::reduce_by_key(_1, kiln::agg::max(_2))
//               | kiln::to_vector();
//   auto firsts = kiln::zip(keys, vals) | kiln::unique_by_key(_1) | kiln::to_vector();
//
// Keys are equal when they compare == (so -0.0 and +0.0 are one key) or are both NaN (NaNs
// form the last group). Aggregates: sum (in sum()'s type: 64-bit for integers, the float type
// for floats), min and max (NaN propagates), mean (float for float, else double), count
// (uint64_t), first (the first element of the group in input order).
#pragma once

#include <tuple>

#include "kiln/query/pipeline.hpp"

namespace kiln {

namespace detail::q {

// One aggregate before lowering: its kind and the expression it aggregates (none for count).
template <aggregate_kind K, class E>
struct agg_t {
  E e;
};
struct no_expr {};

template <aggregate_kind K, class T>
struct agg_result {
  using type = T;  // min, max, first
};
template <class T>
struct agg_result<aggregate_kind::sum, T> {
  using type = sum_t<T>;
};
template <class T>
struct agg_result<aggregate_kind::mean, T> {
  using type = std::conditional_t<std::is_same_v<T, float>, float, double>;
};
template <class T>
struct agg_result<aggregate_kind::count, T> {
  using type = std::uint64_t;
};

template <class E, class In>
struct agg_input {
  using type = type_t<E, In>;
};
template <class In>
struct agg_input<no_expr, In> {
  using type = std::uint64_t;
};
template <class A, class In>
struct agg_type;
template <aggregate_kind K, class E, class In>
struct agg_type<agg_t<K, E>, In> {
  using input = typename agg_input<E, In>::type;
  static_assert(scalar<input>, "kiln::agg: the aggregated value must be a scalar");
  static_assert(K == aggregate_kind::first || K == aggregate_kind::count ||
                    !std::is_same_v<input, bool> || K == aggregate_kind::sum,
                "kiln::agg: min, max and mean of bool are not defined; convert it first");
  using type = typename agg_result<K, input>::type;
};
template <class A, class In>
using agg_type_t = typename agg_type<A, In>::type;

// Lowers one aggregate against the element's leaves and appends it to the group stage s.
template <class In, aggregate_kind K, class E>
void add_aggregate(query_desc& d, const agg_t<K, E>& a, const std::vector<leaf_ref>& leaves,
                   stage& s) {
  aggregate g;
  g.kind = K;
  g.out_type = scalar_type_of<agg_type_t<agg_t<K, E>, In>>;
  if constexpr (!std::is_same_v<E, no_expr>) {
    bool uses_index = false;
    g.expr = lower_root<In>(d, a.e, leaves, &uses_index);
    s.uses_index |= uses_index;
    g.in_var = d.new_var();
    g.in_type = scalar_type_of<type_t<E, In>>;
  } else {
    g.in_type = scalar_type::u64;
  }
  g.out_var = d.new_var();
  s.aggregates.push_back(g);
}

// The element after a group stage: the key (unless dropped), then the aggregates' components.
template <class... Ts>
kiln::query<Ts...> finish_group(query_desc& d, stage s) {
  d.vars.clear();
  d.types.clear();
  if (!s.drop_key) {
    d.vars.push_back(s.var);
    d.types.push_back(s.type);
  }
  for (const aggregate& a : s.aggregates) {
    d.vars.push_back(a.out_var);
    d.types.push_back(a.out_type);
  }
  d.stages.push_back(std::move(s));
  return kiln::query<Ts...>(std::move(d));
}

// A group stage keyed by e with the aggregates aggs: (key, aggregates...).
template <class E, class... A, class... Ts>
auto group_stage(kiln::query<Ts...> q, const E& e, bool sorted, const A&... aggs) {
  using In = std::tuple<Ts...>;
  using K = type_t<E, In>;
  static_assert(scalar<K>, "kiln::group_by/reduce_by_key: the key must be a scalar");
  query_desc& d = q.desc();
  const std::vector<leaf_ref> leaves = element_leaves(d);
  bool uses_index = false;
  const ir::node_id x = lower_root<In>(d, e, leaves, &uses_index);
  stage s = make_stage(stage_kind::group, d.new_var(), x, scalar_type_of<K>);
  s.uses_index = uses_index;
  s.sorted = sorted;
  (add_aggregate<In>(d, aggs, leaves, s), ...);
  return finish_group<K, agg_type_t<A, In>...>(d, std::move(s));
}

// A group stage that keeps the first element of each group (every component), keyed by e.
template <class E, class... Ts>
auto first_stage(kiln::query<Ts...> q, const E& e, bool sorted) {
  using In = std::tuple<Ts...>;
  static_assert(scalar<type_t<E, In>>, "kiln::unique_by_key/distinct_by: the key must be a scalar");
  query_desc& d = q.desc();
  const std::vector<int> element = d.vars;
  const std::vector<scalar_type> types = d.types;
  bool uses_index = false;
  const ir::node_id x = lower_root<In>(d, e, element_leaves(d), &uses_index);
  stage s = make_stage(stage_kind::group, d.new_var(), x, scalar_type_of<type_t<E, In>>);
  s.uses_index = uses_index;
  s.sorted = sorted;
  s.drop_key = true;
  for (std::size_t k = 0; k < element.size(); ++k) {
    aggregate a;
    a.kind = aggregate_kind::first;
    a.in_var = a.out_var = element[k];
    a.in_type = a.out_type = types[k];
    s.aggregates.push_back(a);
  }
  return finish_group<Ts...>(d, std::move(s));
}

template <class... A>
struct aggregate_t {
  std::tuple<A...> aggs;
};

template <class E>
struct group_by_t : stage_tag {
  E e;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const;
};
template <class E, class... A>
struct reduce_by_key_t : stage_tag {
  E e;
  std::tuple<A...> aggs;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    return std::apply([&](const A&... a) { return group_stage(std::move(q), e, false, a...); },
                      aggs);
  }
};
template <class E>
struct first_by_t : stage_tag {
  E e;
  bool sorted = false;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    return first_stage(std::move(q), e, sorted);
  }
};
struct distinct_t : stage_tag {
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    require_single<kiln::query<Ts...>>();
    query_desc& d = q.desc();
    stage s = make_stage(stage_kind::group, d.vars[0], -1, d.types[0]);
    s.sorted = true;
    d.stages.push_back(std::move(s));
    return q;
  }
};
struct top_k_t : stage_tag {
  std::uint64_t k;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    require_single<kiln::query<Ts...>>();
    q.desc().stages.push_back(make_stage(stage_kind::top_k, -1, -1, q.desc().types[0], k));
    return q;
  }
};
}  // namespace detail::q

// query | group_by(key): waits for | aggregate(...), which makes the groups.
template <class E, class... Ts>
class grouped_query {
 public:
  grouped_query(query<Ts...> q, E key) : q_(std::move(q)), key_(std::move(key)) {}
  template <class... A>
  auto operator|(const detail::q::aggregate_t<A...>& a) && {
    return std::apply(
        [&](const A&... x) { return detail::q::group_stage(std::move(q_), key_, true, x...); },
        a.aggs);
  }

 private:
  query<Ts...> q_;
  E key_;
};

template <class E>
template <class... Ts>
auto detail::q::group_by_t<E>::apply(kiln::query<Ts...> q) const {
  return grouped_query<E, Ts...>(std::move(q), e);
}

namespace agg {
template <class E>
auto sum(const E& e) {
  return detail::q::agg_t<detail::q::aggregate_kind::sum, detail::q::expr_of<E>>{
      detail::q::as_expr(e)};
}
template <class E>
auto min(const E& e) {
  return detail::q::agg_t<detail::q::aggregate_kind::min, detail::q::expr_of<E>>{
      detail::q::as_expr(e)};
}
template <class E>
auto max(const E& e) {
  return detail::q::agg_t<detail::q::aggregate_kind::max, detail::q::expr_of<E>>{
      detail::q::as_expr(e)};
}
template <class E>
auto mean(const E& e) {
  return detail::q::agg_t<detail::q::aggregate_kind::mean, detail::q::expr_of<E>>{
      detail::q::as_expr(e)};
}
template <class E>
auto first(const E& e) {
  return detail::q::agg_t<detail::q::aggregate_kind::first, detail::q::expr_of<E>>{
      detail::q::as_expr(e)};
}
inline auto count() {
  return detail::q::agg_t<detail::q::aggregate_kind::count, detail::q::no_expr>{{}};
}
}  // namespace agg

// Groups by key, ascending; `| aggregate(...)` must follow.
template <class E>
auto group_by(const E& key) {
  return detail::q::group_by_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(key)};
}
template <class... A>
auto aggregate(const A&... aggs) {
  static_assert(sizeof...(A) >= 1, "kiln::aggregate: give at least one kiln::agg::");
  return detail::q::aggregate_t<A...>{std::tuple<A...>(aggs...)};
}
// Sorted distinct values of a single-valued query.
inline auto distinct() { return detail::q::distinct_t{}; }
// The first element (in input order) of each distinct key, ascending by key; every component.
template <class E>
auto distinct_by(const E& key) {
  return detail::q::first_by_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(key), true};
}
// Consecutive runs of equal keys, as they come (no sort): (key, aggregates...) per run.
template <class E, class... A>
auto reduce_by_key(const E& key, const A&... aggs) {
  static_assert(sizeof...(A) >= 1, "kiln::reduce_by_key: give at least one kiln::agg::");
  return detail::q::reduce_by_key_t<detail::q::expr_of<E>, A...>{
      {}, detail::q::as_expr(key), std::tuple<A...>(aggs...)};
}
// The first element of each consecutive run of equal keys (every component).
template <class E>
auto unique_by_key(const E& key) {
  return detail::q::first_by_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(key), false};
}
// The k largest elements of a single-valued query, in descending order (NaN last, so NaNs are
// taken only after every number); fewer than k elements is kiln::invalid_argument.
inline auto top_k(std::uint64_t k) { return detail::q::top_k_t{{}, k}; }

}  // namespace kiln
