// Symbolic element expressions for kiln::query: placeholders (_1, _2, ...), operators, math,
// select, cast and the element index. An expression is a small C++ type; applying it to a
// query's element types gives its result type by C++'s own promotion rules, and lowering it
// adds typed nodes to the query's IR graph (kiln/ir/node.hpp), which the library renders into
// the generated kernel. Host scalars in an expression are captured as kernel parameters, so a
// new value never recompiles.
//
//   using namespace kiln::placeholders;
//   auto e = kiln::select(_1 > 0.f, kiln::sqrt(_1), -_1) * scale;   // scale: a host float
//   auto i = kiln::cast<std::int64_t>(_2) + _i;                      // _i: the element index
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/ir/node.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln {
namespace detail::q {

// Joins pieces by appending (GCC 12 warns falsely, -Wrestrict, on "literal" + std::string&&
// once inlined: bug 105329; appending avoids that path).
template <class... P>
std::string cat(const P&... parts) {
  std::string s;
  (s.append(std::string_view(parts)), ...);
  return s;
}

// What lowering needs: the graph, and the leaf each placeholder stands for (a value of the
// element, or a combine operand).
struct leaf_ref {
  ir::op o = ir::op::component;
  std::int32_t slot = 0;
};
struct lower_ctx {
  ir::graph& g;
  std::vector<leaf_ref> args;
  bool uses_index = false;

  template <class T>
  ir::node_id cast(ir::node_id x) {
    return g.add(ir::op::cast, scalar_type_of<T>, {x});
  }
};

struct expr_base {};
template <class E>
concept expression = std::is_base_of_v<expr_base, std::remove_cvref_t<E>>;

template <class In, class E>
ir::node_id lower(const E& e, lower_ctx& c) {
  return e.template lower<In>(c);
}

// _1, _2, ...: component I of the element.
template <std::size_t I>
struct arg : expr_base {
  template <class In>
  static constexpr auto type_fn() {
    static_assert(I < std::tuple_size_v<In>,
                  "kiln::query: a placeholder names a component the element does not have "
                  "(_2 needs a zip of two inputs or an enumerate)");
    return std::tuple_element_t<I, In>{};
  }
  template <class In>
  using type = decltype(type_fn<In>());
  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    return c.g.add(c.args[I].o, scalar_type_of<type<In>>, {}, c.args[I].slot);
  }
};

// The element's position in the sequence (0-based), an int64_t.
struct index_leaf : expr_base {
  template <class In>
  using type = std::int64_t;
  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    c.uses_index = true;
    return c.g.add(ir::op::index, scalar_type::i64);
  }
};

// A host scalar captured by value: a kernel parameter of the generated kernel.
template <class T>
struct constant : expr_base {
  T value;
  explicit constant(T v) : value(v) {}
  template <class In>
  using type = T;
  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    return c.g.add_capture(value);
  }
};

template <class X>
auto as_expr(const X& x) {
  if constexpr (expression<X>)
    return x;
  else {
    static_assert(scalar<X>,
                  "kiln::query: expressions combine placeholders with scalars (bool, integers, "
                  "float, double)");
    return constant<X>(x);
  }
}
template <class X>
using expr_of = decltype(as_expr(std::declval<X>()));

template <class E, class In>
using type_t = typename E::template type<In>;

// ---- operators ----------------------------------------------------------------------------
// clang-format off
#define KILN_Q_BINOPS(X)                                                                  \
  X(add, +) X(sub, -) X(mul, *) X(div, /) X(mod, %)                                       \
  X(lt, <) X(le, <=) X(gt, >) X(ge, >=) X(eq, ==) X(ne, !=) X(land, &&) X(lor, ||)        \
  X(band, &) X(bor, |) X(bxor, ^) X(shl, <<) X(shr, >>)
// clang-format on

#define KILN_Q_OPTAG(name, sym)                        \
  struct op_##name {                                   \
    static constexpr ir::op id = ir::op::name;         \
    template <class A, class B>                        \
    static constexpr bool valid = requires(A a, B b) { \
      a sym b;                                         \
    };                                                 \
    template <class A, class B>                        \
    static auto result(A a, B b) -> decltype(a sym b); \
  };
KILN_Q_BINOPS(KILN_Q_OPTAG)
#undef KILN_Q_OPTAG

