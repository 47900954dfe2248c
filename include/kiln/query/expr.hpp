// Symbolic element expressions for kiln::query: placeholders (_1, _2, ...), operators, math,
// select, cast and the element index. An expression is a small C++ type; applying it to a
// query's element types gives its result type by C++'s own promotion rules, and rendering it
// gives a C expression for the generated kernel. Host scalars in an expression are captured as
// kernel parameters, so a new value never recompiles.
//
//   using namespace kiln::placeholders;
//   auto e = kiln::select(_1 > 0.f, kiln::sqrt(_1), -_1) * scale;   // scale: a host float
//   auto i = kiln::cast<std::int64_t>(_2) + _i;                      // _i: the element index
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

// What rendering an expression needs: the names of the element's components, the name of the
// element index, and places to record captured scalars and helper functions.
struct capture {
  scalar_type type;
  std::uint64_t bits = 0;
};
struct render_ctx {
  std::vector<std::string> args;  // C names of the current element's components
  std::string index = "kq_i";
  std::vector<capture>* captures = nullptr;
  std::vector<std::string>* helpers = nullptr;  // helper function names needed (kq_min_float)
  bool uses_index = false;

  std::string add_capture(scalar_type t, const void* v, std::size_t size) {
    capture c{t, 0};
    std::memcpy(&c.bits, v, size);
    captures->push_back(c);
    return cat("kq_c", std::to_string(captures->size() - 1));
  }
  std::string helper(const char* fn, scalar_type t) {
    std::string name = cat("kq_", fn, "_", type_name(t));
    for (const auto& h : *helpers)
      if (h == name) return name;
    helpers->push_back(name);
    return name;
  }
};

struct expr_base {};
template <class E>
concept expression = std::is_base_of_v<expr_base, std::remove_cvref_t<E>>;

template <class T>
std::string cast_to(const std::string& e) {
  return cat("((", type_name(scalar_type_of<T>), ")(", e, "))");
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
  std::string render(render_ctx& c) const { return c.args[I]; }
};

// The element's position in the sequence (0-based), an int64_t.
struct index_leaf : expr_base {
  template <class In>
  using type = std::int64_t;
  std::string render(render_ctx& c) const {
    c.uses_index = true;
    return cat("((int64_t)", c.index, ")");
  }
};

// A host scalar captured by value: a kernel parameter of the generated kernel.
template <class T>
struct constant : expr_base {
  T value;
  explicit constant(T v) : value(v) {}
  template <class In>
  using type = T;
  std::string render(render_ctx& c) const {
    return c.add_capture(scalar_type_of<T>, &value, sizeof(T));
  }
};

template <class In, class E>
std::string render_sub(const E& e, render_ctx& c);

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
#define KILN_Q_BINOPS(X)                                                                \
  X(add, +, arith)                                                                      \
  X(sub, -, arith) X(mul, *, arith) X(div, /, arith) X(mod, %, arith) X(lt, <, compare) \
      X(le, <=, compare) X(gt, >, compare) X(ge, >=, compare) X(eq, ==, compare)        \
          X(ne, !=, compare) X(land, &&, logical) X(lor, ||, logical) X(band, &, arith) \
              X(bor, |, arith) X(bxor, ^, arith) X(shl, <<, shift) X(shr, >>, shift)

enum class op_class { arith, compare, logical, shift };

#define KILN_Q_OPTAG(name, sym, cls)                   \
  struct op_##name {                                   \
    static constexpr const char* spelling = #sym;      \
    static constexpr op_class kind = op_class::cls;    \
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
  std::string render(render_ctx& c) const {
    using TA = type_t<A, In>;
    using TB = type_t<B, In>;
    const std::string x = render_sub<In>(a, c), y = render_sub<In>(b, c);
    const std::string op = cat(" ", Op::spelling, " ");
    if constexpr (Op::kind == op_class::logical) {
      return cat("((bool)", x, op, "(bool)", y, ")");
    } else if constexpr (Op::kind == op_class::shift) {
      using P = decltype(+std::declval<TA>());
      return cat("(", cast_to<P>(x), op, "(", y, "))");
    } else {
      // Operands converted to their common type first, so every backend computes in the type
      // C++ would (int8_t + int8_t is an int; int + unsigned is unsigned).
      using C = decltype(std::declval<TA>() + std::declval<TB>());
      return cat("(", cast_to<C>(x), op, cast_to<C>(y), ")");
    }
  }
};

