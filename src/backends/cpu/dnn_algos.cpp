// The CPU dnn table's primitives (dnn.hpp): for one convolution direction, chunk of images and
// slice of channels, oneDNN's primitive with "any" layouts (it picks its blocked ones) and the
// reorders between Kiln's NCHW operands and those. Made once per shape by dnn.cpp's cache.
#include "backends/cpu/dnn.hpp"

#ifdef KILN_HAVE_DNNL
#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <vector>

namespace kiln::cpu::onednn {
namespace {

// The operand's Kiln layout against the primitive's chosen one, with the reorder when they
// differ (user -> inner for inputs, inner -> user for the output).
operand make_operand(const dnnl_primitive_desc_t pd, dnnl_query_t what, int arg,
                     const dnnl_memory_desc_t& user, bool input) {
  const dnnl_api& d = dnnl();
  operand o;
  o.arg = arg;
  o.user = user;
  o.inner = *d.dnnl_primitive_desc_query_md(pd, what, 0);
  o.inner_bytes = d.dnnl_memory_desc_get_size(&o.inner);
  if (d.dnnl_memory_desc_equal(&o.user, &o.inner)) return o;
  pd_holder r;
  const dnnl_memory_desc_t* from = input ? &o.user : &o.inner;
  const dnnl_memory_desc_t* to = input ? &o.inner : &o.user;
  check(d.dnnl_reorder_primitive_desc_create(&r.pd, from, d.engine, to, d.engine, nullptr),
        "oneDNN reorder descriptor");
  check(d.dnnl_primitive_create(&o.reorder, r.pd), "oneDNN reorder");
  return o;
}

// A dense-or-strided f32 memory descriptor: dims with the strides of the full tensor.
dnnl_memory_desc_t strided_md(int nd, const dnnl_dims_t dims, const dnnl_dims_t strides) {
  dnnl_memory_desc_t md;
  check(dnnl().dnnl_memory_desc_init_by_strides(&md, nd, dims, dnnl_f32, strides), "md");
  return md;
}

}  // namespace

plan* make_plan(direction dir, const kiln_dnn_conv_desc& c, std::uint64_t nb,
                std::uint64_t slices) {
  const dnnl_api& d = dnnl();
  using D = dnnl_dim_t;
  const bool grouped = c.groups > 1;
  const D g = c.groups;
  const D ks = D(dir == direction::backward_data ? c.k : c.k / slices);
  const D cs = D(dir == direction::backward_data ? c.c / slices : c.c);
  const dnnl_dims_t src_dims = {D(nb), cs, D(c.h), D(c.w)};
  const dnnl_dims_t dst_dims = {D(nb), ks, D(c.p), D(c.q)};
  const dnnl_dims_t src_str = {D(c.c * c.h * c.w), D(c.h * c.w), D(c.w), 1};
  const dnnl_dims_t dst_str = {D(c.k * c.p * c.q), D(c.p * c.q), D(c.q), 1};
  const dnnl_dims_t wt_dims_g = {g, D(c.k) / g, D(c.c) / g, D(c.r), D(c.s)};
  const dnnl_dims_t wt_dims = {ks, cs, D(c.r), D(c.s)};
  const dnnl_dims_t wt_str = {D(c.c * c.r * c.s), D(c.r * c.s), D(c.s), 1};
  const int wt_nd = grouped ? 5 : 4;
  const D* wdims = grouped ? wt_dims_g : wt_dims;
  dnnl_memory_desc_t src_u = strided_md(4, src_dims, src_str);
  dnnl_memory_desc_t dst_u = strided_md(4, dst_dims, dst_str);
  dnnl_memory_desc_t wt_u, src_a, dst_a, wt_a;
  if (grouped)
    check(d.dnnl_memory_desc_init_by_tag(&wt_u, 5, wt_dims_g, dnnl_f32, dnnl_goihw), "md");
  else
    wt_u = strided_md(4, wt_dims, wt_str);
  check(d.dnnl_memory_desc_init_by_tag(&src_a, 4, src_dims, dnnl_f32, dnnl_format_tag_any), "md");
  check(d.dnnl_memory_desc_init_by_tag(&dst_a, 4, dst_dims, dnnl_f32, dnnl_format_tag_any), "md");
  check(d.dnnl_memory_desc_init_by_tag(&wt_a, wt_nd, wdims, dnnl_f32, dnnl_format_tag_any), "md");
  const dnnl_dims_t strides = {c.stride_h, c.stride_w};
  const dnnl_dims_t dilates = {D(c.dil_h) - 1, D(c.dil_w) - 1};
  const dnnl_dims_t pad_l = {c.pad_h, c.pad_w};
  // Right padding as oneDNN counts it: what the last window reaches past the input.
  const dnnl_dims_t pad_r = {
      D((c.p - 1) * c.stride_h + (c.r - 1) * c.dil_h + 1) - D(c.h + c.pad_h),
      D((c.q - 1) * c.stride_w + (c.s - 1) * c.dil_w + 1) - D(c.w + c.pad_w)};

  const scratchpad_attr attr;

  dnnl_convolution_desc_t fwd_desc;
  check(d.dnnl_dilated_convolution_forward_desc_init(
            &fwd_desc, dnnl_forward_training, dnnl_convolution_direct, &src_a, &wt_a, nullptr,
            &dst_a, strides, dilates, pad_l, pad_r),
        "oneDNN convolution descriptor");
  pd_holder fwd, pd;
  if (d.dnnl_primitive_desc_create(&fwd.pd, &fwd_desc, attr.a, d.engine, nullptr) != dnnl_success)
    throw refused{};
  if (dir == direction::forward) {
    std::swap(pd.pd, fwd.pd);
  } else {
    dnnl_convolution_desc_t bwd_desc;
    if (dir == direction::backward_data)
      check(d.dnnl_dilated_convolution_backward_data_desc_init(&bwd_desc, dnnl_convolution_direct,
                                                               &src_a, &wt_a, &dst_a, strides,
                                                               dilates, pad_l, pad_r),
            "oneDNN convolution descriptor");
    else
      check(d.dnnl_dilated_convolution_backward_weights_desc_init(
                &bwd_desc, dnnl_convolution_direct, &src_a, &wt_a, nullptr, &dst_a, strides,
                dilates, pad_l, pad_r),
            "oneDNN convolution descriptor");
    if (d.dnnl_primitive_desc_create(&pd.pd, &bwd_desc, attr.a, d.engine, fwd.pd) != dnnl_success)
      throw refused{};
  }
  const char* impl = nullptr;
  d.dnnl_primitive_desc_query(pd.pd, dnnl_query_impl_info_str, 0, &impl);
  if (!impl || std::string_view(impl).starts_with("ref")) throw refused{};

  auto p = std::make_unique<plan>();
  switch (dir) {
    case direction::forward:
      p->in[0] = make_operand(pd.pd, dnnl_query_src_md, DNNL_ARG_SRC, src_u, true);
      p->in[1] = make_operand(pd.pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS, wt_u, true);
      p->out = make_operand(pd.pd, dnnl_query_dst_md, DNNL_ARG_DST, dst_u, false);
      break;
    case direction::backward_data:
      p->in[0] = make_operand(pd.pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST, dst_u, true);
      p->in[1] = make_operand(pd.pd, dnnl_query_weights_md, DNNL_ARG_WEIGHTS, wt_u, true);
      p->out = make_operand(pd.pd, dnnl_query_diff_src_md, DNNL_ARG_DIFF_SRC, src_u, false);
      break;
    case direction::backward_filter:
      p->in[0] = make_operand(pd.pd, dnnl_query_src_md, DNNL_ARG_SRC, src_u, true);
      p->in[1] = make_operand(pd.pd, dnnl_query_diff_dst_md, DNNL_ARG_DIFF_DST, dst_u, true);
      p->out = make_operand(pd.pd, dnnl_query_diff_weights_md, DNNL_ARG_DIFF_WEIGHTS, wt_u, false);
      break;
  }
  p->scratch = *d.dnnl_primitive_desc_query_md(pd.pd, dnnl_query_scratchpad_md, 0);
  p->scratch_bytes = d.dnnl_memory_desc_get_size(&p->scratch);
  check(d.dnnl_primitive_create(&p->prim, pd.pd), "oneDNN convolution");
  return p.release();
}

}  // namespace kiln::cpu::onednn
#endif  // KILN_HAVE_DNNL
