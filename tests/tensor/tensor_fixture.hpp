// Fixture machinery of the kiln::tensor tests: the conformance suite's per-device fixture under
// the prefix "tensor" (`ctest -R tensor`), seeded host data (never zero), and a naive host
// model of tensors (contiguous values plus a shape) with broadcasting and coordinate maps, so
// every device result is checked against an independent host computation.
#pragma once

#include <functional>
#include <kiln/tensor.hpp>

#include "conformance/backends.hpp"

namespace tensor_test {

using kiln::shape_t;

#define KILN_INSTANTIATE_TENSOR_PER_DEVICE(Suite)                                           \
  INSTANTIATE_TEST_SUITE_P(tensor, Suite, ::testing::ValuesIn(::conformance::device_ids()), \
                           ::conformance::device_param_name)

class TensorTest : public conformance::DeviceTest {
 protected:
  kiln::tensor_stats stats() const { return kiln::last_tensor_stats(); }
};

template <class... T>
struct type_list {};

template <class T>
std::string name_of() {
  return kiln::type_name(kiln::scalar_type_of<T>);
}

template <class... T, class F>
void for_each_type(type_list<T...>, F&& f) {
  (
      [&] {
        SCOPED_TRACE("element type " + name_of<T>());
        f.template operator()<T>();
      }(),
      ...);
}

inline std::int64_t numel(const shape_t& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

// Host tensor: row-major values of `shape`.
template <class T>
struct host {
  shape_t shape;
  std::vector<T> v;
};

// Seeded values, never zero: small integers (so products and sums stay in range and divisors
// are never zero), [-4, 4] for floating point, coin flips for bool.
template <class T>
std::vector<T> values(std::size_t n, std::uint64_t seed) {
  if constexpr (std::is_same_v<T, bool>) {
    std::mt19937_64 rng(seed);
    std::vector<bool> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = (rng() >> 11) & 1;
    return out;
  } else if constexpr (std::is_floating_point_v<T>) {
    return conformance::random_values<T>(n, seed, T(-4), T(4));
  } else if constexpr (std::is_unsigned_v<T>) {
    return conformance::random_values<T>(n, seed, T(1), T(100));
  } else {
    return conformance::random_values<T>(n, seed, T(-50), T(50));
  }
}

template <class T>
host<T> random_host(const shape_t& shape, std::uint64_t seed) {
  return {shape, values<T>(static_cast<std::size_t>(numel(shape)), seed)};
}

template <class T>
kiln::tensor upload(const kiln::device& dev, const host<T>& h) {
  return kiln::tensor::from(dev, h.v, h.shape);
}

// Coordinates of flat position i in shape.
inline shape_t coords(const shape_t& shape, std::int64_t i) {
  shape_t c(shape.size());
  for (std::size_t k = shape.size(); k-- > 0;) {
    c[k] = shape[k] ? i % shape[k] : 0;
    if (shape[k]) i /= shape[k];
  }
  return c;
}

inline std::int64_t flat(const shape_t& shape, const shape_t& c) {
  std::int64_t i = 0;
  for (std::size_t k = 0; k < shape.size(); ++k) i = i * shape[k] + c[k];
  return i;
}

// A's element read at output coordinates c (NumPy broadcasting, right-aligned).
template <class T>
T bcast_at(const host<T>& a, const shape_t& c) {
  const std::size_t lead = c.size() - a.shape.size();
  shape_t ac(a.shape.size());
  for (std::size_t k = 0; k < ac.size(); ++k) ac[k] = a.shape[k] == 1 ? 0 : c[k + lead];
  return a.v[static_cast<std::size_t>(flat(a.shape, ac))];
}

inline shape_t bcast_shape(const shape_t& a, const shape_t& b) {
  shape_t out(std::max(a.size(), b.size()));
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1;
    const std::int64_t y = k < b.size() ? b[b.size() - 1 - k] : 1;
    out[out.size() - 1 - k] = x == 1 ? y : x;
  }
  return out;
}

// out[c] = f(a[c], b[c]) over the broadcast shape.
template <class R, class A, class B, class F>
host<R> map2(const host<A>& a, const host<B>& b, F f) {
  host<R> r{bcast_shape(a.shape, b.shape), {}};
  for (std::int64_t i = 0; i < numel(r.shape); ++i) {
    const shape_t c = coords(r.shape, i);
    r.v.push_back(static_cast<R>(f(bcast_at(a, c), bcast_at(b, c))));
  }
  return r;
}

// A view on the host: out[c] = a[to_base(c)], for a view's coordinate map.
template <class T>
host<T> remap(const host<T>& a, const shape_t& shape,
              const std::function<shape_t(shape_t)>& to_base) {
  host<T> r{shape, {}};
  for (std::int64_t i = 0; i < numel(shape); ++i)
    r.v.push_back(a.v[static_cast<std::size_t>(flat(a.shape, to_base(coords(shape, i))))]);
  return r;
}

// Equal for integers and bool; for floating point within rel * max(1, |want|) of a double
// reference.
template <class T>
::testing::AssertionResult matches(const kiln::tensor& got, const host<T>& want,
                                   double rel = std::is_same_v<T, float> ? 2e-6 : 1e-13) {
  if (got.shape() != want.shape)
    return ::testing::AssertionFailure() << "shape " << kiln::to_string(got.shape())
                                         << ", expected " << kiln::to_string(want.shape);
  if (got.dtype() != kiln::scalar_type_of<T>)
    return ::testing::AssertionFailure()
           << "dtype " << kiln::type_name(got.dtype()) << ", expected " << name_of<T>();
  const std::vector<T> v = got.to_vector<T>();
  if constexpr (std::is_floating_point_v<T>) {
    std::vector<double> w(want.v.begin(), want.v.end());
    return conformance::elements_near(
        v, w, [&](std::uint64_t i) { return rel * std::max(1.0, std::fabs(w[i])); });
  } else {
    return conformance::elements_equal(v, want.v);
  }
}

}  // namespace tensor_test
