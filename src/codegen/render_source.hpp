// Renders a portable kernel source into one target's dialect (codegen/target.hpp): prelude, the
// user's source with each kernel renamed to its body and given the hidden parameter, then the entry
// wrappers. Line numbers of the user's source are kept (#line), so compiler logs cite the user's
// lines.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernel_lang/parser.hpp"

namespace kiln::codegen {

inline constexpr const char* user_file_name = "kernel.kiln";

// `checked`: checked mode (kernel_lang/checked_access.hpp): bounds-checked accesses, the
// target's checked prelude, and the hidden counts and error buffer in every entry point.
std::string render(std::string_view source, const kernel_lang::parsed_source& parsed,
                   std::string_view dialect, bool checked = false);

// Line numbers of the user's source that a compiler log cites ("kernel.kiln:12:3",
// "kernel.kiln(12)"), in order of first mention, without repeats.
std::vector<int> cited_lines(std::string_view log);

}  // namespace kiln::codegen