enum class unop { neg, lnot, bnot };
template <unop U, class A>
struct unary : expr_base {
  A a;
  explicit unary(A x) : a(std::move(x)) {}
  template <class In>
  static constexpr auto type_fn() {
    using TA = type_t<A, In>;
    if constexpr (U == unop::lnot)
      return bool{};
    else if constexpr (U == unop::bnot) {
      static_assert(std::is_integral_v<TA>, "kiln::query: ~ needs an integer operand");
      return decltype(~std::declval<TA>()){};
    } else
      return decltype(-std::declval<TA>()){};
  }
  template <class In>
  using type = decltype(type_fn<In>());
  template <class In>
  std::string render(render_ctx& c) const {
    using R = type<In>;
    const std::string x = render_sub<In>(a, c);
    if constexpr (U == unop::lnot) return cat("(!(bool)", x, ")");
    const char* s = U == unop::neg ? "-" : "~";
    return cat("((", type_name(scalar_type_of<R>), ")(", s, cast_to<R>(x), "))");
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
  std::string render(render_ctx& ctx) const {
    using R = type<In>;
    return cat("((bool)", render_sub<In>(c, ctx), " ? ", cast_to<R>(render_sub<In>(a, ctx)), " : ",
               cast_to<R>(render_sub<In>(b, ctx)), ")");
  }
};

template <class T, class A>
struct cast_node : expr_base {
  A a;
  explicit cast_node(A x) : a(std::move(x)) {}
  template <class In>
  using type = T;
  template <class In>
  std::string render(render_ctx& c) const {
    return cast_to<T>(render_sub<In>(a, c));
  }
};

// ---- math ---------------------------------------------------------------------------------
// Result types follow <cmath>: float stays float, integers compute in double.
template <class... T>
using math_t = std::conditional_t<(std::is_same_v<T, float> && ...), float, double>;

enum class fn_kind { real, abs, minmax, clamp };
#define KILN_Q_FUNCS(X)                                                                   \
  X(sqrt, real, 1)                                                                        \
  X(rsqrt, real, 1) X(exp, real, 1) X(log, real, 1) X(sin, real, 1) X(cos, real, 1)       \
      X(tanh, real, 1) X(floor, real, 1) X(ceil, real, 1) X(pow, real, 2) X(fma, real, 3) \
          X(abs, abs, 1) X(min, minmax, 2) X(max, minmax, 2) X(clamp, clamp, 3)

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
  std::string render(render_ctx& c) const {
    using R = type<In>;
    std::string out;
    if constexpr (Fn::kind == fn_kind::real) {
      out = Fn::name;
    } else {
      // abs/min/max/clamp with std:: semantics on every backend: generated helpers.
      out = c.helper(Fn::name, scalar_type_of<R>);
    }
    out += "(";
    bool first = true;
    std::apply(
        [&](const auto&... a) {
          ((out.append(first ? "" : ", "), out.append(cast_to<R>(render_sub<In>(a, c))),
            first = false),
           ...);
        },
        args);
    out.append(")");
    return out;
  }
};

#define KILN_Q_FNTAG(fname, k, arity)           \
  struct fn_##fname {                           \
    static constexpr const char* name = #fname; \
    static constexpr fn_kind kind = fn_kind::k; \
  };
KILN_Q_FUNCS(KILN_Q_FNTAG)
#undef KILN_Q_FNTAG

template <class In, class E>
std::string render_sub(const E& e, render_ctx& c) {
  if constexpr (requires { e.template render<In>(c); })
    return e.template render<In>(c);
  else
    return e.render(c);
}

template <class A, class B>
concept one_expr = (expression<A> || expression<B>);

// Operators live here so that argument-dependent lookup finds them for any expression.
#define KILN_Q_DEFINE_OP(name, sym, cls)                                      \
  template <class A, class B>                                                 \
  requires one_expr<A, B>                                                     \
  auto operator sym(const A& a, const B& b) {                                 \
    return binary<op_##name, expr_of<A>, expr_of<B>>(as_expr(a), as_expr(b)); \
  }
KILN_Q_BINOPS(KILN_Q_DEFINE_OP)
#undef KILN_Q_DEFINE_OP

template <expression A>
auto operator-(const A& a) {
  return unary<unop::neg, A>(a);
}
template <expression A>
auto operator!(const A& a) {
  return unary<unop::lnot, A>(a);
}
template <expression A>
auto operator~(const A& a) {
  return unary<unop::bnot, A>(a);
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
