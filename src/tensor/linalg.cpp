// matmul, gemm and gemv on tensors: operand checks, then each operand's last two dimensions
// mapped onto kiln::linalg's row-major (leading dimension) or transposed layout and its batch
// dimensions onto one batch stride. Layouts linalg cannot take are copied contiguous first:
// matrices with neither dimension at unit stride, batch dimensions that do not collapse to one
// stride, and broadcast batches (linalg reads a 0 batch stride as "tight"), except a right
// operand broadcast over the whole batch, which folds the batch into the rows of the left one.
#include "kiln/tensor/linalg.hpp"

#include <optional>
#include <string>

#include "autograd/derivatives.hpp"
#include "kiln/linalg.hpp"
#include "linalg/linalg.hpp"
#include "runtime/runtime.hpp"
#include "tensor/autocast_rules.hpp"
#include "tensor/fallback.hpp"
#include "tensor/placement.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

using detail::tensor_impl;

tensor_impl& evaluated(const tensor& t, const char* fn, const char* name) {
  if (!t.impl()) throw invalid_argument(std::string("kiln::") + fn + ": " + name + " is undefined");
  detail::materialise(*t.impl());
  return *t.impl();
}

struct layout {
  bool trans;       // stored column-major: the operand is the transpose of a row-major matrix
  std::int64_t ld;  // the stored matrix's row pitch, at least its columns (never 0)
};

// The last two dimensions of x (r x c, strides sr, sc) as a linalg operand, when they are one.
std::optional<layout> layout_of(const tensor_impl& x) {
  const std::size_t d = x.shape.size();
  const std::int64_t r = x.shape[d - 2], c = x.shape[d - 1];
  const std::int64_t sr = x.strides[d - 2], sc = x.strides[d - 1];
  if (r == 0 || c == 0) return layout{false, std::max<std::int64_t>(c, 1)};
  if (c == 1 || sc == 1) {
    const std::int64_t ld = r == 1 ? c : sr;
    if (ld >= c) return layout{false, ld};
  }
  if (r == 1 || sr == 1) {
    const std::int64_t ld = c == 1 ? r : sc;
    if (ld >= r) return layout{true, ld};
  }
  return std::nullopt;
}

// The one stride that steps through x's batch dimensions read over `batch` (right-aligned,
// NumPy broadcasting: missing and size-1 dimensions step by 0); nullopt when they do not
// collapse to one. 0 with more than one matrix: x is broadcast over the whole batch.
std::optional<std::int64_t> batch_stride(const tensor_impl& x, const shape_t& batch) {
  const std::size_t nb = x.shape.size() - 2, lead = batch.size() - nb;
  std::optional<std::int64_t> inner;
  std::int64_t next = 0;
  for (std::size_t k = batch.size(); k-- > 0;) {
    if (batch[k] == 1) continue;
    const bool bcast = k < lead || x.shape[k - lead] == 1;
    const std::int64_t st = bcast ? 0 : x.strides[k - lead];
    if (inner && st != next) return std::nullopt;
    if (!inner) inner = st;
    next = st * batch[k];
  }
  return inner.value_or(0);
}

linalg::detail::operand operand_of(const tensor_impl& x) {
  const std::uint64_t total = x.mem->bytes / size_of(x.dtype);
  const auto off = static_cast<std::uint64_t>(x.offset);
  return {x.mem.get(), off, total > off ? total - off : 0};
}

shape_t batch_of(const shape_t& s) { return shape_t(s.begin(), s.end() - 2); }

shape_t with_matrix(shape_t batch, std::int64_t r, std::int64_t c) {
  batch.push_back(r);
  batch.push_back(c);
  return batch;
}

// x's batch dims broadcast (right-aligned) to `to`'s.
bool broadcasts_to(const shape_t& x, const shape_t& to) {
  if (x.size() > to.size()) return false;
  for (std::size_t k = 0; k < x.size(); ++k) {
    const std::int64_t have = x[x.size() - 1 - k], want = to[to.size() - 1 - k];
    if (have != want && have != 1) return false;
  }
  return true;
}

struct prepared {
  tensor t;
  layout l;
  std::int64_t stride;  // batch stride, 0 with one matrix
};

