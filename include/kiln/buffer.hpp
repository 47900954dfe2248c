// Device memory: typed, owning, move-only buffers; sub-views; pinned host buffers; copies.
//
//   std::vector<float> host(1 << 20, 1.5f);
//   kiln::buffer<float> x(dev, host);             // allocate + copy (synchronous)
//   kiln::buffer<float> y(dev, host.size());      // uninitialised
//   y.fill(0.f);
//   kiln::buffer_view<float> half = y.subview(0, y.size() / 2);
//   kiln::pinned_buffer<float> staging(dev, host.size());
//   q.copy(x, staging);                           // asynchronous device -> pinned host
//   q.finish();
//   std::vector<float> back = y.to_vector();      // synchronous
//
// Synchronous operations (constructors from host data, fill, copy_from, copy_to, to_vector)
// first wait for every queue that has used the buffer, so they see all work submitted before.
#pragma once

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <string>
#include <memory>
#include <ranges>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln {

namespace detail {
struct memory_impl;
// Untyped memory operations (src/runtime/memory.cpp). Offsets and sizes in bytes.
std::shared_ptr<memory_impl> allocate(const device& dev, std::uint64_t bytes);
const device& memory_device(const memory_impl& m);
void finish_users(memory_impl& m);  // waits for every queue that used m
void copy_h2d(queue_impl& q, memory_impl& dst, std::uint64_t off, const void* src,
              std::uint64_t bytes);
void copy_d2h(queue_impl& q, void* dst, memory_impl& src, std::uint64_t off, std::uint64_t bytes);
void copy_d2d(queue_impl& q, memory_impl& dst, std::uint64_t dst_off, memory_impl& src,
              std::uint64_t src_off, std::uint64_t bytes);
void fill(queue_impl& q, memory_impl& dst, std::uint64_t off, const void* pattern,
          std::uint32_t pattern_size, std::uint64_t count);
void* host_alloc(const device& dev, std::uint64_t bytes);
void host_free(const device& dev, void* p) noexcept;
[[noreturn]] void throw_size_mismatch(const char* what, std::uint64_t a, std::uint64_t b);
[[noreturn]] void throw_out_of_range(std::uint64_t off, std::uint64_t count, std::uint64_t size);
}  // namespace detail

// A typed window onto device memory. Copyable; keeps the allocation alive.
template <class T>
class buffer_view {
  static_assert(scalar<T>, "kiln::buffer_view<T>: T must be a scalar type");

 public:
  using value_type = std::remove_cv_t<T>;
  using element_type = T;
  buffer_view() = default;
  buffer_view(std::shared_ptr<detail::memory_impl> m, std::uint64_t offset, std::uint64_t size)
      : mem_(std::move(m)), offset_(offset), size_(size) {}
  // A view of T converts to a view of const T.
  template <class U>
  requires(std::is_same_v<const U, T> && !std::is_same_v<U, T>) buffer_view(const buffer_view<U>& o)
      : mem_(o.memory()), offset_(o.offset()), size_(o.size()) {}

  std::uint64_t size() const noexcept { return size_; }
  std::uint64_t bytes() const noexcept { return size_ * sizeof(T); }
  bool empty() const noexcept { return size_ == 0; }
  std::uint64_t offset() const noexcept { return offset_; }  // in elements
  const device& get_device() const {
    if (!mem_)
      throw invalid_argument(
          "buffer::get_device: an empty (default-constructed or moved-from) buffer has no device");
    return detail::memory_device(*mem_);
  }
  const std::shared_ptr<detail::memory_impl>& memory() const noexcept { return mem_; }

  buffer_view subview(std::uint64_t offset, std::uint64_t count) const {
    if (offset > size_ || count > size_ - offset) detail::throw_out_of_range(offset, count, size_);
    return buffer_view(mem_, offset_ + offset, count);
  }

  void copy_from(std::span<const value_type> src) const requires(!std::is_const_v<T>) {
    if (src.size() != size_) detail::throw_size_mismatch("copy_from", src.size(), size_);
    if (empty()) return;
    detail::finish_users(*mem_);
    auto& q = get_device().default_queue();
    detail::copy_h2d(*q.impl(), *mem_, offset_ * sizeof(T), src.data(), bytes());
    q.finish();
  }
  void copy_to(std::span<value_type> dst) const {
    if (dst.size() != size_) detail::throw_size_mismatch("copy_to", size_, dst.size());
    if (empty()) return;
    detail::finish_users(*mem_);
    auto& q = get_device().default_queue();
    detail::copy_d2h(*q.impl(), dst.data(), *mem_, offset_ * sizeof(T), bytes());
    q.finish();
  }
  std::vector<value_type> to_vector() const {
    if constexpr (std::is_same_v<value_type, bool>) {  // std::vector<bool> is not contiguous
      std::unique_ptr<bool[]> tmp(new bool[size_]);
      copy_to(std::span<bool>(tmp.get(), size_));
      return std::vector<bool>(tmp.get(), tmp.get() + size_);
    } else {
      std::vector<value_type> out(size_);
      copy_to(out);
      return out;
    }
  }
  void fill(value_type v) const requires(!std::is_const_v<T>) {
    if (empty()) return;
    detail::finish_users(*mem_);
    auto& q = get_device().default_queue();
    detail::fill(*q.impl(), *mem_, offset_ * sizeof(T), &v, sizeof(T), size_);
    q.finish();
  }

