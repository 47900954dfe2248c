// scaled_dot_product_attention, three paths (choose_path picks):
//   vendor:   the device's "dnn" table (cuDNN's flash attention on tensor cores, CUDA): 16-bit
//             q, k, v, no mask or causal; forward and backward each one library call;
//   composed: matmul, the masked scale and softmax (one fused row kernel), matmul; autograd
//             through the same ops; every mask;
//   fused:    the kernels of attention_kernels.cpp (no mask or causal, widths up to
//             attn_max_width): one launch forward, three backward, the [L, S] scores never in
//             memory, so sequences whose scores would not fit still run.
// The vendor and fused paths save the same row statistics (log-sum-exp), so a vendor forward
// whose backward the library refuses is differentiated by the fused kernels.
#include "kiln/tensor/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "autograd/graph.hpp"
#include "kiln/tensor/autograd.hpp"
#include "kiln/tensor/indexing.hpp"
#include "runtime/log.hpp"
#include "tensor/attention_kernels.hpp"
#include "tensor/dnn.hpp"
#include "tensor/kernel_args.hpp"
#include "tensor/shape.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln {
namespace {

thread_local attention_path last = attention_path::none;

using detail::attn_kernel_key;
using detail::attn_kernel_kind;

// [batch..., rows, width] as a stored [outer, inner, rows, width] with the width contiguous:
// a view where the strides allow (a head-split view, a broadcast batch), else a copy.
tensor as_rows4(const tensor& x) {
  tensor y = x.impl()->kind == detail::tensor_kind::stored ? x : detail::contiguous_of(x);
  while (y.dim() < 4) y = y.unsqueeze(0);
  if (y.dim() > 4) {
    const shape_t& s = y.shape();
    std::int64_t outer = 1;
    for (int d = 0; d + 3 < y.dim(); ++d) outer *= s[std::size_t(d)];
    y = y.reshape({outer, s[s.size() - 3], s[s.size() - 2], s.back()});
    if (y.impl()->kind != detail::tensor_kind::stored) y = detail::contiguous_of(y);
  }
  if (y.size(3) > 1 && y.impl()->strides[3] != 1) y = detail::contiguous_of(y);
  return y;
}

void add_operand(std::vector<detail::arg_binding>& a, const tensor& t, bool is_const) {
  a.push_back(detail::tensor_mem(*t.impl(), t.dtype(), is_const));
}
void add_strides(std::vector<detail::arg_binding>& a, const tensor& t) {
  for (int d = 0; d < 3; ++d) a.push_back(detail::bind_arg(t.impl()->strides[std::size_t(d)]));
}
detail::arg_binding scale_arg(scalar_type acc, double s) {
  return acc == scalar_type::f64 ? detail::bind_arg(s) : detail::bind_arg(float(s));
}

struct fused_shape {
  std::int64_t outer, inner, l, s;
  std::uint32_t e, ev;
};

fused_shape shape_of(const tensor& q4, const tensor& v4) {
  return {q4.size(0),
          q4.size(1),
          q4.size(2),
          v4.size(2),
          std::uint32_t(q4.size(3)),
          std::uint32_t(v4.size(3))};
}

// The delta pass is one item per row whatever the device and the mask: one program for both.
attn_kernel_key key_of(attn_kernel_kind kind, const tensor& q4, const fused_shape& f, bool causal) {
  const device& dev = q4.get_device();
  const bool delta = kind == attn_kernel_kind::delta;
  return {kind,
          q4.dtype(),
          f.e,
          f.ev,
          causal && !delta,
          dev.supports(feature::barrier) && !delta,
          dev.supports(feature::warp32)};
}

// The backward of the fused forward: dq, dk, dv in q4, k4, v4's shapes (contiguous).
std::vector<tensor> fused_backward(const tensor& g_in, const tensor& q4, const tensor& k4,
                                   const tensor& v4, const tensor& o_in, const tensor& lse,
                                   bool causal, double scale) {
  no_grad off;
  const tensor g = as_rows4(g_in.dtype() == q4.dtype() ? g_in : g_in.to(q4.dtype()));
  const tensor o4 = as_rows4(o_in.detach());
  const fused_shape f = shape_of(q4, v4);
  const device& dev = q4.get_device();
  const scalar_type acc = detail::attn_acc_type(q4.dtype());
  const std::int64_t bh = f.outer * f.inner;
  const tensor d(detail::allocate_tensor(dev, {bh, f.l}, acc));
  {
    std::vector<detail::arg_binding> a;
    add_operand(a, d, false);
    add_operand(a, g, true);
    add_operand(a, o4, true);
    add_strides(a, g);
    add_strides(a, o4);
    a.push_back(detail::bind_arg(f.inner));
    a.push_back(detail::bind_arg(f.l));
    detail::launch_attn(dev, key_of(attn_kernel_kind::delta, q4, f, causal), std::move(a), bh, f.l);
  }
  const tensor dq(detail::allocate_tensor(dev, q4.shape(), q4.dtype()));
  const tensor dk(detail::allocate_tensor(dev, k4.shape(), q4.dtype()));
  const tensor dv(detail::allocate_tensor(dev, v4.shape(), q4.dtype()));
  {
    std::vector<detail::arg_binding> a;
    add_operand(a, dq, false);
    for (const tensor* t : {&q4, &k4, &v4, &g}) add_operand(a, *t, true);
    add_operand(a, lse, true);
    add_operand(a, d, true);
    for (std::int64_t x : {f.inner, f.l, f.s}) a.push_back(detail::bind_arg(x));
    for (const tensor* t : {&q4, &k4, &v4, &g, &dq}) add_strides(a, *t);
    a.push_back(scale_arg(acc, scale));
    detail::launch_attn(dev, key_of(attn_kernel_kind::dq, q4, f, causal), std::move(a), bh, f.l);
  }
  {
    std::vector<detail::arg_binding> a;
    add_operand(a, dk, false);
    add_operand(a, dv, false);
    for (const tensor* t : {&q4, &k4, &v4, &g}) add_operand(a, *t, true);
    add_operand(a, lse, true);
    add_operand(a, d, true);
    for (std::int64_t x : {f.inner, f.s, f.l}) a.push_back(detail::bind_arg(x));
    for (const tensor* t : {&q4, &k4, &v4, &g, &dk, &dv}) add_strides(a, *t);
    a.push_back(scale_arg(acc, scale));
    detail::launch_attn(dev, key_of(attn_kernel_kind::dkdv, q4, f, causal), std::move(a), bh, f.s);
  }
  return {dq, dk, dv};
}

// The fused forward over q, k, v broadcast to one batch shape, recorded for autograd.
tensor fused(const tensor& q, const tensor& k, const tensor& v, bool causal, double scale) {
  const shape_t qs = q.shape(), ks = k.shape(), vs = v.shape();
  const shape_t batch =
      detail::broadcast_shapes(detail::broadcast_shapes(shape_t(qs.begin(), qs.end() - 2),
                                                        shape_t(ks.begin(), ks.end() - 2)),
                               shape_t(vs.begin(), vs.end() - 2));
  const auto full = [&](const shape_t& s) {
    shape_t f = batch;
    f.push_back(s[s.size() - 2]);
    f.push_back(s.back());
    return f;
  };
  tensor q4, k4, v4, o4, lse;
  {
    no_grad off;
    q4 = as_rows4(q.detach().expand(full(qs)));
    k4 = as_rows4(k.detach().expand(full(ks)));
    v4 = as_rows4(v.detach().expand(full(vs)));
    const fused_shape f = shape_of(q4, v4);
    const device& dev = q.get_device();
    const scalar_type acc = detail::attn_acc_type(q.dtype());
    // Two batch dims (heads): o laid out as [outer, L, inner, Ev] and returned transposed, so
    // that merging the heads back ([B, L, H * Ev]) is a view.
    const bool heads = batch.size() == 2;
    o4 = heads ? tensor(detail::allocate_tensor(dev, {f.outer, f.l, f.inner, f.ev}, q.dtype()))
                     .transpose(1, 2)
               : tensor(detail::allocate_tensor(dev, {f.outer, f.inner, f.l, f.ev}, q.dtype()));
    lse = tensor(detail::allocate_tensor(dev, {f.outer * f.inner, f.l}, acc));
    std::vector<detail::arg_binding> a;
    add_operand(a, o4, false);
    add_operand(a, lse, false);
    for (const tensor* t : {&q4, &k4, &v4}) add_operand(a, *t, true);
    for (std::int64_t x : {f.inner, f.l, f.s}) a.push_back(detail::bind_arg(x));
    for (const tensor* t : {&q4, &k4, &v4, &o4}) add_strides(a, *t);
    a.push_back(scale_arg(acc, scale));
    detail::reset_stats();
    detail::launch_attn(dev, key_of(attn_kernel_kind::forward, q4, f, causal), std::move(a),
                        f.outer * f.inner, f.l);
  }
  shape_t out_shape = batch;
  out_shape.push_back(qs[qs.size() - 2]);
  out_shape.push_back(vs.back());
  tensor out = o4.dim() == int(out_shape.size()) ? o4 : o4.reshape(out_shape);
  if (!detail::grad_wanted({&q, &k, &v})) return out;
  const shape_t full_shapes[] = {full(qs), full(ks), full(vs)}, own[] = {qs, ks, vs};
  return autograd::record(
      "scaled_dot_product_attention", out, {q, k, v},
      // The output comes back as the second argument: capturing it would be a cycle.
      [=](const tensor& g, const tensor& o) -> std::vector<tensor> {
        const std::vector<tensor> d = fused_backward(g, q4, k4, v4, o, lse, causal, scale);
        // Each gradient in its operand's broadcast shape, summed back to the operand's own.
        std::vector<tensor> r;
        for (std::size_t x = 0; x < 3; ++x)
          r.push_back(autograd::sum_to(d[x].reshape(full_shapes[x]), own[x]));
        return r;
      });
}

// The vendor path's operand: 16-byte aligned (the base and every stride: 8 16-bit elements), as
// the library's tensor-core kernels load it, and no stride-0 (broadcast) dimension; a view that
// is not so is copied.
tensor vendor_operand(const tensor& x4) {
  const detail::tensor_impl& x = *x4.impl();
  bool ok = x.offset % 8 == 0;
  for (int d = 0; d < 3; ++d) {
    const std::int64_t stride = x.strides[std::size_t(d)];
    ok = ok && (x4.size(d) == 1 || (stride > 0 && stride % 8 == 0));
  }
  if (ok) return x4;
  // A fresh copy: contiguous_of keeps a contiguous view that starts off a word.
  tensor c = detail::copy_node(x4);
  detail::materialise(*c.impl());
  return c;
}

// x4 as the table's operand. A size-1 dimension's stride addresses nothing: it is given the
// stride a packed layout would have (a positive multiple of 8, as the library checks).
kiln_dnn_view vendor_view(const tensor& x4) {
  kiln_dnn_view v = detail::dnn_view(*x4.impl());
  std::int64_t inner = x4.size(3);
  for (int d = 2; d >= 0; --d) {
    if (x4.size(d) == 1) v.stride[d] = inner;
    inner = v.stride[d] * x4.size(d);
  }
  return v;
}

kiln_dnn_attention_desc vendor_desc(const tensor& q4, const tensor& k4, const tensor& v4,
                                    bool causal, double scale) {
  kiln_dnn_attention_desc d{};
  d.struct_size = sizeof d;
  d.dtype = detail::dnn_dtype(q4.dtype());
  d.causal = causal ? 1u : 0u;
  d.batch = std::uint64_t(q4.size(0)), d.heads = std::uint64_t(q4.size(1));
  d.lq = std::uint64_t(q4.size(2)), d.lk = std::uint64_t(k4.size(2));
  d.d_qk = std::uint64_t(q4.size(3)), d.d_v = std::uint64_t(v4.size(3));
  d.scale = float(scale);
  d.q = vendor_view(q4);
  d.k = vendor_view(k4);
  d.v = vendor_view(v4);
  return d;
}

// The backward of the vendor forward: dq, dk, dv in q4, k4, v4's shapes (contiguous). Where the
// library refuses it, the fused kernels (same statistics).
std::vector<tensor> vendor_backward(const kiln_dnn_v1& t, const tensor& g_in, const tensor& q4,
                                    const tensor& k4, const tensor& v4, const tensor& o_in,
                                    const tensor& lse, bool causal, double scale) {
  no_grad off;
  const tensor g =
      vendor_operand(as_rows4(g_in.dtype() == q4.dtype() ? g_in : g_in.to(q4.dtype())));
  const tensor o4 = vendor_operand(as_rows4(o_in.detach()));
  const device& dev = q4.get_device();
  const tensor dq(detail::allocate_tensor(dev, q4.shape(), q4.dtype()));
  const tensor dk(detail::allocate_tensor(dev, k4.shape(), q4.dtype()));
  const tensor dv(detail::allocate_tensor(dev, v4.shape(), q4.dtype()));
  kiln_dnn_attention_desc d = vendor_desc(q4, k4, v4, causal, scale);
  d.o = vendor_view(o4);
  d.stats = detail::dnn_ref(*lse.impl());
  d.grad_o = vendor_view(g);
  d.grad_q = vendor_view(dq);
  d.grad_k = vendor_view(dk);
  d.grad_v = vendor_view(dv);
  const kiln_status st = t.attention_backward(dev.default_queue().impl()->handle, &d);
  // A shape the library refuses, or no memory for its workspace: the fused kernels need none.
  if (st == KILN_ERR_UNSUPPORTED || st == KILN_ERR_OUT_OF_MEMORY) {
    detail::logf(log_level::debug,
                 "scaled_dot_product_attention backward on {}: {}; the fused kernels run", dev.id(),
                 dev.impl()->api->last_error());
    return fused_backward(g, q4, k4, v4, o4, lse, causal, scale);
  }
  detail::check(*dev.impl()->api, st, "kiln::scaled_dot_product_attention (backward)");
  detail::stats_now().kernel_launches++;
  return {dq, dk, dv};
}

// The vendor forward, recorded for autograd; undefined where the library refuses the shape.
tensor vendor(const kiln_dnn_v1& t, const tensor& q, const tensor& k, const tensor& v, bool causal,
              double scale) {
  tensor q4, k4, v4, o4, lse;
  {
    no_grad off;
    q4 = vendor_operand(as_rows4(q.detach()));
    k4 = vendor_operand(as_rows4(k.detach()));
    v4 = vendor_operand(as_rows4(v.detach()));
    const device& dev = q.get_device();
    const fused_shape f = shape_of(q4, v4);
    // With heads, o as [B, L, H, Ev] viewed as [B, H, L, Ev]: merging the heads back
    // ([B, L, H * Ev]) is then a view.
    o4 = q.dim() == 4
             ? tensor(detail::allocate_tensor(dev, {f.outer, f.l, f.inner, f.ev}, q.dtype()))
                   .transpose(1, 2)
             : tensor(detail::allocate_tensor(dev, {f.outer, f.inner, f.l, f.ev}, q.dtype()));
    lse = tensor(detail::allocate_tensor(dev, {f.outer * f.inner, f.l}, scalar_type::f32));
    kiln_dnn_attention_desc d = vendor_desc(q4, k4, v4, causal, scale);
    d.o = vendor_view(o4);
    d.stats = detail::dnn_ref(*lse.impl());
    const kiln_status st = t.attention_forward(dev.default_queue().impl()->handle, &d);
    if (st == KILN_ERR_UNSUPPORTED || st == KILN_ERR_OUT_OF_MEMORY) {
      detail::logf(log_level::debug, "scaled_dot_product_attention on {}: {}; Kiln computes it",
                   dev.id(), dev.impl()->api->last_error());
      return {};
    }
    detail::check(*dev.impl()->api, st, "kiln::scaled_dot_product_attention");
    detail::stats_now().kernel_launches++;
  }
  last = attention_path::vendor;
  const shape_t out_shape = [&] {
    shape_t s = q.shape();
    s.back() = v.size(-1);
    return s;
  }();
  tensor out = o4.dim() == int(out_shape.size()) ? o4 : o4.reshape(out_shape);
  if (!detail::grad_wanted({&q, &k, &v})) return out;
  const shape_t own[] = {q.shape(), k.shape(), v.shape()};
  return autograd::record("scaled_dot_product_attention", out, {q, k, v},
                          [=, &t](const tensor& g, const tensor& o) -> std::vector<tensor> {
                            const std::vector<tensor> d =
                                vendor_backward(t, g, q4, k4, v4, o, lse, causal, scale);
                            std::vector<tensor> r;
                            for (std::size_t x = 0; x < 3; ++x) r.push_back(d[x].reshape(own[x]));
                            return r;
                          });
}

// Whether the vendor path may take the call: 16-bit operands of one dtype and one batch shape
// (no broadcast: the library's gradients would race), no mask, a table with fused attention.
const kiln_dnn_v1* vendor_table(const tensor& q, const tensor& k, const tensor& v,
                                const tensor& mask) {
  if (mask.defined() || q.dtype() != k.dtype() || q.dtype() != v.dtype()) return nullptr;
  if (q.dtype() != scalar_type::bf16 && q.dtype() != scalar_type::f16) return nullptr;
  if (q.impl()->automatic || k.impl()->automatic || v.impl()->automatic) return nullptr;
  if (q.dim() < 2 || q.dim() > 4 || k.dim() != q.dim() || v.dim() != q.dim()) return nullptr;
  for (int d = 0; d + 2 < q.dim(); ++d)
    if (q.size(d) != k.size(d) || q.size(d) != v.size(d)) return nullptr;
  if (q.numel() == 0 || k.numel() == 0 || v.numel() == 0) return nullptr;
  // Head widths every flash attention library takes (multiples of 8 up to 256), checked here
  // so that a call the library would refuse allocates and copies nothing first.
  for (std::int64_t w : {q.size(-1), v.size(-1)})
    if (w % 8 || w > 256) return nullptr;
  return detail::dnn_attention_table(q.get_device());
}

// Which path. The vendor one where it applies (cuDNN's flash attention is several times faster
// than either of Kiln's at every shape measured: docs/benchmarks.md). Else composed and fused
// both apply to no mask and causal: the composed one is the faster (its products run on cuBLAS
// or OpenBLAS; the fused kernels are scalar code: 0.4-0.75x its time on an H200 and on the CPU),
// so it is taken unless the score tensors the composed path keeps for training (scores,
// probabilities, their gradient) would fill more than a quarter of the device's memory.
// KILN_ATTENTION=vendor, fused or composed overrides the choice (vendor where it applies, else
// the default of the other two).
enum class choice { vendor, fused, composed };

// Kiln's own choice between its two paths (also where the library refuses a call); fused_asked:
// KILN_ATTENTION=fused.
choice kiln_path(const tensor& q, const tensor& k, const tensor& v, const tensor& mask,
                 bool fused_asked) {
  const bool fusable = !mask.defined() && q.dtype() == k.dtype() && q.dtype() == v.dtype() &&
                       q.size(-1) <= detail::attn_max_width &&
                       v.size(-1) <= detail::attn_max_width && q.size(-2) >= 1 && k.size(-2) >= 1 &&
                       q.size(-1) >= 1 && v.size(-1) >= 1 && !q.impl()->automatic &&
                       !k.impl()->automatic && !v.impl()->automatic;
  if (!fusable) return choice::composed;
  if (fused_asked) return choice::fused;
  // Batches: the larger operand's (broadcasting a size-1 batch dim only repeats the other).
  const double batches = std::max(double(q.numel()) / double(q.size(-2) * q.size(-1)),
                                  double(k.numel()) / double(k.size(-2) * k.size(-1)));
  const double scores =
      batches * double(q.size(-2)) * double(k.size(-2)) * double(size_of(q.dtype()));
  const double memory = double(q.get_device().info().global_mem_bytes);
  return memory > 0 && 3 * scores > memory / 4 ? choice::fused : choice::composed;
}

// The path for a call, with the table when it is the vendor's.
struct route {
  choice path;
  const kiln_dnn_v1* table = nullptr;
};

route choose_path(const tensor& q, const tensor& k, const tensor& v, const tensor& mask) {
  if (const char* env = std::getenv("KILN_ATTENTION")) {
    const std::string_view forced = env;
    if (forced != "vendor" && forced != "fused" && forced != "composed")
      throw invalid_argument(std::string("KILN_ATTENTION is '") + env +
                             "'; expected vendor, fused or composed (or unset)");
    if (forced == "composed") return {choice::composed};
    if (forced == "fused") return {kiln_path(q, k, v, mask, true)};
  }
  if (const kiln_dnn_v1* t = vendor_table(q, k, v, mask)) return {choice::vendor, t};
  return {kiln_path(q, k, v, mask, false)};
}

}  // namespace

