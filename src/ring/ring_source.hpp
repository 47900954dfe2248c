// Generates the source of a ring kernel: the dialect's ring primitives, the shared protocol,
// the message structs, the user's handlers and the serving loop, as one portable kernel.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/target.hpp"
#include "kiln/ring_message.hpp"

namespace kiln::ring_detail {

struct message_desc {
  std::string name;  // unqualified C++ name, used in the kernel
  std::size_t size = 0;
  std::vector<ring_field> fields;
};

struct stage_desc {
  std::string handler;  // function name in the user's source
  const message_desc* in = nullptr;
  const message_desc* out = nullptr;
  std::uint32_t unit_begin = 0, units = 0;  // this stage's units (global numbering)
};

struct kernel_shape {
  const codegen::target* target = nullptr;  // its ring table: primitives, lanes per unit
  std::uint32_t batch = 32;                 // messages one unit takes per claim
  std::uint32_t warps = 1;                  // worker warps per block (CUDA)
};

// Checks that the generated definition of m has the C++ type's layout (offsets and size);
// throws kiln::invalid_argument naming the first difference.
void check_layout(const message_desc& m);

// Bytes of one queue slot for a message of `size` bytes: header and message, 16-byte aligned.
constexpr std::uint64_t slot_bytes(std::uint64_t size) {
  return 16 + ((size + 15) & ~std::uint64_t(15));
}

// The whole kernel source; its entry point is `kiln_ring_main(uint64_t control, uint32_t unit)`.
std::string kernel_source(std::string_view user_source, const std::vector<stage_desc>& stages,
                          const std::vector<const message_desc*>& messages,
                          const kernel_shape& shape);

// Line of the user's source where it starts inside kernel_source's output is 1 in the file
// named by codegen::user_file_name; these name the generated parts in compiler logs.
inline constexpr const char* prelude_file = "kiln_ring_prelude";
inline constexpr const char* loop_file = "kiln_ring_loop";

}  // namespace kiln::ring_detail