// An operand linalg takes as it is, or its contiguous copy broadcast to the whole batch.
prepared prepare(const tensor& x, const shape_t& batch, std::int64_t nbatch) {
  const tensor_impl& xi = *x.impl();
  const auto l = layout_of(xi);
  const auto s = batch_stride(xi, batch);
  if (l && s && (nbatch <= 1 || *s > 0)) return {x, *l, nbatch > 1 ? *s : 0};
  const std::int64_t r = x.size(-2), c = x.size(-1);
  const std::size_t d = xi.shape.size();
  if (r > 1 && c > 1 && xi.strides[d - 2] == 1 && xi.strides[d - 1] != 1) {
    // Stored column by column (a transposed view, attention's k^T): copy its transpose, whose
    // rows are contiguous in memory (a copy at copy speed, not a transpose), and take it
    // transposed.
    const tensor copy = detail::contiguous_of(x.transpose(-1, -2).expand(with_matrix(batch, c, r)));
    return {copy, layout{true, r}, nbatch > 1 ? r * c : 0};
  }
  const tensor copy = detail::contiguous_of(x.expand(with_matrix(batch, r, c)));
  return {copy, layout{false, std::max<std::int64_t>(c, 1)}, nbatch > 1 ? r * c : 0};
}

// Whether c = a b with b and c single columns (b laid out as lb, c's row pitch ldc) runs as a
// GEMV: 16-bit operands on a device whose BLAS takes 16-bit GEMVs, b and c at unit stride.
bool vector_product(queue& q, const tensor_impl& c, const layout& lb, std::int64_t ldc) {
  if (!is_reduced_float(c.dtype) || (!lb.trans && lb.ld != 1) || ldc != 1) return false;
  return q.impl()->dev->supports_op(KILN_OP_GEMV, linalg::detail::dtype_of(c.dtype));
}

// c = alpha a b + beta c over c's batch; a [..., m, k], b [..., k, n] stored, their batch
// dimensions broadcasting to c's (checked by the callers), all on one device and of one dtype.
void gemm_into(const tensor& a, const tensor& b, const tensor& c, double alpha, double beta,
               bool tf32) {
  const tensor_impl& ci = *c.impl();
  if (detail::numel_of(ci.shape) == 0) return;
  const std::optional<layout> cl = layout_of(ci);
  const shape_t batch = batch_of(ci.shape);
  const auto cs = batch_stride(ci, batch);
  const std::int64_t nbatch = detail::numel_of(batch);
  const std::int64_t m = c.size(-2), n = c.size(-1), k = a.size(-1);
  if (!cl || !cs || (nbatch > 1 && *cs == 0))
    throw invalid_argument("kiln::gemm: the output of shape " + to_string(ci.shape) +
                           " and strides " + to_string(ci.strides) +
                           " is not a batch of row- or column-major matrices at one stride "
                           "(make it contiguous)");
  if (cl->trans) {  // C^T = B^T A^T, with C^T row-major
    gemm_into(b.transpose(-1, -2), a.transpose(-1, -2), c.transpose(-1, -2), alpha, beta, tf32);
    return;
  }
  linalg::gemm_shape s{};
  s.n = static_cast<std::uint64_t>(n), s.k = static_cast<std::uint64_t>(k);
  s.ldc = static_cast<std::uint64_t>(cl->ld);
  prepared pa{a, {}, 0}, pb{b, {}, 0};
  // b broadcast over the whole batch, a's batch and rows one row-major run, c's too: one
  // (batch m) x k by k x n product.
  const auto la = layout_of(*a.impl()), lb = layout_of(*b.impl());
  const auto sa = batch_stride(*a.impl(), batch), sb = batch_stride(*b.impl(), batch);
  const bool fold = nbatch > 1 && lb && sb && *sb == 0 && la && !la->trans && sa &&
                    *sa == m * la->ld && *cs == m * cl->ld;
  if (fold) {
    pa = {a, *la, 0};
    pb = {b, *lb, 0};
    s.m = static_cast<std::uint64_t>(nbatch * m);
    s.batch = 1;
  } else {
    pa = prepare(a, batch, nbatch);
    pb = prepare(b, batch, nbatch);
    s.m = static_cast<std::uint64_t>(m);
    s.batch = static_cast<std::uint64_t>(nbatch);
    s.stride_a = static_cast<std::uint64_t>(pa.stride);
    s.stride_b = static_cast<std::uint64_t>(pb.stride);
    s.stride_c = nbatch > 1 ? static_cast<std::uint64_t>(*cs) : 0;
  }
  s.lda = static_cast<std::uint64_t>(pa.l.ld);
  s.ldb = static_cast<std::uint64_t>(pb.l.ld);
  queue& q = ci.dev.default_queue();
  if (s.batch == 1 && n == 1 && vector_product(q, ci, pb.l, cl->ld)) {
    // c = a b with one column: a GEMV. A device whose BLAS takes 16-bit GEMVs (the CPU's:
    // row blocks widened per task) would otherwise widen the whole of a for its GEMM first.
    linalg::gemv_shape v{};
    v.m = static_cast<std::uint64_t>(pa.l.trans ? k : m);
    v.n = static_cast<std::uint64_t>(pa.l.trans ? m : k);
    v.lda = static_cast<std::uint64_t>(pa.l.ld);
    linalg::detail::gemv(q, ci.dtype, operand_of(*pa.t.impl()), operand_of(*pb.t.impl()),
                         operand_of(ci), v, linalg::gemv_options{pa.l.trans, alpha, beta});
    if (linalg::last_path() != linalg::path::none) detail::stats_now().kernel_launches++;
    return;
  }
  const linalg::gemm_options o{pa.l.trans, pb.l.trans, alpha, beta, tf32};
  linalg::detail::gemm(q, ci.dtype, operand_of(*pa.t.impl()), operand_of(*pb.t.impl()),
                       operand_of(ci), s, o);
  if (linalg::last_path() != linalg::path::none) detail::stats_now().kernel_launches++;
}

