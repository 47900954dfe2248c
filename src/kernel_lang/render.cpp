#include "kernel_lang/render.hpp"

#include <algorithm>
#include <cctype>

#include "kernel_lang/dialect.hpp"
#include "kiln/error.hpp"

namespace kiln::kernel_lang {

const dialect_table& dialect_for(kiln_dialect d) {
  switch (d) {
    case KILN_DIALECT_CUDA: return cuda_dialect;
    case KILN_DIALECT_CPP: return cpp_dialect;
    default: break;
  }
  throw unsupported("the kernel language has no renderer for dialect " + std::to_string(d));
}

std::string body_name(const std::string& kernel) { return "kiln__body_" + kernel; }
std::string cpu_entry_name(const std::string& kernel) { return "kiln_cpu_" + kernel; }

std::string render(std::string_view source, const parsed_source& parsed, kiln_dialect dialect) {
  const dialect_table& t = dialect_for(dialect);
  std::string out = t.prelude;
  out.reserve(out.size() + source.size() * 2 + 512);
  out += "#line 1 \"";
  out += user_file_name;
  out += "\"\n";
  // Rewrite each kernel's name and open its parameter list with the hidden parameter; the
  // edits stay on the kernel's line so every line number is preserved.
  std::size_t at = 0;
  for (const kernel_decl& k : parsed.kernels) {
    out.append(source.substr(at, k.name_offset - at));
    out += body_name(k.name);
    out.append(source.substr(k.name_offset + k.name.size(),
                             k.params_open + 1 - (k.name_offset + k.name.size())));
    out += t.body_param;
    if (!k.params.empty()) out += ", ";
    at = k.params.empty() ? k.params_close : k.params_open + 1;
  }
  out.append(source.substr(at));
  out += "\n#line 1 \"kiln_entry_points\"\n";
  for (const kernel_decl& k : parsed.kernels) t.emit_entry(out, k);
  return out;
}

std::vector<int> cited_lines(std::string_view log) {
  std::vector<int> lines;
  const std::string_view tag = user_file_name;
  for (std::size_t p = log.find(tag); p != std::string_view::npos; p = log.find(tag, p + 1)) {
    std::size_t q = p + tag.size();
    if (q >= log.size() || (log[q] != ':' && log[q] != '(')) continue;
    ++q;
    int n = 0;
    bool any = false;
    while (q < log.size() && std::isdigit(static_cast<unsigned char>(log[q])))
      n = n * 10 + (log[q++] - '0'), any = true;
    if (any && std::find(lines.begin(), lines.end(), n) == lines.end()) lines.push_back(n);
  }
  return lines;
}

}  // namespace kiln::kernel_lang