 private:
  std::shared_ptr<detail::memory_impl> mem_;
  std::uint64_t offset_ = 0, size_ = 0;
};

namespace detail {
struct adopt_t {};  // a buffer taking over an existing allocation (kiln::query results)
}
inline constexpr detail::adopt_t adopt{};

// An owning, move-only array of n elements of T in one device's memory.
template <class T>
class buffer {
  static_assert(scalar<T> && !std::is_const_v<T>, "kiln::buffer<T>: T must be a non-const scalar");

 public:
  buffer() = default;
  buffer(const device& dev, std::uint64_t n) : view_(detail::allocate(dev, bytes_for(n)), 0, n) {}
  buffer(const device& dev, std::span<const T> init) : buffer(dev, init.size()) {
    view_.copy_from(init);
  }
  buffer(const device& dev, const std::vector<T>& init) : buffer(dev, init.size()) {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is not contiguous
      std::unique_ptr<bool[]> tmp(new bool[init.size()]);
      std::copy(init.begin(), init.end(), tmp.get());
      view_.copy_from(std::span<const bool>(tmp.get(), init.size()));
    } else {
      view_.copy_from(init);
    }
  }
  // Takes over the allocation behind v (which may be larger than v).
  buffer(detail::adopt_t, buffer_view<T> v) : view_(std::move(v)) {}
  // A moved-from buffer is empty.
  buffer(buffer&& o) noexcept : view_(std::exchange(o.view_, {})) {}
  buffer& operator=(buffer&& o) noexcept {
    view_ = std::exchange(o.view_, {});
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;

  std::uint64_t size() const noexcept { return view_.size(); }
  std::uint64_t bytes() const noexcept { return view_.bytes(); }
  bool empty() const noexcept { return view_.empty(); }
  const device& get_device() const { return view_.get_device(); }
  buffer_view<T> view() const noexcept { return view_; }
  operator buffer_view<T>() const noexcept { return view_; }
  operator buffer_view<const T>() const noexcept { return view_; }
  buffer_view<T> subview(std::uint64_t off, std::uint64_t count) const {
    return view_.subview(off, count);
  }
  void copy_from(std::span<const T> src) const { view_.copy_from(src); }
  void copy_to(std::span<T> dst) const { view_.copy_to(dst); }
  std::vector<T> to_vector() const { return view_.to_vector(); }
  void fill(T v) const { view_.fill(v); }

 private:
  static std::uint64_t bytes_for(std::uint64_t n) {
    if (n > UINT64_MAX / sizeof(T))
      throw invalid_argument("buffer of " + std::to_string(n) + " elements: size in bytes overflows");
    return n * sizeof(T);
  }
  buffer_view<T> view_;
};

// Page-locked host memory for fast, overlapping transfers with one device's queues.
template <class T>
class pinned_buffer {
  static_assert(scalar<T> && !std::is_const_v<T>, "kiln::pinned_buffer<T>: T must be a scalar");

