// The CPU backend's oneDNN table, shared by its files: dnn.cpp (loading, threads, the table's
// calls) and dnn_algos.cpp (primitives for a convolution, made once per shape). Only where
// oneDNN's headers were found at configure time (KILN_HAVE_DNNL).
#pragma once

#ifdef KILN_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "dl_library.hpp"
#include "dnn_abi.h"

namespace kiln::cpu::onednn {

#define KILN_DNNL_FUNCS(X)                               \
  X(dnnl_version)                                        \
  X(dnnl_engine_create)                                  \
  X(dnnl_stream_create)                                  \
  X(dnnl_memory_desc_init_by_tag)                        \
  X(dnnl_memory_desc_init_by_strides)                    \
  X(dnnl_memory_desc_equal)                              \
  X(dnnl_memory_desc_get_size)                           \
  X(dnnl_memory_create)                                  \
  X(dnnl_memory_destroy)                                 \
  X(dnnl_dilated_convolution_forward_desc_init)          \
  X(dnnl_dilated_convolution_backward_data_desc_init)    \
  X(dnnl_dilated_convolution_backward_weights_desc_init) \
  X(dnnl_pooling_v2_forward_desc_init)                   \
  X(dnnl_primitive_attr_create)                          \
  X(dnnl_primitive_attr_destroy)                         \
  X(dnnl_primitive_attr_set_scratchpad_mode)             \
  X(dnnl_primitive_desc_create)                          \
  X(dnnl_primitive_desc_destroy)                         \
  X(dnnl_primitive_desc_query)                           \
  X(dnnl_primitive_desc_query_md)                        \
  X(dnnl_reorder_primitive_desc_create)                  \
  X(dnnl_primitive_create)                               \
  X(dnnl_primitive_execute)

struct dnnl_api {
  void* lib = nullptr;
  std::string library;  // "oneDNN 2.6.3"
  dnnl_engine_t engine = nullptr;
  KILN_DNNL_FUNCS(KILN_DL_MEMBER)
  // libgomp's, where libdnnl runs on OpenMP.
  void (*omp_set_num_threads)(int) = nullptr;
  int (*omp_get_max_threads)() = nullptr;
};

// libdnnl, loaded once on first use (dnn.cpp); lib is null where it is absent or unusable.
const dnnl_api& dnnl();

enum class direction { forward, backward_data, backward_filter };

// What a call's primitives are for: the direction, images per chunk, slices and the geometry.
using plan_key = std::array<std::uint64_t, 19>;

// One operand of a primitive: its layout in Kiln (NCHW / OIHW / GOIHW, strided when sliced),
// the primitive's layout, and the reorder between them (null when they are the same).
struct operand {
  int arg = 0;
  dnnl_memory_desc_t user{}, inner{};
  dnnl_primitive_t reorder = nullptr;
  std::size_t inner_bytes = 0;
};

// The primitives of one direction, chunk size and slice: in[0] is the chunk's images (src,
// or diff_dst for backward data), in[1] the weight (diff_dst for backward filter), out the
// result (dst, diff_src, diff_weights).
struct plan {
  dnnl_primitive_t prim = nullptr;
  operand in[2], out;
  std::size_t scratch_bytes = 0;
  dnnl_memory_desc_t scratch{};
};

struct dnnl_error : std::runtime_error {
  dnnl_status_t status;
  dnnl_error(dnnl_status_t s, const std::string& what) : std::runtime_error(what), status(s) {}
};
inline void check(dnnl_status_t s, const char* what) {
  if (s != dnnl_success)
    throw dnnl_error(s, std::string(what) + " failed (dnnl status " + std::to_string(int(s)) + ")");
}

// A refusal: only oneDNN's reference kernels (or none) take this configuration.
struct refused {};

// Owns a primitive descriptor for a scope.
struct pd_holder {
  dnnl_primitive_desc_t pd = nullptr;
  ~pd_holder() {
    if (pd) dnnl().dnnl_primitive_desc_destroy(pd);
  }
};

// Primitive attributes asking for a user scratchpad (each call brings its own, so primitives
// are shared by every thread).
struct scratchpad_attr {
  dnnl_primitive_attr_t a = nullptr;
  scratchpad_attr() {
    check(dnnl().dnnl_primitive_attr_create(&a), "oneDNN attributes");
    check(dnnl().dnnl_primitive_attr_set_scratchpad_mode(a, dnnl_scratchpad_mode_user),
          "oneDNN scratchpad mode");
  }
  ~scratchpad_attr() {
    if (a) dnnl().dnnl_primitive_attr_destroy(a);
  }
  scratchpad_attr(const scratchpad_attr&) = delete;
  scratchpad_attr& operator=(const scratchpad_attr&) = delete;
};

// The primitives for nb images of c, one of `slices` equal slices of the output channels
// (forward, backward filter) or input channels (backward data); slices > 1 only without
// groups. Throws refused or dnnl_error. The caller caches it (dnn.cpp's plan_for).
plan* make_plan(direction dir, const kiln_dnn_conv_desc& c, std::uint64_t nb, std::uint64_t slices);

}  // namespace kiln::cpu::onednn
#endif  // KILN_HAVE_DNNL
