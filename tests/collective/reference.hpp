// Shared by the collective tests: deterministic non-zero data per (rank, index), the expected
// result of each collective computed in double on the host, and a poison for outputs.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "kiln/collective.hpp"

namespace collective_test {

using kiln::collective::reduce_op;
inline constexpr reduce_op all_ops[] = {reduce_op::sum, reduce_op::prod, reduce_op::min,
                                        reduce_op::max, reduce_op::avg};

// The floating-point types, the 16-bit ones included.
template <class T>
constexpr bool is_float_type =
    std::is_floating_point_v<T> || std::is_same_v<T, kiln::half> || std::is_same_v<T, kiln::bfloat16>;

// Small magnitudes, never zero, both signs where the type has them: prod over a few ranks
// stays exact in every type wider than 16 bits.
template <class T>
T value(int rank, std::uint64_t i) {
  std::uint64_t h =
      (static_cast<std::uint64_t>(rank) + 1) * 0x9E3779B97F4A7C15ull + i * 0xBF58476D1CE4E5B9ull;
  h ^= h >> 29;
  const int mag = 1 + static_cast<int>(h % 5);
  const bool neg = (h >> 8) & 1;
  if constexpr (is_float_type<T>) {
    const double frac = 0.25 * static_cast<double>((h >> 12) % 4);  // exact in binary
    return static_cast<T>((neg ? -1.0 : 1.0) * (mag + frac));
  } else if constexpr (std::is_same_v<T, bool>) {
    return (h & 1) != 0;
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<T>(neg ? -mag : mag);
  } else {
    return static_cast<T>(mag);
  }
}

template <class T>
std::vector<T> data(int rank, std::uint64_t n) {
  std::vector<T> v(n);
  for (std::uint64_t i = 0; i < n; ++i) v[i] = value<T>(rank, i);
  return v;
}

template <class T>
T poison() {
  if constexpr (is_float_type<T>)
    return T(std::numeric_limits<float>::quiet_NaN());
  else
    return static_cast<T>(0x5A);
}

// op over ranks 0..size-1 of value(r, i), in double; avg of integers truncates like the
// element type's division.
template <class T>
double reduced(reduce_op op, int size, std::uint64_t i) {
  double acc = static_cast<double>(value<T>(0, i));
  for (int r = 1; r < size; ++r) {
    const double x = static_cast<double>(value<T>(r, i));
    switch (op) {
      case reduce_op::sum:
      case reduce_op::avg: acc += x; break;
      case reduce_op::prod: acc *= x; break;
      case reduce_op::min: acc = std::min(acc, x); break;
      case reduce_op::max: acc = std::max(acc, x); break;
    }
  }
  if (op == reduce_op::avg) acc = std::is_integral_v<T> ? std::trunc(acc / size) : acc / size;
  return acc;
}

template <class T>
void expect_near(const std::vector<T>& got, const std::vector<double>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  // The 16-bit floats: each result rounded once (products and averages are inexact there).
  const double tol = std::is_same_v<T, float>          ? 1e-5
                     : std::is_same_v<T, double>         ? 1e-12
                     : std::is_same_v<T, kiln::half>     ? 1.0 / 1024
                     : std::is_same_v<T, kiln::bfloat16> ? 1.0 / 128
                                                         : 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    ASSERT_LE(std::fabs(g - want[i]), tol * std::max(1.0, std::fabs(want[i])))
        << what << " element " << i << ": got " << g << ", want " << want[i];
  }
}

// Every collective on one rank against the reference: out-of-place and in-place all_reduce for
// each op, broadcast from the last rank, all_gather, reduce_scatter. n elements per rank.
template <class T>
void check_rank(const kiln::collective::communicator& c, std::uint64_t n) {
  const int r = c.rank(), s = c.size();
  const kiln::device& dev = c.get_device();
  const std::vector<T> mine = data<T>(r, n);
  // NCCL has no 16-bit integer reductions and MPI no 16-bit float type: those must be refused,
  // never wrong.
  const bool reduces = !(c.transport() == "nccl" && sizeof(T) == 2 && std::is_integral_v<T>) &&
                       !(c.transport() == "mpi" && sizeof(T) == 2 && is_float_type<T>);
  if constexpr (!std::is_same_v<T, bool>) {
    if (!reduces) {
      kiln::buffer<T> b(dev, mine);
      EXPECT_THROW(c.all_reduce(b), kiln::unsupported);
    }
  }
  if constexpr (!std::is_same_v<T, bool>) {
    if (reduces) {
      for (reduce_op op : all_ops) {
        kiln::buffer<T> send(dev, mine), recv(dev, std::vector<T>(n, poison<T>()));
        c.all_reduce(send, recv, op);
        std::vector<double> want(n);
        for (std::uint64_t i = 0; i < n; ++i) want[i] = reduced<T>(op, s, i);
        expect_near(recv.to_vector(), want, kiln::collective::to_string(op));
        expect_near(
            send.to_vector(),
            [&] {  // send untouched
              std::vector<double> v(n);
              for (std::uint64_t i = 0; i < n; ++i) v[i] = static_cast<double>(mine[i]);
              return v;
            }(),
            "send after all_reduce");
        c.all_reduce(send, op);  // in place
        expect_near(send.to_vector(), want, "in-place all_reduce");
      }
      // reduce_scatter: block b of rank q's send holds value(q, b * n + i).
      const std::vector<T> big = data<T>(r, n * s);
      kiln::buffer<T> send(dev, big), recv(dev, std::vector<T>(n, poison<T>()));
      c.reduce_scatter(send, recv, reduce_op::sum);
      std::vector<double> want(n);
      for (std::uint64_t i = 0; i < n; ++i) want[i] = reduced<T>(reduce_op::sum, s, r * n + i);
      expect_near(recv.to_vector(), want, "reduce_scatter");
    }
  }
  {
    kiln::buffer<T> send(dev, mine), recv(dev, std::vector<T>(n, poison<T>()));
    c.broadcast(send, recv, s - 1);
    const std::vector<T> root = data<T>(s - 1, n);
    EXPECT_EQ(recv.to_vector(), root) << "broadcast";
  }
  {
    kiln::buffer<T> send(dev, mine), recv(dev, std::vector<T>(n * s, poison<T>()));
    c.all_gather(send, recv);
    std::vector<T> want;
    for (int q = 0; q < s; ++q)
      for (const T& x : data<T>(q, n)) want.push_back(x);
    EXPECT_EQ(recv.to_vector(), want) << "all_gather";
  }
}

template <class... T>
void check_types(const kiln::collective::communicator& c, std::uint64_t n) {
  (check_rank<T>(c, n), ...);
}

// Every scalar type Kiln tensors and buffers have.
inline void check_all_types(const kiln::collective::communicator& c, std::uint64_t n) {
  check_types<bool, std::int8_t, std::int16_t, std::int32_t, std::int64_t, std::uint8_t,
              std::uint16_t, std::uint32_t, std::uint64_t, float, double, kiln::half,
              kiln::bfloat16>(c, n);
}

}  // namespace collective_test
