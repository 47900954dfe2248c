// Terminals end a kiln::query and run it: collect (to_vector, to_buffer) or reduce (count,
// sum, product, min, max, average, any, all, reduce, argmin, argmax). Each also runs
// asynchronously through kiln::async (query/async.hpp):
//
//   float s = xs | kiln::sum();                                   // waits for the result
//   kiln::pending<float> p = xs | kiln::async(kiln::sum(), q);    // returns at once
//   float t = p.get();
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "kiln/query/async.hpp"
#include "kiln/query/host_output.hpp"
#include "kiln/query/pipeline.hpp"

namespace kiln {

// What the last query run by this thread did (debug counters).
struct query_stats {
  std::uint64_t kernel_launches = 0;  // generated kernels launched
  std::uint64_t programs_compiled = 0;
  std::uint64_t bytes_read = 0;     // device memory the kernels read (inputs)
  std::uint64_t bytes_written = 0;  // device memory the kernels wrote (results)
  std::uint64_t host_to_device_bytes = 0, device_to_host_bytes = 0;
  std::string device;  // where it ran ("cuda:0")
};
query_stats last_query_stats();

namespace detail::q {
template <class T>
T bits_as(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// Collected elements on the host: one std::vector of T, or of std::tuple<Ts...> for an element
// of several components (zip, enumerate, group_by), read column by column.
template <class... Ts>
auto read_elements(const collect_result& r) {
  if constexpr (sizeof...(Ts) == 1) {
    return read_vector<Ts...>(r.outputs[0], r.count);  // staged, pipelined D2H (host_output.hpp)
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      const auto cols = std::make_tuple(read_vector<Ts>(r.outputs[I], r.count)...);
      std::vector<std::tuple<Ts...>> v;
      v.reserve(r.count);
      for (std::uint64_t i = 0; i < r.count; ++i) v.emplace_back(std::get<I>(cols)[i]...);
      return v;
    }
    (std::index_sequence_for<Ts...>{});
  }
}
// The same as device buffers: one buffer<T>, or a std::tuple of one buffer per component.
template <class... Ts>
auto adopt_elements(const collect_result& r) {
  if constexpr (sizeof...(Ts) == 1) {
    return buffer<Ts...>(adopt, buffer_view<Ts...>(r.outputs[0], 0, r.count));
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return std::make_tuple(buffer<Ts>(adopt, buffer_view<Ts>(r.outputs[I], 0, r.count))...);
    }
    (std::index_sequence_for<Ts...>{});
  }
}

struct to_vector_t : terminal_tag {
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    return read_elements<Ts...>(collect(q.desc()));
  }
  // The device-side result is read back at get().
  template <class... Ts>
  auto apply_async(kiln::query<Ts...> q, const kiln::queue* on) const {
    using R = decltype(read_elements<Ts...>(std::declval<const collect_result&>()));
    return pending<R>(collect_async(q.desc(), on),
                      [](async_state& s) { return read_elements<Ts...>(async_collect(s)); });
  }
};
struct to_buffer_t : terminal_tag {
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    return adopt_elements<Ts...>(collect(q.desc()));
  }
  template <class... Ts>
  auto apply_async(kiln::query<Ts...> q, const kiln::queue* on) const {
    using R = decltype(adopt_elements<Ts...>(std::declval<const collect_result&>()));
    return pending<R>(collect_async(q.desc(), on),
                      [](async_state& s) { return adopt_elements<Ts...>(async_collect(s)); });
  }
};

// A reduction's accumulator type and its result from the accumulator, per kind; the
// synchronous and asynchronous forms share them.
template <reduce_kind K, class Q>
struct reduce_traits {
  using T = only_t<Q>;
  static reduce_spec spec() {
    if constexpr (K == reduce_kind::sum || K == reduce_kind::product)
      return reduce_spec{K, scalar_type_of<sum_t<T>>};
    else if constexpr (K == reduce_kind::any || K == reduce_kind::all)
      return reduce_spec{K, scalar_type::boolean};
    else if constexpr (K == reduce_kind::average)
      return reduce_spec{K, scalar_type::f64};
    else  // min, max, argmin, argmax
      return reduce_spec{K, scalar_type_of<T>};
  }
  static auto result(const reduce_result& r) {
    if constexpr (K == reduce_kind::sum || K == reduce_kind::product) {
      return bits_as<sum_t<T>>(r.value_bits);
    } else if constexpr (K == reduce_kind::min || K == reduce_kind::max) {
      return r.count ? std::optional<T>(bits_as<T>(r.value_bits)) : std::nullopt;
    } else if constexpr (K == reduce_kind::any || K == reduce_kind::all) {
      return bits_as<bool>(r.value_bits);
    } else if constexpr (K == reduce_kind::average) {
      return r.count ? std::optional<double>(bits_as<double>(r.value_bits) /
                                             static_cast<double>(r.count))
                     : std::nullopt;
    } else {  // argmin, argmax
      return r.count ? std::optional<std::uint64_t>(static_cast<std::uint64_t>(r.index))
                     : std::nullopt;
    }
  }
};

