// Ordering stages of kiln::query: sort (the element itself) and order_by (a key computed from
// the element), ascending or descending, stable (equal keys keep their order, as
// std::stable_sort). A sort is a barrier: the stages before it run as one kernel and write
// their elements, a device radix sort reorders them (src/sort/), and the stages after it read
// the sorted copy; nothing runs before the terminal. After a filter, the survivors' count is
// read back before the sort (a host wait).
//
//   auto v = xs | kiln::filter(_1 > 0.f) | kiln::sort() | kiln::to_vector();        // ascending
//   auto top = xs | kiln::sort(kiln::descending) | kiln::take(10) | kiln::to_vector();
//   auto by = kiln::zip(keys, vals) | kiln::order_by(_1) | kiln::transform(_2)
//             | kiln::to_vector();                                   // vals in keys' order
//   auto far = kiln::zip(xs, ys) | kiln::order_by_descending(_1 * _1 + _2 * _2) | ...;
//
// Float keys order as -inf < ... < -0.0 < +0.0 < ... < +inf, with every NaN last in both
// directions.
#pragma once

#include "kiln/query/pipeline.hpp"

namespace kiln {

struct descending_t {};
inline constexpr descending_t descending{};

namespace detail::q {
struct sort_t : stage_tag {
  bool desc = false;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    require_single<kiln::query<Ts...>>();
    stage s = make_stage(stage_kind::sort, -1, -1, scalar_type_of<only_t<kiln::query<Ts...>>>);
    s.descending = desc;
    q.desc().stages.push_back(std::move(s));
    return q;
  }
};
template <class E>
struct order_by_t : stage_tag {
  E e;
  bool desc = false;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    using K = type_t<E, std::tuple<Ts...>>;
    static_assert(scalar<K>, "kiln::order_by: the key must be a scalar (bool, integer, float)");
    query_desc& d = q.desc();
    bool uses_index = false;
    const ir::node_id x = lower_root<std::tuple<Ts...>>(d, e, element_leaves(d), &uses_index);
    stage s = make_stage(stage_kind::sort, d.new_var(), x, scalar_type_of<K>);
    s.uses_index = uses_index;
    s.descending = desc;
    d.stages.push_back(std::move(s));
    return q;
  }
};
}  // namespace detail::q

inline auto sort() { return detail::q::sort_t{{}, false}; }
inline auto sort(descending_t) { return detail::q::sort_t{{}, true}; }
template <class E>
auto order_by(const E& key) {
  return detail::q::order_by_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(key), false};
}
template <class E>
auto order_by_descending(const E& key) {
  return detail::q::order_by_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(key), true};
}

}  // namespace kiln
