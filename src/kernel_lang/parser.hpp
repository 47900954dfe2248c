// Finds the kernel entry points (KILN_KERNEL functions) of a portable kernel source and parses
// their parameter lists, so the core can check launch arguments and generate per-backend
// entry wrappers.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/kernel.hpp"

namespace kiln::kernel_lang {

struct kernel_decl {
  std::string name;
  std::vector<kernel_param> params;
  std::vector<std::string> param_types;  // declared type text without the name
  std::size_t name_offset = 0;           // offset of the name in the source
  std::size_t params_open = 0;           // offset of '('
  std::size_t params_close = 0;          // offset of ')'
  int line = 0;                          // 1-based line of the name
};

struct parsed_source {
  std::vector<kernel_decl> kernels;
  bool uses_barrier = false;       // kiln_barrier()
  bool uses_local_memory = false;  // KILN_LOCAL
  bool uses_double = false;        // the word `double`
  int barrier_line = 0, local_line = 0, double_line = 0;
};

// Throws kiln::compile_error with the offending line for malformed kernel declarations and
// kiln::invalid_argument when the source declares no kernel.
parsed_source parse(std::string_view source);

// The source with comments, string and character literals blanked (same length and lines).
std::string blank_comments_and_literals(std::string_view source);

// "   4 | text" lines around `line` (1-based) with the line itself marked '>'.
std::string excerpt(std::string_view source, const std::vector<int>& lines, int context = 1);

}  // namespace kiln::kernel_lang