tensor scaled_dot_product_attention(const tensor& q, const tensor& k, const tensor& v,
                                    const tensor& attn_mask, bool is_causal,
                                    std::optional<double> scale) {
  const char* fn = "kiln::scaled_dot_product_attention";
  detail::check_float_operands("scaled_dot_product_attention", {{"q", &q}, {"k", &k}, {"v", &v}},
                               true);
  if (q.dim() < 2 || k.dim() < 2 || v.dim() < 2)
    throw shape_error(std::string(fn) + ": q, k and v need at least 2 dimensions, got " +
                      to_string(q.shape()) + ", " + to_string(k.shape()) + ", " +
                      to_string(v.shape()));
  if (q.size(-1) != k.size(-1))
    throw shape_error(std::string(fn) + ": q and k differ in their last size (" +
                      to_string(q.shape()) + " and " + to_string(k.shape()) + ")");
  if (k.size(-2) != v.size(-2))
    throw shape_error(std::string(fn) + ": k and v differ in their number of keys (" +
                      to_string(k.shape()) + " and " + to_string(v.shape()) + ")");
  if (attn_mask.defined() && is_causal)
    throw invalid_argument(std::string(fn) + ": pass attn_mask or is_causal, not both");
  if (attn_mask.defined() && attn_mask.dtype() != scalar_type::boolean &&
      attn_mask.dtype() != q.dtype())
    throw dtype_error(std::string(fn) + ": attn_mask must be bool or " + type_name(q.dtype()) +
                      ", got " + type_name(attn_mask.dtype()));
  const std::int64_t queries = q.size(-2), keys = k.size(-2);
  const double s = scale ? *scale : 1.0 / std::sqrt(double(q.size(-1)));
  if (!std::isfinite(s))
    throw invalid_argument(std::string(fn) + ": scale must be finite, got " + std::to_string(s));
  const route r = choose_path(q, k, v, attn_mask);
  choice path = r.path;
  if (path == choice::vendor) {
    if (tensor y = vendor(*r.table, q, k, v, is_causal, s); y.defined()) return y;
    path = kiln_path(q, k, v, attn_mask, false);  // the library refused the shape
  }
  if (path == choice::fused) {
    last = attention_path::fused;
    return fused(q, k, v, is_causal, s);
  }
  last = attention_path::composed;
  // The scores stay in q's dtype (a C++ scalar promotes: a double would turn f32 into f64, a
  // float bf16 into f32), as PyTorch's math path keeps them; the cast fuses into the kernel.
  const tensor product = matmul(q, k.transpose(-2, -1));
  tensor scores = q.dtype() == scalar_type::f64 ? product * s : (product * float(s)).to(q.dtype());
  const float minus_inf = -std::numeric_limits<float>::infinity();
  if (is_causal) {
    const tensor upper =
        triu(tensor::ones(q.get_device(), {queries, keys}, scalar_type::boolean), 1);
    scores = masked_fill(scores, upper, minus_inf);
  } else if (attn_mask.defined()) {
    scores = attn_mask.dtype() == scalar_type::boolean
                 ? masked_fill(scores, attn_mask == false, minus_inf)
                 : scores + attn_mask;
  }
  return matmul(scores.softmax(-1), v);
}

attention_path last_attention_path() noexcept { return last; }

}  // namespace kiln
