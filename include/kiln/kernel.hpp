// Kernels written once in Kiln's portable kernel language (docs/kernel_language.md),
// compiled at run time for any device, cached in memory and on disk.
//
//   constexpr const char* src = R"(
//     KILN_KERNEL void axpy(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, float a) {
//       uint64_t i = kiln_global_id(0);      // the launch range is exact: no bound check needed
//       y[i] = a * x[i] + y[i];
//     })";
//   kiln::program prog = kiln::program::compile(dev, src);   // cached: later calls are ~us
//   kiln::kernel axpy = prog.get_kernel("axpy");
//   axpy.launch(q, kiln::range(n), y, x, 2.0f);              // argument types are checked
//   axpy.launch(q, kiln::range(n), kiln::local_size(128), y, x, 2.0f);
//
//   // Checked mode: every x[i] on a buffer parameter is checked against the buffer's size and
//   // an index outside it throws kiln::out_of_bounds after the launch (it also follows
//   // KILN_CHECK=bounds, and is the default in Debug builds of Kiln).
//   auto checked = kiln::program::compile(dev, src, {}, kiln::check_mode::bounds);
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/device.hpp"
#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln {

// A 1-, 2- or 3-D launch range: global sizes, or work-group sizes with local_size.
struct range {
  std::uint64_t size[3] = {1, 1, 1};
  std::uint32_t dims = 1;
  explicit range(std::uint64_t x) : size{x, 1, 1}, dims(1) {}
  range(std::uint64_t x, std::uint64_t y) : size{x, y, 1}, dims(2) {}
  range(std::uint64_t x, std::uint64_t y, std::uint64_t z) : size{x, y, z}, dims(3) {}
};
struct local_size : range {
  using range::range;
};

// One kernel parameter as declared in the source.
struct kernel_param {
  std::string name;
  scalar_type type = scalar_type::f32;
  bool is_pointer = false;  // KILN_GLOBAL T*
  bool is_const = false;    // pointer to const
};

// Bounds checking of the buffer accesses of kernels (docs/kernel_language.md, "Checked mode").
enum class check_mode {
  automatic,  // KILN_CHECK=bounds|off from the environment; unset: bounds in Debug builds
  off,        // plain accesses
  bounds,     // every name[i] on a buffer parameter checked; launches wait for the kernel
};

namespace detail {
struct program_impl;
struct kernel_impl;

struct arg_binding {
  std::uint64_t scalar = 0;  // scalar value bytes (little end)
  memory_impl* mem = nullptr;
  std::uint64_t byte_offset = 0;
  std::uint64_t count = 0;  // elements of a buffer view (checked mode's bound)
  std::uint32_t size = 0;
  scalar_type type = scalar_type::f32;
  bool is_mem = false;
  bool is_const = false;
};

template <class A>
arg_binding bind_arg(const A& a) {
  arg_binding b;
  if constexpr (is_device_side<A>) {
    auto v = as_view(a);
    using E = typename decltype(v)::element_type;
    b.is_mem = true;
    b.type = scalar_type_of<std::remove_cv_t<E>>;
    b.is_const = std::is_const_v<E>;
    b.mem = v.memory().get();
    b.byte_offset = v.offset() * sizeof(E);
    b.count = v.size();
  } else if constexpr (scalar<A>) {
    b.type = scalar_type_of<A>;
    b.size = sizeof(A);
    std::memcpy(&b.scalar, &a, sizeof(A));
  } else {
    static_assert(always_false<A>,
                  "kiln::kernel::launch: arguments must be buffers, buffer views or scalars");
  }
  return b;
}

void launch(const kernel_impl& k, queue_impl& q, const range& global, const range* local,
            arg_binding* args, std::size_t num_args);
}  // namespace detail

class kernel {
 public:
  template <class... Args>
  void launch(queue& q, const range& global, const Args&... args) const {
    if (!impl_) detail::throw_empty_handle("kernel::launch", "kernel");
    if (!q.impl()) detail::throw_empty_handle("kernel::launch", "queue");
    std::array<detail::arg_binding, sizeof...(Args)> b{detail::bind_arg(args)...};
    detail::launch(*impl_, *q.impl(), global, nullptr, b.data(), b.size());
  }
  template <class... Args>
  void launch(queue& q, const range& global, const local_size& local, const Args&... args) const {
    if (!impl_) detail::throw_empty_handle("kernel::launch", "kernel");
    if (!q.impl()) detail::throw_empty_handle("kernel::launch", "queue");
    std::array<detail::arg_binding, sizeof...(Args)> b{detail::bind_arg(args)...};
    detail::launch(*impl_, *q.impl(), global, &local, b.data(), b.size());
  }

  const std::string& name() const;
  const std::vector<kernel_param>& params() const;
  std::uint32_t max_work_group_size() const;
  std::uint32_t preferred_work_group_size() const;

  explicit kernel(std::shared_ptr<detail::kernel_impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::kernel_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::kernel_impl> impl_;
};

class program {
 public:
  // Compiles (or fetches from the in-memory and disk caches) source for dev. `options` are
  // passed to the backend compiler; -DNAME=VALUE works on every backend. `checks` selects
  // checked mode; an unknown KILN_CHECK value is a kiln::invalid_argument.
  static program compile(const device& dev, std::string_view source, std::string_view options = {},
                         check_mode checks = check_mode::automatic);
  kernel get_kernel(std::string_view name) const;
  std::vector<std::string> kernel_names() const;
  const device& get_device() const;
  // Whether the program was compiled in checked mode (check_mode::bounds, resolved).
  bool checked() const;

  explicit program(std::shared_ptr<detail::program_impl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<detail::program_impl> impl_;
};

// Compiles source for a backend and architecture without a device ("cuda", "sm_90"): checks
// a dialect where the hardware is absent (NVRTC without a GPU). Throws compile_error.
void compile_only(std::string_view backend, std::string_view arch, std::string_view source,
                  std::string_view options = {}, check_mode checks = check_mode::automatic);

// Statistics of this process's kernel caches.
struct kernel_cache_stats {
  std::uint64_t memory_hits = 0, disk_hits = 0, compiles = 0, disk_rejects = 0;
};
kernel_cache_stats cache_stats();

}  // namespace kiln