[[noreturn]] void shapes_fail(const char* fn, const std::string& what, const shape_t& a,
                              const shape_t& b) {
  throw shape_error(std::string("kiln::") + fn + ": " + what + " (shapes " + to_string(a) +
                    " and " + to_string(b) + ")");
}

tensor matmul_forward(const tensor& a, const tensor& b, const matmul_options& o) {
  detail::reset_stats();
  detail::check_float_operands("matmul", {{"a", &a}, {"b", &b}}, true);
  const shape_t as = a.shape(), bs = b.shape();
  if (as.empty() || bs.empty())
    shapes_fail("matmul", "both operands need at least 1 dimension", as, bs);
  const tensor_impl& ai = evaluated(a, "matmul", "a");
  evaluated(b, "matmul", "b");
  const tensor A = as.size() == 1 ? a.unsqueeze(0) : a;
  const tensor B = bs.size() == 1 ? b.unsqueeze(-1) : b;
  const std::int64_t m = A.size(-2), k = A.size(-1), n = B.size(-1);
  if (B.size(-2) != k)
    shapes_fail("matmul",
                "inner sizes differ: " + std::to_string(k) + " vs " + std::to_string(B.size(-2)),
                as, bs);
  const shape_t ab = batch_of(A.shape()), bb = batch_of(B.shape());
  shape_t batch(std::max(ab.size(), bb.size()));
  for (std::size_t j = 0; j < batch.size(); ++j) {
    const std::int64_t x = j < ab.size() ? ab[ab.size() - 1 - j] : 1;
    const std::int64_t y = j < bb.size() ? bb[bb.size() - 1 - j] : 1;
    if (x != y && x != 1 && y != 1)
      shapes_fail(
          "matmul",
          "batch dimensions do not broadcast: " + std::to_string(x) + " vs " + std::to_string(y),
          as, bs);
    batch[batch.size() - 1 - j] = x == 1 ? y : x;
  }
  // kiln::automatic operands: the device by the rule, operands moved there (views too).
  const detail::placed p = detail::place(
      op_class::gemm, {a.impl().get(), b.impl().get(), A.impl().get(), B.impl().get()},
      2.0 * double(m) * double(n) * double(k) * double(detail::numel_of(batch)));
  auto c = detail::allocate_tensor(ai.dev, with_matrix(batch, m, n), ai.dtype);
  c->automatic = p.automatic;
  const tensor out(c);
  gemm_into(A, B, out, 1, 0, o.tf32);
  // Drop the promoted dimensions: c is contiguous, so this is only a new shape.
  shape_t shape = batch;
  if (as.size() > 1) shape.push_back(m);
  if (bs.size() > 1) shape.push_back(n);
  c->shape = shape;
  c->strides = detail::contiguous_strides(shape);
  return out;
}

}  // namespace

tensor matmul(const tensor& a0, const tensor& b0, const matmul_options& o) {
  // Inside a kiln::autocast scope, f32 operands run in the scope's 16-bit type.
  const tensor a = detail::autocast_narrow(a0), b = detail::autocast_narrow(b0);
  if (!detail::grad_wanted({&a, &b}))  // recorded operations do not move: see fallback.hpp
    return detail::run_op_falling_back("matmul", {a, b}, [&](const std::vector<tensor>& x) {
      return matmul_forward(x[0], x[1], o);
    });
  tensor out;
  {
    no_grad off;
    out = matmul_forward(a, b, o);
  }
  return detail::grad::matmul(a, b, o, out);
}

