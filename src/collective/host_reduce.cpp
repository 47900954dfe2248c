// Element-wise reductions on host memory, per scalar type: the in-process CPU group and the
// MPI transport's avg (MPI has no average) use them. Computed in the element type, as NCCL does.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "collective/comm_impl.hpp"

namespace kiln::collective::detail {
namespace {

// Integers wrap on overflow, as NCCL's do: through the unsigned type of the same width (signed
// overflow would be undefined behaviour).
template <class T>
struct wrapping {
  using type = T;
};
template <class T>
requires std::is_integral_v<T>
struct wrapping<T> {  // at least unsigned int: narrower types would promote to (signed) int
  using type =
      std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
};

template <class T>
void reduce_typed(reduce_op op, T* acc, const T* x, std::uint64_t n) {
  using W = typename wrapping<T>::type;
  switch (op) {
    case reduce_op::sum:
    case reduce_op::avg:
      for (std::uint64_t i = 0; i < n; ++i)
        acc[i] = static_cast<T>(static_cast<W>(static_cast<W>(acc[i]) + static_cast<W>(x[i])));
      break;
    case reduce_op::prod:
      for (std::uint64_t i = 0; i < n; ++i)
        acc[i] = static_cast<T>(static_cast<W>(static_cast<W>(acc[i]) * static_cast<W>(x[i])));
      break;
    case reduce_op::min:
      for (std::uint64_t i = 0; i < n; ++i) acc[i] = std::min(acc[i], x[i]);
      break;
    case reduce_op::max:
      for (std::uint64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], x[i]);
      break;
  }
}

template <class F>
void dispatch(scalar_type t, F&& f) {
  switch (t) {
    case scalar_type::i8: return f(std::int8_t{});
    case scalar_type::i16: return f(std::int16_t{});
    case scalar_type::i32: return f(std::int32_t{});
    case scalar_type::i64: return f(std::int64_t{});
    case scalar_type::u8: return f(std::uint8_t{});
    case scalar_type::u16: return f(std::uint16_t{});
    case scalar_type::u32: return f(std::uint32_t{});
    case scalar_type::u64: return f(std::uint64_t{});
    case scalar_type::f32: return f(float{});
    case scalar_type::f64: return f(double{});
    case scalar_type::f16: return f(half{});  // each pair summed in float, rounded once
    case scalar_type::bf16: return f(bfloat16{});
    case scalar_type::boolean: break;  // refused before: no arithmetic on bool
  }
}

}  // namespace

void reduce_into(scalar_type t, reduce_op op, void* acc, const void* x, std::uint64_t n) {
  dispatch(t, [&](auto v) {
    using T = decltype(v);
    reduce_typed(op, static_cast<T*>(acc), static_cast<const T*>(x), n);
  });
}

void finish_avg(scalar_type t, void* acc, std::uint64_t n, int ranks) {
  dispatch(t, [&](auto v) {
    using T = decltype(v);
    T* a = static_cast<T*>(acc);
    // The divisor in a wide type: ranks need not fit T (256 ranks in a u8 would divide by 0).
    if constexpr (std::is_same_v<T, half> || std::is_same_v<T, bfloat16>) {
      for (std::uint64_t i = 0; i < n; ++i) a[i] = static_cast<T>(float(a[i]) / float(ranks));
    } else if constexpr (std::is_floating_point_v<T>) {
      for (std::uint64_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] / static_cast<T>(ranks));
    } else if constexpr (std::is_signed_v<T>) {
      for (std::uint64_t i = 0; i < n; ++i)
        a[i] = static_cast<T>(static_cast<std::int64_t>(a[i]) / std::int64_t{ranks});
    } else {
      for (std::uint64_t i = 0; i < n; ++i)
        a[i] = static_cast<T>(static_cast<std::uint64_t>(a[i]) / static_cast<std::uint64_t>(ranks));
    }
  });
}

}  // namespace kiln::collective::detail
