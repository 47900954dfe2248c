// kiln::query pipelines: sources, stages and terminals joined with `|`. Nothing runs until a
// terminal; the whole chain then becomes one generated kernel (docs/query.md).
#pragma once

#include <concepts>
#include <cstdint>
#include <cstring>
#include <optional>
#include <ranges>
#include <span>
#include <tuple>
#include <type_traits>
#include <vector>

#include "kiln/automatic.hpp"
#include "kiln/buffer.hpp"
#include "kiln/error.hpp"
#include "kiln/query/desc.hpp"
#include "kiln/query/expr.hpp"

namespace kiln {

// A lazy sequence of elements of types Ts... (one type, or several after zip/enumerate).
template <class... Ts>
class query {
 public:
  using element = std::tuple<Ts...>;
  explicit query(detail::q::query_desc d) : desc_(std::move(d)) {}
  detail::q::query_desc& desc() & { return desc_; }
  detail::q::query_desc&& desc() && { return std::move(desc_); }
  const detail::q::query_desc& desc() const& { return desc_; }

 private:
  detail::q::query_desc desc_;
};

namespace detail::q {
struct stage_tag {};
struct terminal_tag {};
template <class X>
concept pipe_step = std::is_base_of_v<stage_tag, X> || std::is_base_of_v<terminal_tag, X>;

template <class X>
struct is_query : std::false_type {};
template <class... Ts>
struct is_query<kiln::query<Ts...>> : std::true_type {};

template <class B>
using as_view_t = decltype(detail::as_view(std::declval<const B&>()));

template <class V>
input device_input(const V& v) {
  using E = typename V::value_type;
  return input{v.memory(), v.offset(), nullptr, false, scalar_type_of<E>};
}

template <class B>
auto source(const B& b) {
  auto v = as_view(b);
  using T = typename decltype(v)::value_type;
  query_desc d;
  if (v.memory()) d.dev = v.get_device();
  d.n = v.size();
  d.inputs.push_back(device_input(v));
  d.vars.push_back(d.new_var());
  d.types.push_back(scalar_type_of<T>);
  return kiln::query<T>(std::move(d));
}

template <class T>
using sum_t =
    std::conditional_t<std::is_floating_point_v<T>, T,
                       std::conditional_t<std::is_unsigned_v<T> && !std::is_same_v<T, bool>,
                                          std::uint64_t, std::int64_t>>;

// Lowers e into the query's graph and records it as a root. `args` are the leaves the
// placeholders stand for: the element's values, or the operands of a combine.
template <class In, class E>
ir::node_id lower_root(query_desc& d, const E& e, std::vector<leaf_ref> args, bool* uses_index) {
  lower_ctx c{d.graph, std::move(args)};
  const ir::node_id r = lower<In>(e, c);
  d.graph.roots.push_back(r);
  if (uses_index) *uses_index = c.uses_index;
  return r;
}
inline std::vector<leaf_ref> element_leaves(const query_desc& d) {
  std::vector<leaf_ref> v;
  for (int x : d.vars) v.push_back({ir::op::component, x});
  return v;
}
// Lowers a scan's or a custom reduction's combine over (_1, _2) = (combine_a, combine_b),
// cast to Acc; `what` names the step in the error for a combine using _i or a captured value.
template <class Acc, class Op>
ir::node_id lower_combine(query_desc& d, const Op& op, const char* what) {
  const std::size_t ncap = d.graph.captures.size();
  lower_ctx c{d.graph, {{ir::op::combine_a, 0}, {ir::op::combine_b, 0}}};
  const ir::node_id r = c.template cast<Acc>(lower<std::tuple<Acc, Acc>>(op, c));
  if (c.uses_index || d.graph.captures.size() != ncap)
    throw invalid_argument(cat(what,
                               ": the combine operation may use only _1 and _2 (no _i, no "
                               "captured host values)"));
  d.graph.roots.push_back(r);
  return r;
}

// A plain sum's combine: a + b in the scanned type t.
inline ir::node_id lower_sum_combine(ir::graph& g, scalar_type t) {
  const ir::node_id a = g.add(ir::op::cast, t, {g.add(ir::op::combine_a, t)});
  const ir::node_id b = g.add(ir::op::cast, t, {g.add(ir::op::combine_b, t)});
  const ir::node_id r = g.add(ir::op::add, t, {a, b});
  g.roots.push_back(r);
  return r;
}

template <class Q>
using only_t = std::tuple_element_t<0, typename Q::element>;
template <class Q>
void require_single() {
  static_assert(std::tuple_size_v<typename Q::element> == 1,
                "kiln::query: this step needs a single-valued element; use transform to combine "
                "the components of a zip or enumerate first");
}
}  // namespace detail::q

// ---- sources ------------------------------------------------------------------------------
// zip(a, b, ...): elements are (a[i], b[i], ...), read as _1, _2, ... All inputs must have the
// same length and live on the same device.
template <class... B>
requires(detail::is_device_side<B>&&...) auto zip(const B&... bs) {
  static_assert(sizeof...(B) >= 1 && sizeof...(B) <= 8, "kiln::zip takes 1 to 8 inputs");
  detail::q::query_desc d;
  bool first = true;
  auto add = [&](const auto& b) {
    auto v = detail::as_view(b);
    using T = typename decltype(v)::value_type;
    if (!v.memory() && v.size() == 0)
      throw invalid_argument("kiln::zip: an input is empty (moved-from buffer?)");
    if (first) {
      d.dev = v.get_device();
      d.n = v.size();
    } else {
      if (v.size() != d.n)
        throw invalid_argument(detail::q::cat("kiln::zip: inputs differ in length (",
                                              std::to_string(d.n), " and ",
                                              std::to_string(v.size()), " elements)"));
      if (!(v.get_device() == d.dev))
        throw invalid_argument(detail::q::cat("kiln::zip: inputs live on different devices (",
                                              d.dev.id(), " and ", v.get_device().id(), ")"));
    }
    first = false;
    d.inputs.push_back(detail::q::device_input(v));
    d.vars.push_back(d.new_var());
    d.types.push_back(scalar_type_of<T>);
  };
  (add(bs), ...);
  return query<typename detail::q::as_view_t<B>::value_type...>(std::move(d));
}

// host_range | kiln::on(dev): a contiguous host range streamed to dev when the query runs.
// kiln::on(kiln::automatic) picks the CPU for small inputs and the best GPU for large ones
// (crossover from `kiln calibrate`). The range must outlive the query.
struct on_t {
  device dev{nullptr};
  bool automatic = false;
};
inline on_t on(const device& d) { return on_t{d, false}; }
inline on_t on(automatic_t) { return on_t{device{nullptr}, true}; }

template <std::ranges::contiguous_range R>
requires(!detail::is_device_side<R> && scalar<std::ranges::range_value_t<R>>) auto operator|(
    const R& r, const on_t& o) {
  using T = std::remove_cv_t<std::ranges::range_value_t<R>>;
  static_assert(!std::is_same_v<T, bool> || !std::is_same_v<R, std::vector<bool>>,
                "kiln::on: std::vector<bool> is not contiguous");
  detail::q::query_desc d;
  d.dev = o.dev;
  d.where = o.automatic ? detail::q::placement::automatic : detail::q::placement::fixed;
  d.n = std::ranges::size(r);
  d.inputs.push_back(detail::q::input{nullptr, 0, std::ranges::data(r), true, scalar_type_of<T>});
  d.vars.push_back(d.new_var());
  d.types.push_back(scalar_type_of<T>);
  return query<T>(std::move(d));
}

// Any buffer or view starts a query when piped into a step.
template <class B, detail::q::pipe_step S>
requires detail::is_device_side<B>
auto operator|(const B& b, const S& s) { return detail::q::source(b) | s; }
template <class... Ts, detail::q::pipe_step S>
auto operator|(query<Ts...> q, const S& s) {
  return s.apply(std::move(q));
}

// ---- stages -------------------------------------------------------------------------------
namespace detail::q {
template <class E>
struct transform_t : stage_tag {
  E e;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    using R = type_t<E, std::tuple<Ts...>>;
    query_desc& d = q.desc();
    bool uses_index = false;
    const ir::node_id x = lower_root<std::tuple<Ts...>>(d, e, element_leaves(d), &uses_index);
    stage s = make_stage(stage_kind::map, d.new_var(), x, scalar_type_of<R>);
    s.uses_index = uses_index;
    d.vars = {s.var};
    d.types = {s.type};
    d.stages.push_back(std::move(s));
    return kiln::query<R>(std::move(d));
  }
};
template <class E>
struct filter_t : stage_tag {
  E e;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    static_assert(std::is_convertible_v<type_t<E, std::tuple<Ts...>>, bool>,
                  "kiln::filter: the predicate must give a value convertible to bool");
    query_desc& d = q.desc();
    bool uses_index = false;
    const ir::node_id x = lower_root<std::tuple<Ts...>>(d, e, element_leaves(d), &uses_index);
    stage s = make_stage(stage_kind::filter, -1, x, scalar_type::boolean);
    s.uses_index = uses_index;
    d.stages.push_back(std::move(s));
    return q;
  }
};
struct slice_t : stage_tag {
  stage_kind kind;
  std::uint64_t count;
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    stage s = make_stage(kind, -1, -1, scalar_type::u64, count);
    q.desc().stages.push_back(std::move(s));
    return q;
  }
};
struct enumerate_t : stage_tag {
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    query_desc& d = q.desc();
    const ir::node_id x = lower_root<std::tuple<Ts...>>(d, index_leaf{}, {}, nullptr);
    stage s = make_stage(stage_kind::enumerate, d.new_var(), x, scalar_type::i64);
    s.uses_index = true;
    d.vars.insert(d.vars.begin(), s.var);
    d.types.insert(d.types.begin(), scalar_type::i64);
    d.stages.push_back(std::move(s));
    return kiln::query<std::int64_t, Ts...>(std::move(d));
  }
};
// Scans: Op is void for a sum. Acc is the scanned type.
template <class Op, class Init>
struct scan_t : stage_tag {
  Op op;
  std::conditional_t<std::is_void_v<Init>, std::nullptr_t, Init> init{};  // exclusive scans
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    using Q = kiln::query<Ts...>;
    require_single<Q>();
    using T = only_t<Q>;
    using Acc =
        std::conditional_t<std::is_void_v<Init>,
                           std::conditional_t<std::is_same_v<Op, void*>, sum_t<T>, T>, Init>;
    query_desc& d = q.desc();
    ir::node_id x;
    if constexpr (std::is_same_v<Op, void*>)
      x = lower_sum_combine(d.graph, scalar_type_of<Acc>);
    else
      x = lower_combine<Acc>(d, op, "kiln::inclusive_scan/exclusive_scan");
    stage s = make_stage(stage_kind::scan, d.new_var(), x, scalar_type_of<Acc>);
    s.arg = d.vars[0];
    if constexpr (!std::is_void_v<Init>) {
      s.exclusive = true;
      s.init = d.graph.new_capture(static_cast<Acc>(init));
    }
    d.vars = {s.var};
    d.types = {s.type};
    d.stages.push_back(std::move(s));
    return kiln::query<Acc>(std::move(d));
  }
};
}  // namespace detail::q

