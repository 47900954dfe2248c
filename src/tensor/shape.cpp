#include "tensor/shape.hpp"

#include <algorithm>

namespace kiln {

std::string to_string(const shape_t& shape) {
  std::string s = "[";
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (k) s.append(", ");
    s.append(std::to_string(shape[k]));
  }
  return s.append("]");
}

}  // namespace kiln

namespace kiln::detail {

int normalise_axis(int dim, int rank, const char* what) {
  const int r = std::max(rank, 1);  // a rank-0 tensor accepts axes 0 and -1, as in PyTorch
  if (dim < -r || dim >= r)
    throw axis_error(std::string("kiln::tensor::") + what + ": dimension " + std::to_string(dim) +
                     " is out of range for a tensor of rank " + std::to_string(rank) +
                     " (expected [" + std::to_string(-r) + ", " + std::to_string(r - 1) + "])");
  return dim < 0 ? dim + r : dim;
}

void check_shape(const shape_t& s, const char* what) {
  if (s.size() > static_cast<std::size_t>(max_tensor_rank))
    throw shape_error(std::string("kiln::tensor::") + what + ": shape " + to_string(s) + " has " +
                      std::to_string(s.size()) + " dimensions; at most " +
                      std::to_string(max_tensor_rank) + " are supported");
  for (std::int64_t d : s)
    if (d < 0)
      throw shape_error(std::string("kiln::tensor::") + what + ": negative size in shape " +
                        to_string(s));
  // The element count must fit int64 (numel_of multiplies unchecked); a zero size makes it 0.
  if (std::find(s.begin(), s.end(), 0) != s.end()) return;
  std::int64_t n = 1;
  for (std::int64_t d : s)
    if (__builtin_mul_overflow(n, d, &n))
      throw shape_error(std::string("kiln::tensor::") + what + ": shape " + to_string(s) +
                        " has more elements than an int64 holds (overflow)");
}

shape_t broadcast_shapes(const shape_t& a, const shape_t& b) {
  shape_t out(std::max(a.size(), b.size()));
  for (std::size_t k = 0; k < out.size(); ++k) {
    const std::int64_t x = k < a.size() ? a[a.size() - 1 - k] : 1;
    const std::int64_t y = k < b.size() ? b[b.size() - 1 - k] : 1;
    if (x != y && x != 1 && y != 1)
      throw shape_error("kiln::tensor: shapes " + to_string(a) + " and " + to_string(b) +
                        " do not broadcast (dimension " + std::to_string(out.size() - 1 - k) +
                        ": " + std::to_string(x) + " vs " + std::to_string(y) + ")");
    out[out.size() - 1 - k] = x == 1 ? y : x;
  }
  return out;
}

shape_t infer_shape(const shape_t& want, std::int64_t n, const shape_t& from, const char* what) {
  shape_t s = want;
  int unknown = -1;
  std::int64_t known = 1;
  const auto fail = [&] {
    throw shape_error(std::string("kiln::tensor::") + what + ": shape " + to_string(want) +
                      " is invalid for a tensor of shape " + to_string(from) + " and " +
                      std::to_string(n) + " elements");
  };
  for (std::size_t k = 0; k < s.size(); ++k) {
    if (s[k] == -1) {
      if (unknown >= 0) fail();
      unknown = static_cast<int>(k);
    } else if (s[k] < 0) {
      fail();
    } else {
      known *= s[k];
    }
  }
  if (unknown >= 0) {
    if (known == 0 || n % known != 0) fail();
    s[static_cast<std::size_t>(unknown)] = n / known;
  } else if (known != n) {
    fail();
  }
  check_shape(s, what);
  return s;
}

}  // namespace kiln::detail
