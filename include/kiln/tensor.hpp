// kiln::tensor: an n-dimensional array on one device, with a run-time dtype, strided views that
// share storage, and lazy elementwise arithmetic fused into one generated kernel per evaluation.
//
//   const kiln::device dev = kiln::device::best();
//   auto a = kiln::tensor::from(dev, std::vector<float>{1, -2, 3, -4, 5, -6}, {2, 3});
//   auto b = kiln::tensor::arange(dev, 0, 3, 1, kiln::scalar_type::f32);   // [3]: broadcasts
//   auto c = kiln::relu(a * b + 1.f);        // lazy: records nodes, runs nothing
//   std::vector<float> v = c.to_vector<float>();   // one kernel launch for the whole expression
//   auto t = a.t().slice(0, 0, 3, 2);        // views, no copy: [2, 2], strides [2, 3]
//   float x = (t * t).slice(0, 0, 1).slice(1, 0, 1).item<float>();   // 1 * 1
//
// Promotion follows C++'s usual arithmetic conversions of the two element types (int8 + int8
// is int32, int + float is float, and a scalar operand has its own C++ type: f32 tensor * 2.0
// is f64, f32 tensor * 2.f is f32). docs/tensor.md has the rules, laziness and what is missing.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kiln/automatic.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln {

class tensor;
using shape_t = std::vector<std::int64_t>;
inline constexpr int max_tensor_rank = 8;

// What the last evaluating call (to_vector, item, eval, contiguous, a view of a lazy tensor)
// of this thread ran: generated kernels launched and programs compiled (cache misses that ran a
// compiler). relu(a * b + c) is one launch; a new scalar value compiles nothing.
struct tensor_stats {
  std::uint64_t kernel_launches = 0;
  std::uint64_t programs_compiled = 0;
};
tensor_stats last_tensor_stats();

namespace detail {
struct tensor_impl;
enum class unary_op : std::uint8_t { neg, abs, sqrt, exp, log, sin, cos, tanh, relu, sigmoid };
enum class binary_op : std::uint8_t { add, sub, mul, div, lt, le, gt, ge, eq, ne };
tensor tensor_from_host(const device& dev, scalar_type t, const void* data, std::uint64_t count,
                        const shape_t& shape);
// Checks the dtype (dtype_error) and count, evaluates, and copies numel elements to dst.
void tensor_read(const tensor& x, scalar_type want, void* dst, std::uint64_t count);
tensor scalar_like(const tensor& like, scalar_type t, std::uint64_t bits);
tensor binary(binary_op o, const tensor& a, const tensor& b);
tensor unary(unary_op o, const tensor& a);
tensor full_bits(const device& dev, const shape_t& shape, scalar_type dtype, scalar_type from,
                 std::uint64_t bits);
tensor clamp_bits(const tensor& x, scalar_type from, std::uint64_t lo, std::uint64_t hi);
// x marked kiln::automatic (x must be a new stored tensor no other handle shares).
tensor automatic_of(tensor x);
template <scalar T>
std::uint64_t bits_of(T v) {
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof v);
  return b;
}
}  // namespace detail

// Reduced axes: one (x.sum(1)), a list (x.sum({0, 2})), or none (x.sum(): every axis).
// Negative axes count from the end.
struct axes {
  axes() = default;
  axes(int a) : list{a} {}
  axes(std::initializer_list<int> l) : list(l) {}
  axes(std::vector<int> l) : list(std::move(l)) {}
  std::vector<int> list;
};

class tensor {
 public:
  tensor() = default;  // undefined: every operation on it throws kiln::invalid_argument