template <reduce_kind K>
struct reduce_t : terminal_tag {
  template <class... Ts>
  auto apply(kiln::query<Ts...> q) const {
    using Q = kiln::query<Ts...>;
    if constexpr (K == reduce_kind::count) {
      return reduce(q.desc(), reduce_spec{K, scalar_type::u64}).count;
    } else {
      require_single<Q>();
      return reduce_traits<K, Q>::result(reduce(q.desc(), reduce_traits<K, Q>::spec()));
    }
  }
  template <class... Ts>
  auto apply_async(kiln::query<Ts...> q, const kiln::queue* on) const {
    using Q = kiln::query<Ts...>;
    if constexpr (K == reduce_kind::count) {
      return pending<std::uint64_t>(reduce_async(q.desc(), reduce_spec{K, scalar_type::u64}, on),
                                    [](async_state& s) { return async_reduce(s).count; });
    } else {
      require_single<Q>();
      using R = decltype(reduce_traits<K, Q>::result(reduce_result{}));
      return pending<R>(
          reduce_async(q.desc(), reduce_traits<K, Q>::spec(), on),
          [](async_state& s) { return reduce_traits<K, Q>::result(async_reduce(s)); });
    }
  }
};

template <class I, class Op>
struct custom_reduce_t : terminal_tag {
  I init;
  Op op;
  reduce_spec spec(query_desc& d) const {
    reduce_spec s{reduce_kind::custom, scalar_type_of<I>, lower_combine<I>(d, op, "kiln::reduce")};
    s.init = d.graph.new_capture(init);
    // The kernels fold init in last: std::reduce's contract (op associative and commutative).
    return s;
  }
  template <class... Ts>
  I apply(kiln::query<Ts...> q) const {
    require_single<kiln::query<Ts...>>();
    query_desc& d = q.desc();
    return bits_as<I>(reduce(d, spec(d)).value_bits);
  }
  template <class... Ts>
  pending<I> apply_async(kiln::query<Ts...> q, const kiln::queue* on) const {
    require_single<kiln::query<Ts...>>();
    query_desc& d = q.desc();
    return pending<I>(reduce_async(d, spec(d), on),
                      [](async_state& s) { return bits_as<I>(async_reduce(s).value_bits); });
  }
};
}  // namespace detail::q

// Elements of several components (zip, enumerate, group_by) come as std::tuple<Ts...>, and
// to_buffer() gives a std::tuple of one buffer per component.
inline auto to_vector() { return detail::q::to_vector_t{}; }
// The result stays on the device. After a filter, its allocation may be larger than size().
inline auto to_buffer() { return detail::q::to_buffer_t{}; }
inline auto count() { return detail::q::reduce_t<detail::q::reduce_kind::count>{}; }
inline auto sum() { return detail::q::reduce_t<detail::q::reduce_kind::sum>{}; }
inline auto product() { return detail::q::reduce_t<detail::q::reduce_kind::product>{}; }
inline auto min() { return detail::q::reduce_t<detail::q::reduce_kind::min>{}; }
inline auto max() { return detail::q::reduce_t<detail::q::reduce_kind::max>{}; }
inline auto average() { return detail::q::reduce_t<detail::q::reduce_kind::average>{}; }
inline auto any() { return detail::q::reduce_t<detail::q::reduce_kind::any>{}; }
inline auto all() { return detail::q::reduce_t<detail::q::reduce_kind::all>{}; }
inline auto argmin() { return detail::q::reduce_t<detail::q::reduce_kind::argmin>{}; }
inline auto argmax() { return detail::q::reduce_t<detail::q::reduce_kind::argmax>{}; }
// std::reduce(init, op): op must be associative and commutative; _1 and _2 are two partial
// results of init's type.
template <scalar I, detail::q::expression Op>
auto reduce(I init, const Op& op) {
  return detail::q::custom_reduce_t<I, Op>{{}, init, op};
}

}  // namespace kiln
