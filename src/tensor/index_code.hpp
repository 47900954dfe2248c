// Index arithmetic shared by the reduction and row kernels: an iteration space of K kept
// dims (coordinates kt_x<d>, sizes kt_k<d>) then M reduced dims (kt_y<j>, kt_m<j>), each input
// k read at kt_b<k> (its kept part) plus its reduced part, stride classes deciding the terms.
#pragma once

#include <cstddef>
#include <string>

#include "kiln/ir/node.hpp"

namespace kiln::detail {

// ", int64_t kt_s<k>_<d>" for every general stride of every input, in input then dim order.
std::string stride_params(const ir::graph& g, std::size_t rank);
// Input k's offset over dims [d0, d1) at coordinates <prefix><d - d0> ("" when none).
std::string input_offset(const ir::graph& g, std::size_t k, std::size_t d0, std::size_t d1,
                         const char* prefix);
// The kept coordinates of kt_oi and every input's kt_b<k>.
std::string output_position(const ir::graph& g, std::size_t kept);
// The reduced coordinates of row element kt_r.
std::string row_coords(std::size_t reduced);

}  // namespace kiln::detail