template <class Op, class A, class B>
struct binary : expr_base {
  A a;
  B b;
  binary(A x, B y) : a(std::move(x)), b(std::move(y)) {}
  template <class In>
  static constexpr auto type_fn() {
    using TA = type_t<A, In>;
    using TB = type_t<B, In>;
    if constexpr (!Op::template valid<TA, TB>) {
      static_assert(Op::template valid<TA, TB>,
                    "kiln::query: this operator does not apply to these element types (for "
                    "example %, &, |, ^, << and >> need integer operands)");
      return 0;
    } else {
      return decltype(Op::result(std::declval<TA>(), std::declval<TB>())){};
    }
  }
  template <class In>
  using type = decltype(type_fn<In>());

  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    using TA = type_t<A, In>;
    using TB = type_t<B, In>;
    constexpr scalar_type r = scalar_type_of<type<In>>;
    const ir::node_id x = q::lower<In>(a, c), y = q::lower<In>(b, c);
    constexpr ir::op_class k = ir::info(Op::id).cls;
    if constexpr (k == ir::op_class::logical) {
      return c.g.add(Op::id, r, {x, y});
    } else if constexpr (k == ir::op_class::shift) {
      return c.g.add(Op::id, r, {c.template cast<decltype(+std::declval<TA>())>(x), y});
    } else {
      // Operands converted to their common type first, so every backend computes in the type
      // C++ would (int8_t + int8_t is an int; int + unsigned is unsigned).
      using C = decltype(std::declval<TA>() + std::declval<TB>());
      const ir::node_id cx = c.template cast<C>(x);
      return c.g.add(Op::id, r, {cx, c.template cast<C>(y)});
    }
  }
};

template <ir::op U, class A>
struct unary : expr_base {
  A a;
  explicit unary(A x) : a(std::move(x)) {}
  template <class In>
  static constexpr auto type_fn() {
    using TA = type_t<A, In>;
    if constexpr (U == ir::op::lnot)
      return bool{};
    else if constexpr (U == ir::op::bnot) {
      static_assert(std::is_integral_v<TA>, "kiln::query: ~ needs an integer operand");
      return decltype(~std::declval<TA>()){};
    } else
      return decltype(-std::declval<TA>()){};
  }
  template <class In>
  using type = decltype(type_fn<In>());
  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    using R = type<In>;
    const ir::node_id x = q::lower<In>(a, c);
    if constexpr (U == ir::op::lnot) return c.g.add(U, scalar_type::boolean, {x});
    return c.g.add(U, scalar_type_of<R>, {c.template cast<R>(x)});
  }
};

template <class C, class A, class B>
struct select_node : expr_base {
  C c;
  A a;
  B b;
  select_node(C x, A y, B z) : c(std::move(x)), a(std::move(y)), b(std::move(z)) {}
  template <class In>
  using type = std::common_type_t<type_t<A, In>, type_t<B, In>>;
  template <class In>
  ir::node_id lower(lower_ctx& ctx) const {
    using R = type<In>;
    // Last operand first: the order in which kernels have always numbered their captures.
    const ir::node_id z = ctx.template cast<R>(q::lower<In>(b, ctx));
    const ir::node_id y = ctx.template cast<R>(q::lower<In>(a, ctx));
    return ctx.g.add(ir::op::select, scalar_type_of<R>, {q::lower<In>(c, ctx), y, z});
  }
};

template <class T, class A>
struct cast_node : expr_base {
  A a;
  explicit cast_node(A x) : a(std::move(x)) {}
  template <class In>
  using type = T;
  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    return c.template cast<T>(q::lower<In>(a, c));
  }
};

// ---- math ---------------------------------------------------------------------------------
// Result types follow <cmath>: float stays float, integers compute in double.
template <class... T>
using math_t = std::conditional_t<(std::is_same_v<T, float> && ...), float, double>;

enum class fn_kind { real, abs, minmax, clamp };
// clang-format off
#define KILN_Q_FUNCS(X)                                                                   \
  X(sqrt, real, 1) X(rsqrt, real, 1) X(exp, real, 1) X(log, real, 1) X(sin, real, 1)      \
  X(cos, real, 1) X(tanh, real, 1) X(floor, real, 1) X(ceil, real, 1) X(pow, real, 2)     \
  X(fma, real, 3) X(abs, abs, 1) X(min, minmax, 2) X(max, minmax, 2) X(clamp, clamp, 3)
// clang-format on

