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

}  // namespace kiln::codegen