 public:
  pinned_buffer(const device& dev, std::size_t n)
      : dev_(dev), data_(static_cast<T*>(detail::host_alloc(dev, bytes_for(n)))), size_(n) {}
  ~pinned_buffer() {
    if (data_) detail::host_free(dev_, data_);
  }
  pinned_buffer(pinned_buffer&& o) noexcept
      : dev_(o.dev_), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  pinned_buffer& operator=(pinned_buffer&& o) noexcept {
    std::swap(dev_, o.dev_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  pinned_buffer(const pinned_buffer&) = delete;
  pinned_buffer& operator=(const pinned_buffer&) = delete;

  T* data() noexcept { return data_; }
  const T* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return size_; }
  T& operator[](std::size_t i) noexcept { return data_[i]; }
  const T& operator[](std::size_t i) const noexcept { return data_[i]; }
  T* begin() noexcept { return data_; }
  T* end() noexcept { return data_ + size_; }
  const T* begin() const noexcept { return data_; }
  const T* end() const noexcept { return data_ + size_; }
  std::span<T> span() noexcept { return {data_, size_}; }

 private:
  static std::uint64_t bytes_for(std::size_t n) {
    if (n > SIZE_MAX / sizeof(T))
      throw invalid_argument("pinned_buffer of " + std::to_string(n) +
                             " elements: size in bytes overflows");
    return n * sizeof(T);
  }
  device dev_;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// Copies a contiguous host range to a new buffer on dev.
template <std::ranges::contiguous_range R>
auto to_device(const device& dev, const R& host) {
  using T = std::remove_cv_t<std::ranges::range_value_t<R>>;
  return buffer<T>(dev, std::span<const T>(std::ranges::data(host), std::ranges::size(host)));
}

namespace detail {
template <class X>
struct device_side : std::false_type {};
template <class T>
struct device_side<buffer<T>> : std::true_type {
  using elem = T;
};
template <class T>
struct device_side<buffer_view<T>> : std::true_type {
  using elem = T;
};
template <class X>
constexpr bool is_device_side = device_side<std::remove_cvref_t<X>>::value;

template <class X>
auto as_view(const X& x) {
  if constexpr (requires { x.view(); })
    return x.view();
  else
    return x;
}
}  // namespace detail

template <class Src, class Dst>
void queue::copy(const Src& src, Dst&& dst) {
  if (!impl_) detail::throw_empty_handle("queue::copy", "queue");
  constexpr bool src_dev = detail::is_device_side<Src>, dst_dev = detail::is_device_side<Dst>;
  if constexpr (src_dev && dst_dev) {
    auto s = detail::as_view(src);
    auto d = detail::as_view(dst);
    static_assert(
        std::is_same_v<typename decltype(s)::value_type, typename decltype(d)::value_type>,
        "kiln::queue::copy: element types differ");
    static_assert(!std::is_const_v<typename decltype(d)::element_type>,
                  "kiln::queue::copy: destination is a view of const elements");
    if (s.size() != d.size()) detail::throw_size_mismatch("queue::copy", s.size(), d.size());
    if (s.empty()) return;
    using E = typename decltype(s)::value_type;
    detail::copy_d2d(*impl_, *d.memory(), d.offset() * sizeof(E), *s.memory(),
                     s.offset() * sizeof(E), s.bytes());
  } else if constexpr (dst_dev) {
    auto d = detail::as_view(dst);
    using E = typename decltype(d)::value_type;
    static_assert(!std::is_const_v<typename decltype(d)::element_type>,
                  "kiln::queue::copy: destination is a view of const elements");
    static_assert(std::ranges::contiguous_range<const Src> &&
                      std::is_same_v<std::remove_cv_t<std::ranges::range_value_t<const Src>>, E>,
                  "kiln::queue::copy: source must be contiguous host memory of the buffer's type");
    const std::uint64_t n = std::ranges::size(src);
    if (n != d.size()) detail::throw_size_mismatch("queue::copy", n, d.size());
    if (n == 0) return;
    detail::copy_h2d(*impl_, *d.memory(), d.offset() * sizeof(E), std::ranges::data(src),
                     n * sizeof(E));
  } else {
    static_assert(src_dev, "kiln::queue::copy: one side must be a device buffer");
    auto s = detail::as_view(src);
    using E = typename decltype(s)::value_type;
    static_assert(
        std::ranges::contiguous_range<Dst> && std::is_same_v<std::ranges::range_value_t<Dst>, E>,
        "kiln::queue::copy: destination must be writable contiguous host memory of the "
        "buffer's type");
    const std::uint64_t n = std::ranges::size(dst);
    if (n != s.size()) detail::throw_size_mismatch("queue::copy", s.size(), n);
    if (n == 0) return;
    detail::copy_d2h(*impl_, std::ranges::data(dst), *s.memory(), s.offset() * sizeof(E),
                     n * sizeof(E));
  }
}

template <class Dst, class T>
void queue::fill(Dst&& dst, const T& value) {
  if (!impl_) detail::throw_empty_handle("queue::fill", "queue");
  static_assert(detail::is_device_side<Dst>, "kiln::queue::fill: destination must be a buffer");
  auto d = detail::as_view(dst);
  using E = typename decltype(d)::value_type;
  static_assert(!std::is_const_v<typename decltype(d)::element_type>,
                "kiln::queue::fill: destination is a view of const elements");
  const E v = static_cast<E>(value);
  if (d.empty()) return;
  detail::fill(*impl_, *d.memory(), d.offset() * sizeof(E), &v, sizeof(E), d.size());
}

}  // namespace kiln
