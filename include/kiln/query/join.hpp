// Joins of kiln::query: every element paired with the other query's elements of equal key
// (an equi-join), inner or left. The element after it has this side's components, then the
// other's, then (left_join) a bool that says whether a match was found; an unmatched element's
// other components are zero. A join is a barrier (as sort is): both sides run as their own
// kernels first, the other side is sorted by its key and searched (src/sort/join.cpp), and the
// pairs' count is read back on the host (one wait).
//
//   using namespace kiln::placeholders;
//   // orders (customer, amount) joined with customers (id, region): (customer, amount, id, region)
//   auto rows = kiln::zip(order_customer, amount)
//               | kiln::join(kiln::zip(customer_id, region), _1, _1)
//               | kiln::transform(_2 * 2.f) | kiln::to_vector();
//   auto all = kiln::zip(order_customer, amount)
//              | kiln::left_join(kiln::zip(customer_id, region), _1, _1) | kiln::to_vector();
//   // std::vector<std::tuple<int, float, int, int, bool>>
//
// Order: this side's elements in their order, each with its matches in the other side's order
// (the nested loop's order). Keys match by == (floats: -0.0 matches +0.0, NaN matches nothing)
// and must have the same type. The other side is the one that is sorted: make it the smaller.
#pragma once

#include <memory>

#include "kiln/query/pipeline.hpp"

namespace kiln {
namespace detail::q {

template <bool Left, class O, class EK, class OK>
struct join_t : stage_tag {
  O other;  // a kiln::query
  EK key;
  OK other_key;

  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    return apply_to(std::move(q), other);
  }

 private:
  template <class... Ts, class... Us>
  auto apply_to(kiln::query<Ts...> q, kiln::query<Us...> o) const {
    using K = type_t<EK, std::tuple<Ts...>>;
    using KO = type_t<OK, std::tuple<Us...>>;
    static_assert(scalar<K> && scalar<KO>, "kiln::join: the keys must be scalars");
    static_assert(std::is_same_v<K, KO>,
                  "kiln::join: the two keys must have the same type; convert one with a cast in "
                  "its key expression");
    query_desc& d = q.desc();
    if (o.desc().dev.impl() && d.dev.impl() && !(o.desc().dev == d.dev))
      throw invalid_argument(cat("kiln::join: the sides live on different devices (", d.dev.id(),
                                 " and ", o.desc().dev.id(), ")"));
    // The other side ends in its key, prepended to its element.
    auto od = std::make_shared<query_desc>(std::move(o).desc());
    bool other_index = false;
    const ir::node_id ox =
        lower_root<std::tuple<Us...>>(*od, other_key, element_leaves(*od), &other_index);
    stage ok = make_stage(stage_kind::enumerate, od->new_var(), ox, scalar_type_of<K>);
    ok.uses_index = other_index;
    od->vars.insert(od->vars.begin(), ok.var);
    od->types.insert(od->types.begin(), ok.type);
    od->stages.push_back(std::move(ok));

    bool uses_index = false;
    const ir::node_id x = lower_root<std::tuple<Ts...>>(d, key, element_leaves(d), &uses_index);
    stage s = make_stage(stage_kind::join, d.new_var(), x, scalar_type_of<K>);
    s.uses_index = uses_index;
    s.left = Left;
    s.out_vars = d.vars;
    s.out_types = d.types;
    for (std::size_t k = 1; k < od->types.size(); ++k) {
      s.out_vars.push_back(d.new_var());
      s.out_types.push_back(od->types[k]);
    }
    if (Left) {
      s.out_vars.push_back(d.new_var());
      s.out_types.push_back(scalar_type::boolean);
    }
    s.other = std::move(od);
    d.vars = s.out_vars;
    d.types = s.out_types;
    d.stages.push_back(std::move(s));
    if constexpr (Left)
      return kiln::query<Ts..., Us..., bool>(std::move(d));
    else
      return kiln::query<Ts..., Us...>(std::move(d));
  }
};

template <class O>
auto as_query(const O& o) {
  if constexpr (is_query<O>::value)
    return o;
  else
    return source(o);  // a buffer or view
}
}  // namespace detail::q

// this | join(other, key, other_key): inner equi-join; `other` is a query or a buffer.
template <class O, class EK, class OK>
auto join(const O& other, const EK& key, const OK& other_key) {
  using Q = decltype(detail::q::as_query(other));
  return detail::q::join_t<false, Q, detail::q::expr_of<EK>, detail::q::expr_of<OK>>{
      {}, detail::q::as_query(other), detail::q::as_expr(key), detail::q::as_expr(other_key)};
}
// Left join: every element of this side; unmatched ones get zeros and `matched` false.
template <class O, class EK, class OK>
auto left_join(const O& other, const EK& key, const OK& other_key) {
  using Q = decltype(detail::q::as_query(other));
  return detail::q::join_t<true, Q, detail::q::expr_of<EK>, detail::q::expr_of<OK>>{
      {}, detail::q::as_query(other), detail::q::as_expr(key), detail::q::as_expr(other_key)};
}

}  // namespace kiln
