// The portable kernels behind conv2d and pooling (cache "tensor_conv", keyed by dtype and
// kind), in the kernel language: im2col / col2im around the GEMM of a convolution, and the
// pooling kernels with their backwards. Every kernel is one work-item per output element over
// an exact range, and the backwards are gathers (each output sums what reaches it): no atomics,
// the same bits on every run.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/kernel.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail {

enum class conv_kernel_kind : std::uint8_t {
  im2col,       // cols[n][c][r][s][p][q] = x[n][c][p sh - ph + r dh][q sw - pw + s dw] or 0
  im2col_rows,  // the same, one item per row of Q (devices without work-groups: the CPU)
  col2im,       // dx[n][c][h][w] = sum of the cols entries that read it
  max_pool,     // values and int64 indices (in the H x W plane)
  max_unpool,   // dx[n][c][h][w] = sum of dy over the windows whose index is (h, w)
  avg_pool,     // mean over the window (divisor per count_include_pad)
  avg_unpool,   // dx[n][c][h][w] = sum of dy / divisor over the windows that hold (h, w)
};

// The geometry every kernel takes, in this order, as int64 parameters after the buffers:
// C, H, W, R, S, P, Q, stride h/w, padding h/w, dilation h/w, then the item count.
struct conv_geometry {
  std::int64_t c, h, w, r, s, p, q, sh, sw, ph, pw, dh, dw;
};

std::string conv_source(scalar_type t, conv_kernel_kind k);
kernel conv_kernel(const device& dev, scalar_type t, conv_kernel_kind k);

// "{a, b}", for messages about kernel sizes, strides and padding.
std::string pair_text(const std::array<std::int64_t, 2>& v);

// A stored tensor as a kernel argument, `skip` elements past its offset.
arg_binding tensor_arg(const tensor_impl& x, std::int64_t skip, bool is_const);
// Launches kind k over `total` items on dev's default queue with the arguments
// (buffers..., geometry, total, extra...) and counts the launch.
void launch_conv(const device& dev, scalar_type t, conv_kernel_kind k,
                 std::vector<arg_binding> args, const conv_geometry& g, std::int64_t total,
                 const std::vector<arg_binding>& extra = {});

}  // namespace kiln::detail
