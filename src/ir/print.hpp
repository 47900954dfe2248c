// A readable dump of an IR graph for debugging and tests, one node per line:
//   %3 = mul f32 %1, %2
//   %4 = capture f32 #0
#pragma once

#include <string>

#include "kiln/ir/node.hpp"

namespace kiln::ir {

std::string print(const graph& g);

}  // namespace kiln::ir