  // ---- creation ----
  // Copies host data; numel(shape) must equal data.size() (else kiln::shape_error). Without a
  // shape: 1-D of data.size() elements; shape {} is rank 0 (one element).
  template <scalar T>
  static tensor from(const device& dev, std::span<const T> data, const shape_t& shape) {
    return detail::tensor_from_host(dev, scalar_type_of<T>, data.data(), data.size(), shape);
  }
  template <scalar T>
  static tensor from(const device& dev, std::span<const T> data) {
    return from(dev, data, shape_t{static_cast<std::int64_t>(data.size())});
  }
  template <scalar T>
  static tensor from(const device& dev, const std::vector<T>& data) {
    return from(dev, data, shape_t{static_cast<std::int64_t>(data.size())});
  }
  template <scalar T>
  static tensor from(const device& dev, const std::vector<T>& data, const shape_t& shape) {
    if constexpr (std::is_same_v<T, bool>) {  // std::vector<bool> is not contiguous
      std::unique_ptr<bool[]> tmp(new bool[data.size()]);
      for (std::size_t i = 0; i < data.size(); ++i) tmp[i] = data[i];
      return from(dev, std::span<const bool>(tmp.get(), data.size()), shape);
    } else {
      return from(dev, std::span<const T>(data), shape);
    }
  }
  // kiln::automatic in place of a device: the tensor is created on the host CPU
  // (device::host()) and marked automatic; each operation over it then runs where the
  // placement rule says and moves it there (docs/placement.md). Results of operations over
  // automatic tensors are automatic, as are their views.
  template <scalar T>
  static tensor from(automatic_t, std::span<const T> data, const shape_t& shape) {
    return detail::automatic_of(from(device::host(), data, shape));
  }
  template <scalar T>
  static tensor from(automatic_t, std::span<const T> data) {
    return detail::automatic_of(from(device::host(), data));
  }
  template <scalar T>
  static tensor from(automatic_t, const std::vector<T>& data) {
    return detail::automatic_of(from(device::host(), data));
  }
  template <scalar T>
  static tensor from(automatic_t, const std::vector<T>& data, const shape_t& shape) {
    return detail::automatic_of(from(device::host(), data, shape));
  }
  static tensor empty(const device& dev, const shape_t& shape,
                      scalar_type dtype = scalar_type::f32);
  static tensor zeros(const device& dev, const shape_t& shape,
                      scalar_type dtype = scalar_type::f32);
  static tensor ones(const device& dev, const shape_t& shape, scalar_type dtype = scalar_type::f32);
  template <scalar T>
  static tensor full(const device& dev, const shape_t& shape, scalar_type dtype, T value) {
    return detail::full_bits(dev, shape, dtype, scalar_type_of<T>, detail::bits_of(value));
  }
  // ceil((end - start) / step) values start, start + step, ...; lazy (generated on evaluation).
  static tensor arange(const device& dev, double start, double end, double step = 1,
                       scalar_type dtype = scalar_type::f32);
  // steps values from start to end inclusive (PyTorch): step = (end - start) / (steps - 1),
  // the first steps / 2 values start + i * step, the rest end - (steps - 1 - i) * step, so both
  // ends are exact; steps 1 gives {start}, 0 an empty tensor. Computed in double, converted to
  // dtype (static_cast). Evaluated at once (one kernel).
  static tensor linspace(const device& dev, double start, double end, std::int64_t steps,
                         scalar_type dtype = scalar_type::f32);
  // Seeded counter-based random numbers (f32 or f64, else kiln::dtype_error), evaluated at once:
  // element i (flat, row-major) is Philox4x32-10 keyed by seed at counter i, so it depends only
  // on (seed, i, dtype): the same on every device and for every shape of as many or more
  // elements. rand: uniform in [0, 1) from the top 24 (f32) / 53 (f64) random bits, bit-identical
  // on every backend. randn: standard normal (Box-Muller, cosine branch), equal across backends
  // to within their math libraries' log/cos/sqrt (a few ulp). docs/tensor.md has the details.
  static tensor rand(const device& dev, const shape_t& shape, std::uint64_t seed,
                     scalar_type dtype = scalar_type::f32);
  static tensor randn(const device& dev, const shape_t& shape, std::uint64_t seed,
                      scalar_type dtype = scalar_type::f32);
  // The same on the host CPU, marked kiln::automatic (see from(kiln::automatic, ...)).
  static tensor empty(automatic_t, const shape_t& shape, scalar_type dtype = scalar_type::f32);
  static tensor zeros(automatic_t, const shape_t& shape, scalar_type dtype = scalar_type::f32);
  static tensor ones(automatic_t, const shape_t& shape, scalar_type dtype = scalar_type::f32);
  template <scalar T>
  static tensor full(automatic_t, const shape_t& shape, scalar_type dtype, T value) {
    return detail::automatic_of(full(device::host(), shape, dtype, value));
  }
  static tensor arange(automatic_t, double start, double end, double step = 1,
                       scalar_type dtype = scalar_type::f32);
  static tensor linspace(automatic_t, double start, double end, std::int64_t steps,
                         scalar_type dtype = scalar_type::f32);
  static tensor rand(automatic_t, const shape_t& shape, std::uint64_t seed,
                     scalar_type dtype = scalar_type::f32);
  static tensor randn(automatic_t, const shape_t& shape, std::uint64_t seed,
                      scalar_type dtype = scalar_type::f32);