template <class E>
auto transform(const E& e) {
  return detail::q::transform_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(e)};
}
template <class E>
auto filter(const E& e) {
  return detail::q::filter_t<detail::q::expr_of<E>>{{}, detail::q::as_expr(e)};
}
inline auto take(std::uint64_t n) { return detail::q::slice_t{{}, detail::q::stage_kind::take, n}; }
inline auto skip(std::uint64_t n) { return detail::q::slice_t{{}, detail::q::stage_kind::skip, n}; }
// Prepends the element's position (int64_t) as component _1.
inline auto enumerate() { return detail::q::enumerate_t{}; }
// Running sums (in sum's type: 64-bit for integers), or running op(_1, _2) in the element type.
inline auto inclusive_scan() { return detail::q::scan_t<void*, void>{}; }
template <detail::q::expression Op>
auto inclusive_scan(const Op& op) {
  return detail::q::scan_t<Op, void>{{}, op, nullptr};
}
// Exclusive scans start from init; the scanned type is init's type.
template <scalar I>
auto exclusive_scan(I init) {
  return detail::q::scan_t<void*, I>{{}, nullptr, init};
}
template <scalar I, detail::q::expression Op>
auto exclusive_scan(I init, const Op& op) {
  return detail::q::scan_t<Op, I>{{}, op, init};
}

}  // namespace kiln
