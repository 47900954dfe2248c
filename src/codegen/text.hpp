// Small text builders for generators that render kernel source.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace kiln::codegen {

// Joins by appending: GCC 12 warns falsely (-Wrestrict, bug 105329) on "literal" + string&&.
template <class... P>
std::string cat(const P&... parts) {
  std::string s;
  (s.append(std::string_view(parts)), ...);
  return s;
}

inline std::string num(std::size_t k) { return std::to_string(k); }

// A kernel template's text with every "T_" spelled as the element type `name` ("float").
inline std::string with_element_type(std::string_view text, std::string_view name) {
  std::string s(text);
  for (std::size_t at = s.find("T_"); at != std::string::npos; at = s.find("T_", at + name.size()))
    s.replace(at, 2, name);
  return s;
}

}  // namespace kiln::codegen