  // ---- properties ----
  bool defined() const noexcept { return impl_ != nullptr; }
  std::int64_t numel() const;
  int dim() const;
  const shape_t& shape() const;
  std::int64_t size(int d) const;  // negative d counts from the end
  // Strides in elements. A lazy tensor reports the contiguous strides it will have.
  shape_t strides() const;
  std::int64_t storage_offset() const;
  scalar_type dtype() const;
  const device& get_device() const;
  bool is_contiguous() const;
  bool is_lazy() const;  // an unevaluated expression
  // Placed by kiln::automatic: get_device() says where it lives now (docs/placement.md).
  bool is_automatic() const;

  // ---- memory shared with other libraries (DLPack, PyTorch, CuPy, NumPy) ----
  // The address of the first element (the view's offset applied) in the device's address
  // space: a host pointer on the CPU, a device pointer on CUDA. Evaluates a lazy tensor first
  // and waits for the device's default queue, so the memory holds the values. Valid while a
  // tensor sharing the storage lives. kiln::unsupported on backends whose memory has no address
  // (OpenCL buffers), kiln::invalid_argument for an undefined tensor.
  //
  //   float* p = static_cast<float*>(t.contiguous().data_ptr());   // cpu: read in place
  void* data_ptr() const;
  // Memory another library owns, as a stored tensor without a copy: `data` on dev (a host
  // pointer on the CPU, a device pointer of that GPU on CUDA), shape, strides in elements
  // (empty: contiguous; non-negative), and `release`, called once after the last tensor using
  // the memory is gone and every queue that used it has finished. kiln::unsupported on backends
  // without addresses; kiln::invalid_argument for a null pointer with elements or a negative
  // stride. Kiln cannot check that `data` really is dev's memory: that is the caller's promise.
  static tensor from_external(const device& dev, void* data, const shape_t& shape,
                              scalar_type dtype, const shape_t& strides,
                              std::function<void()> release);

  // ---- evaluation and reading back ----
  const tensor& eval() const;  // runs the expression's one kernel (no-op when materialised)
  template <scalar T>
  std::vector<T> to_vector() const {
    const auto n = static_cast<std::size_t>(numel());
    if constexpr (std::is_same_v<T, bool>) {
      std::unique_ptr<bool[]> tmp(new bool[n]);
      detail::tensor_read(*this, scalar_type::boolean, tmp.get(), n);
      return std::vector<bool>(tmp.get(), tmp.get() + n);
    } else {
      std::vector<T> out(n);
      detail::tensor_read(*this, scalar_type_of<T>, out.data(), n);
      return out;
    }
  }
  // The one element (numel must be 1, else kiln::shape_error).
  template <scalar T>
  T item() const {
    T v{};
    detail::tensor_read(*this, scalar_type_of<T>, &v, 1);
    return v;
  }

  // ---- views: share storage (a lazy tensor is evaluated first) ----
  tensor view(const shape_t& shape) const;     // contiguous only; one -1 inferred
  tensor reshape(const shape_t& shape) const;  // a view when possible, else a contiguous copy
  tensor permute(const std::vector<int>& dims) const;
  tensor transpose(int a, int b) const;
  tensor t() const;  // 2-D (or fewer) only
  // Python slicing: negative start/end count from the end, clamped to [0, size]; step >= 1.
  tensor slice(int dim, std::int64_t start, std::int64_t end, std::int64_t step = 1) const;
  tensor expand(const shape_t& shape) const;  // size-1 dims to any size (-1 keeps), new leading
  tensor squeeze() const;
  tensor squeeze(int dim) const;
  tensor unsqueeze(int dim) const;
  tensor contiguous() const;  // itself when contiguous, else a copy (one strided-copy kernel)
  tensor to(scalar_type dtype) const;  // lazy elementwise conversion (C++ static_cast)
  // A handle to the same elements marked kiln::automatic (a lazy tensor is evaluated first,
  // where it is); this handle is left as it is. Itself when already automatic.
  tensor to(automatic_t) const;
  // A copy of the elements on `dev` (through the host where need be; a lazy tensor is
  // evaluated first, where it is), fixed there; itself when already on dev. Not recorded for
  // autograd: gradients do not flow back through the copy.
  tensor to(const device& dev) const;