template <class Fn, class... A>
struct call : expr_base {
  std::tuple<A...> args;
  explicit call(A... a) : args(std::move(a)...) {}
  template <class In>
  static constexpr auto type_fn() {
    if constexpr (Fn::kind == fn_kind::real)
      return math_t<type_t<A, In>...>{};
    else if constexpr (Fn::kind == fn_kind::abs)
      return decltype(+std::declval<std::tuple_element_t<0, std::tuple<type_t<A, In>...>>>()){};
    else
      return std::common_type_t<decltype(+std::declval<type_t<A, In>>())...>{};
  }
  template <class In>
  using type = decltype(type_fn<In>());
  template <class In>
  ir::node_id lower(lower_ctx& c) const {
    using R = type<In>;
    ir::node n{Fn::id, scalar_type_of<R>, {-1, -1, -1}, 0};
    int k = 0;
    std::apply(
        [&](const auto&... a) {
          ((n.operands[k++] = c.template cast<R>(q::lower<In>(a, c))), ...);
        },
        args);
    return c.g.add(n);
  }
};

#define KILN_Q_FNTAG(fname, k, arity)           \
  struct fn_##fname {                           \
    static constexpr ir::op id = ir::op::fname; \
    static constexpr fn_kind kind = fn_kind::k; \
  };
KILN_Q_FUNCS(KILN_Q_FNTAG)
#undef KILN_Q_FNTAG

template <class A, class B>
concept one_expr = (expression<A> || expression<B>);

// Operators live here so that argument-dependent lookup finds them for any expression.
#define KILN_Q_DEFINE_OP(name, sym)                                           \
  template <class A, class B>                                                 \
  requires one_expr<A, B>                                                     \
  auto operator sym(const A& a, const B& b) {                                 \
    return binary<op_##name, expr_of<A>, expr_of<B>>(as_expr(a), as_expr(b)); \
  }
KILN_Q_BINOPS(KILN_Q_DEFINE_OP)
#undef KILN_Q_DEFINE_OP

template <expression A>
auto operator-(const A& a) {
  return unary<ir::op::neg, A>(a);
}
template <expression A>
auto operator!(const A& a) {
  return unary<ir::op::lnot, A>(a);
}
template <expression A>
auto operator~(const A& a) {
  return unary<ir::op::bnot, A>(a);
}

}  // namespace detail::q

// ---- public surface -----------------------------------------------------------------------
namespace placeholders {
inline constexpr detail::q::arg<0> _1{};
inline constexpr detail::q::arg<1> _2{};
inline constexpr detail::q::arg<2> _3{};
inline constexpr detail::q::arg<3> _4{};
inline constexpr detail::q::index_leaf _i{};  // the element's position in the sequence
}  // namespace placeholders

// cond ? a : b, element-wise.
template <class C, class A, class B>
auto select(const C& c, const A& a, const B& b) {
  return detail::q::select_node<detail::q::expr_of<C>, detail::q::expr_of<A>,
                                detail::q::expr_of<B>>(detail::q::as_expr(c), detail::q::as_expr(a),
                                                       detail::q::as_expr(b));
}

// Conversion to scalar type T, as static_cast<T>.
template <scalar T, class A>
auto cast(const A& a) {
  return detail::q::cast_node<T, detail::q::expr_of<A>>(detail::q::as_expr(a));
}

#define KILN_Q_DEFINE_FN(fname, k, arity) KILN_Q_DEFINE_FN_##arity(fname)
#define KILN_Q_DEFINE_FN_1(fname)                        \
  template <detail::q::expression A>                     \
  auto fname(const A& a) {                               \
    return detail::q::call<detail::q::fn_##fname, A>(a); \
  }
#define KILN_Q_DEFINE_FN_2(fname)                                                                \
  template <class A, class B>                                                                    \
  requires detail::q::one_expr<A, B>                                                             \
  auto fname(const A& a, const B& b) {                                                           \
    return detail::q::call<detail::q::fn_##fname, detail::q::expr_of<A>, detail::q::expr_of<B>>( \
        detail::q::as_expr(a), detail::q::as_expr(b));                                           \
  }
#define KILN_Q_DEFINE_FN_3(fname)                                                                 \
  template <class A, class B, class C>                                                            \
  requires(detail::q::expression<A> || detail::q::expression<B> || detail::q::expression<C>) auto \
  fname(const A& a, const B& b, const C& c) {                                                     \
    return detail::q::call<detail::q::fn_##fname, detail::q::expr_of<A>, detail::q::expr_of<B>,   \
                           detail::q::expr_of<C>>(detail::q::as_expr(a), detail::q::as_expr(b),   \
                                                  detail::q::as_expr(c));                         \
  }
KILN_Q_FUNCS(KILN_Q_DEFINE_FN)
#undef KILN_Q_DEFINE_FN
#undef KILN_Q_DEFINE_FN_1
#undef KILN_Q_DEFINE_FN_2
#undef KILN_Q_DEFINE_FN_3

}  // namespace kiln