tensor gemm(const tensor& a, const tensor& b, const tensor& c, double alpha, double beta,
            bool trans_a, bool trans_b, const matmul_options& o) {
  detail::reset_stats();
  detail::check_float_operands("gemm", {{"a", &a}, {"b", &b}, {"c", &c}}, true);
  detail::refuse_in_place("gemm", {&a, &b, &c});
  for (const auto& [name, t] : {std::pair{"a", &a}, {"b", &b}, {"c", &c}})
    if (t->dim() < 2)
      throw shape_error(std::string("kiln::gemm: ") + name +
                        " needs at least 2 dimensions, got shape " + to_string(t->shape()));
  evaluated(a, "gemm", "a");
  evaluated(b, "gemm", "b");
  evaluated(c, "gemm", "c");
  const tensor A = trans_a ? a.transpose(-1, -2) : a;
  const tensor B = trans_b ? b.transpose(-1, -2) : b;
  if (A.size(-1) != B.size(-2))
    shapes_fail("gemm",
                "inner sizes of op(a) and op(b) differ: " + std::to_string(A.size(-1)) + " vs " +
                    std::to_string(B.size(-2)),
                A.shape(), B.shape());
  const shape_t cb = batch_of(c.shape());
  if (c.size(-2) != A.size(-2) || c.size(-1) != B.size(-1) ||
      !broadcasts_to(batch_of(A.shape()), cb) || !broadcasts_to(batch_of(B.shape()), cb))
    throw shape_error("kiln::gemm: c has shape " + to_string(c.shape()) + " but op(a) " +
                      to_string(A.shape()) + " times op(b) " + to_string(B.shape()) + " gives " +
                      to_string(with_matrix(cb, A.size(-2), B.size(-1))) +
                      " (a's and b's batch dimensions must broadcast to c's)");
  const detail::placed p = detail::place(
      op_class::gemm,
      {a.impl().get(), b.impl().get(), c.impl().get(), A.impl().get(), B.impl().get()},
      2.0 * double(c.size(-2)) * double(c.size(-1)) * double(A.size(-1)) *
          double(detail::numel_of(cb)));
  gemm_into(A, B, c, alpha, beta, o.tf32);
  return c;
}

tensor gemv(const tensor& a, const tensor& x, const tensor& y, double alpha, double beta,
            bool trans) {
  detail::reset_stats();
  detail::check_float_operands("gemv", {{"a", &a}, {"x", &x}, {"y", &y}}, true);
  detail::refuse_in_place("gemv", {&a, &x, &y});
  if (a.dim() != 2 || x.dim() != 1 || y.dim() != 1)
    throw shape_error("kiln::gemv: expects a 2-D a and 1-D x and y, got shapes " +
                      to_string(a.shape()) + ", " + to_string(x.shape()) + " and " +
                      to_string(y.shape()));
  const tensor_impl& ai = evaluated(a, "gemv", "a");
  evaluated(x, "gemv", "x");
  const tensor_impl& yi = evaluated(y, "gemv", "y");
  const tensor A = trans ? a.t() : a;
  if (A.size(1) != x.size(0) || A.size(0) != y.size(0))
    throw shape_error("kiln::gemv: op(a) has shape " + to_string(A.shape()) + ", x " +
                      to_string(x.shape()) + " and y " + to_string(y.shape()) + " (expected [" +
                      std::to_string(A.size(1)) + "] and [" + std::to_string(A.size(0)) + "])");
  const detail::placed p = detail::place(
      op_class::gemm, {a.impl().get(), x.impl().get(), y.impl().get(), A.impl().get()},
      2.0 * double(A.size(0)) * double(A.size(1)));
  const std::optional<layout> al = layout_of(ai);
  if (!al || (yi.strides[0] != 1 && yi.shape[0] > 1)) {  // through gemm: strided y, or a copy
    gemm_into(A, x.unsqueeze(1), y.unsqueeze(1), alpha, beta, false);
    return y;
  }
  // linalg's A is stored row-major: a itself, or (a transposed view) the matrix a^T.
  linalg::gemv_shape s{};
  s.m = static_cast<std::uint64_t>(al->trans ? a.size(1) : a.size(0));
  s.n = static_cast<std::uint64_t>(al->trans ? a.size(0) : a.size(1));
  s.lda = static_cast<std::uint64_t>(al->ld);
  const linalg::gemv_options o{trans != al->trans, alpha, beta};
  const tensor xc = detail::contiguous_of(x);  // x itself when at unit stride
  queue& q = ai.dev.default_queue();
  linalg::detail::gemv(q, ai.dtype, operand_of(ai), operand_of(*xc.impl()), operand_of(yi), s, o);
  if (linalg::last_path() != linalg::path::none) detail::stats_now().kernel_launches++;
  return y;
}

}  // namespace kiln