  // ---- reductions: lazy, and fused with the elementwise work before and after them ----
  // relu(a * b + c).sum(1) is one kernel; so is x.mean({0, 2}, true) and (x * x).sum().
  // keepdim keeps each reduced axis as size 1. Integer and bool sums are int64 (uint64 for
  // unsigned types); mean, var, std and norm of integers are double. max/min/argmax/argmin
  // of no elements is a kiln::shape_error; NaN wins max and min, argmax/argmin return the
  // first NaN's or first extreme's index.
  tensor sum(const axes& a = {}, bool keepdim = false) const;
  tensor mean(const axes& a = {}, bool keepdim = false) const;
  tensor max(const axes& a = {}, bool keepdim = false) const;
  tensor min(const axes& a = {}, bool keepdim = false) const;
  // Index along `dim`, or into the flattened tensor when dim is none (every axis).
  tensor argmax(const axes& dim = {}, bool keepdim = false) const;
  tensor argmin(const axes& dim = {}, bool keepdim = false) const;
  // sum((x - mean)^2) / (N - correction): two kernels (the mean, then the rest).
  tensor var(const axes& a = {}, std::int64_t correction = 1, bool keepdim = false) const;
  tensor std(const axes& a = {}, std::int64_t correction = 1, bool keepdim = false) const;
  // (sum |x|^p)^(1/p); p = 2, 1, 0 (count of non-zeros) and +-infinity (max/min of |x|).
  tensor norm(double p = 2, const axes& a = {}, bool keepdim = false) const;
  // exp(x - max) / sum(exp(x - max)) along dim, and its logarithm, computed stably.
  tensor softmax(int dim) const;
  tensor log_softmax(int dim) const;

  // ---- autograd (kiln/tensor/autograd.hpp, docs/autograd.md) ----
  // Marks a leaf (a tensor no recorded operation produced) of a floating dtype as a parameter
  // whose gradient backward() accumulates into grad(); returns *this. Else kiln::invalid_argument
  // (a non-leaf) or kiln::dtype_error (an integer or bool tensor).
  tensor& requires_grad_(bool on = true);
  // A leaf marked requires_grad_, or the result of an operation recorded over one.
  bool requires_grad() const;
  bool is_leaf() const;  // no recorded operation produced it
  // The accumulated gradient (undefined before the first backward, or for non-leaves unless
  // retain_grad() was called). set_grad replaces it (shape and dtype must match, or undefined).
  tensor grad() const;
  void set_grad(const tensor& g) const;
  void retain_grad() const;  // a non-leaf keeps its gradient in grad() too
  // Reverse mode from this tensor: from a single element (gradient 1), or with `gradient` of
  // this tensor's shape. Leaves' grad() accumulate (+=). The recorded graph is freed afterwards
  // unless retain_graph; a second backward through a freed graph is kiln::invalid_argument.
  void backward(const tensor& gradient = {}, bool retain_graph = false) const;
  // The same elements (shared storage; a lazy tensor is evaluated first), outside the graph.
  tensor detach() const;

  explicit tensor(std::shared_ptr<detail::tensor_impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::tensor_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::tensor_impl> impl_;
};

// ---- lazy elementwise operations (NumPy broadcasting) ----
#define KILN_TENSOR_BINARY(sym, name)                                                        \
  inline tensor operator sym(const tensor& a, const tensor& b) {                             \
    return detail::binary(detail::binary_op::name, a, b);                                    \
  }                                                                                          \
  template <scalar T>                                                                        \
  tensor operator sym(const tensor& a, T b) {                                                \
    return detail::binary(detail::binary_op::name, a,                                        \
                          detail::scalar_like(a, scalar_type_of<T>, detail::bits_of(b)));    \
  }                                                                                          \
  template <scalar T>                                                                        \
  tensor operator sym(T a, const tensor& b) {                                                \
    return detail::binary(detail::binary_op::name,                                           \
                          detail::scalar_like(b, scalar_type_of<T>, detail::bits_of(a)), b); \
  }
KILN_TENSOR_BINARY(+, add)
KILN_TENSOR_BINARY(-, sub)
KILN_TENSOR_BINARY(*, mul)
KILN_TENSOR_BINARY(/, div)
KILN_TENSOR_BINARY(<, lt)
KILN_TENSOR_BINARY(<=, le)
KILN_TENSOR_BINARY(>, gt)
KILN_TENSOR_BINARY(>=, ge)
KILN_TENSOR_BINARY(==, eq)
KILN_TENSOR_BINARY(!=, ne)
#undef KILN_TENSOR_BINARY

// neg and abs promote as C++ does (bool, 8- and 16-bit integers to int32); the math functions
// give the operand's type for float and double, double for integers and bool (as std::sqrt).
#define KILN_TENSOR_UNARY(name) \
  inline tensor name(const tensor& a) { return detail::unary(detail::unary_op::name, a); }
KILN_TENSOR_UNARY(neg)
KILN_TENSOR_UNARY(abs)
KILN_TENSOR_UNARY(sqrt)
KILN_TENSOR_UNARY(exp)
KILN_TENSOR_UNARY(log)
KILN_TENSOR_UNARY(sin)
KILN_TENSOR_UNARY(cos)
KILN_TENSOR_UNARY(tanh)
KILN_TENSOR_UNARY(relu)     // max(x, 0) in x's type
KILN_TENSOR_UNARY(sigmoid)  // 1 / (1 + exp(-x))
#undef KILN_TENSOR_UNARY
inline tensor operator-(const tensor& a) { return neg(a); }
// More math, lazy. tan, rsqrt (1 / sqrt) and gelu promote like sqrt (integers give double);
// square is x * x in C++'s type (int8 gives int32); floor and ceil keep the dtype (integers are
// copied unchanged). gelu: x * 0.5 * (1 + erf(x / sqrt(2))) (PyTorch's default), or with
// approximate "tanh" 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3))); any other
// string is kiln::invalid_argument.
tensor tan(const tensor& a);
tensor rsqrt(const tensor& a);
tensor square(const tensor& a);
tensor floor(const tensor& a);
tensor ceil(const tensor& a);
tensor gelu(const tensor& a, const std::string& approximate = "none");
// pow(a, b): a and b promote to their common type, then as the math functions do (float and
// double kept, integers give double): pow(f32, 2) is f32, pow(f32, 2.0) is f64 (C++'s rule).
tensor pow(const tensor& a, const tensor& b);
template <scalar T>
tensor pow(const tensor& a, T b) {
  return pow(a, detail::scalar_like(a, scalar_type_of<T>, detail::bits_of(b)));
}
template <scalar T>
tensor pow(T a, const tensor& b) {
  return pow(detail::scalar_like(b, scalar_type_of<T>, detail::bits_of(a)), b);
}
// Elementwise std::min / std::max in the common type (NumPy broadcasting). As std::min, a NaN
// is not propagated when it is the second operand (PyTorch propagates it from either side).
tensor minimum(const tensor& a, const tensor& b);
tensor maximum(const tensor& a, const tensor& b);
template <scalar T>
tensor minimum(const tensor& a, T b) {
  return minimum(a, detail::scalar_like(a, scalar_type_of<T>, detail::bits_of(b)));
}
template <scalar T>
tensor maximum(const tensor& a, T b) {
  return maximum(a, detail::scalar_like(a, scalar_type_of<T>, detail::bits_of(b)));
}
template <scalar T>
tensor minimum(T a, const tensor& b) {
  return minimum(detail::scalar_like(b, scalar_type_of<T>, detail::bits_of(a)), b);
}
template <scalar T>
tensor maximum(T a, const tensor& b) {
  return maximum(detail::scalar_like(b, scalar_type_of<T>, detail::bits_of(a)), b);
}

// cond ? a : b elementwise; cond is read as bool; a and b promote to their common type.
tensor where(const tensor& cond, const tensor& a, const tensor& b);
template <scalar T>
tensor where(const tensor& cond, const tensor& a, T b) {
  return where(cond, a, detail::scalar_like(a, scalar_type_of<T>, detail::bits_of(b)));
}
template <scalar T>
tensor where(const tensor& cond, T a, const tensor& b) {
  return where(cond, detail::scalar_like(b, scalar_type_of<T>, detail::bits_of(a)), b);
}
// min(max(x, lo), hi) in x's dtype: the bounds are converted to it (PyTorch's rule).
template <scalar T>
tensor clamp(const tensor& x, T lo, T hi) {
  return detail::clamp_bits(x, scalar_type_of<T>, detail::bits_of(lo), detail::bits_of(hi));
}

inline tensor softmax(const tensor& x, int dim) { return x.softmax(dim); }
inline tensor log_softmax(const tensor& x, int dim) { return x.log_softmax(dim); }

// "[2, 3]": how error messages spell shapes.
std::string to_string(const shape_t& shape);

}  // namespace kiln
#include "kiln/tensor/autocast.hpp"   // mixed precision: matrix products in bf16/f16
#include "kiln/tensor/autograd.hpp"   // no_grad, custom differentiable functions
#include "kiln/tensor/linalg.hpp"     // matmul, gemm, gemv, transposes
#include "kiln/tensor/placement.hpp"  // kiln::automatic's thresholds, last_placement
