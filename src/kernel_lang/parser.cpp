#include "kernel_lang/parser.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <sstream>

#include "kiln/error.hpp"

namespace kiln::kernel_lang {
namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

int line_at(std::string_view s, std::size_t off) {
  return 1 + static_cast<int>(std::count(s.begin(), s.begin() + static_cast<long>(off), '\n'));
}

[[noreturn]] void fail(std::string_view source, std::size_t off, const std::string& msg) {
  const int line = line_at(source, off);
  std::string ex = excerpt(source, {line});
  throw compile_error("kernel source, line " + std::to_string(line) + ": " + msg + "\n" + ex, msg,
                      ex);
}

// Offsets of every whole-word occurrence of `word` in blanked text.
std::vector<std::size_t> find_word(std::string_view text, std::string_view word) {
  std::vector<std::size_t> out;
  for (std::size_t p = text.find(word); p != std::string_view::npos;
       p = text.find(word, p + word.size())) {
    const bool left_ok = p == 0 || !ident_char(text[p - 1]);
    const std::size_t e = p + word.size();
    const bool right_ok = e >= text.size() || !ident_char(text[e]);
    if (left_ok && right_ok) out.push_back(p);
  }
  return out;
}

// Whether offset p lies on a preprocessor line (its first non-blank character is '#'): a
// `#define KILN_KERNEL ...` of native source names no kernel.
bool in_directive(std::string_view t, std::size_t p) {
  std::size_t b = t.rfind('\n', p);
  b = b == std::string_view::npos ? 0 : b + 1;
  while (b < p && (t[b] == ' ' || t[b] == '\t')) ++b;
  return b < p && t[b] == '#';
}

std::size_t skip_space(std::string_view t, std::size_t p) {
  while (p < t.size() && std::isspace(static_cast<unsigned char>(t[p]))) ++p;
  return p;
}

// Canonical spellings of the scalar types a kernel parameter may have.
const std::map<std::string, scalar_type>& type_table() {
  static const std::map<std::string, scalar_type> t = {
      {"bool", scalar_type::boolean},
      {"int8_t", scalar_type::i8},
      {"int16_t", scalar_type::i16},
      {"int32_t", scalar_type::i32},
      {"int64_t", scalar_type::i64},
      {"uint8_t", scalar_type::u8},
      {"uint16_t", scalar_type::u16},
      {"uint32_t", scalar_type::u32},
      {"uint64_t", scalar_type::u64},
      {"size_t", scalar_type::u64},
      {"float", scalar_type::f32},
      {"double", scalar_type::f64},
      {"half", scalar_type::f16},
      {"bfloat16", scalar_type::bf16},
      {"char", scalar_type::i8},
      {"signed char", scalar_type::i8},
      {"unsigned char", scalar_type::u8},
      {"short", scalar_type::i16},
      {"unsigned short", scalar_type::u16},
      {"int", scalar_type::i32},
      {"signed", scalar_type::i32},
      {"signed int", scalar_type::i32},
      {"unsigned", scalar_type::u32},
      {"unsigned int", scalar_type::u32},
      {"long", scalar_type::i64},
      {"long long", scalar_type::i64},
      {"unsigned long", scalar_type::u64},
      {"unsigned long long", scalar_type::u64},
  };
  return t;
}

kernel_param parse_param(std::string_view source, std::size_t begin, std::string_view text,
                         std::string& type_text) {
  // Errors point at the parameter's own first character: it may sit on a continuation line.
  const std::size_t first = text.find_first_not_of(" \t\r\n");
  const std::size_t at = begin + (first == std::string_view::npos ? 0 : first);
  // Tokens: identifiers and '*'; anything else is not part of the language's parameters.
  std::vector<std::string> toks;
  for (std::size_t i = 0; i < text.size();) {
    char c = text[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (ident_char(c)) {
      std::size_t j = i;
      while (j < text.size() && ident_char(text[j])) ++j;
      toks.emplace_back(text.substr(i, j - i));
      i = j;
    } else if (c == '*') {
      toks.emplace_back("*");
      ++i;
    } else {
      fail(source, begin + i,
           std::string("unexpected '") + c +
               "' in a kernel parameter (parameters are scalars or "
               "KILN_GLOBAL pointers)");
    }
  }
  if (toks.size() < 2 || toks.back() == "*")
    fail(source, at, "kernel parameter '" + std::string(text) + "' needs a type and a name");
  kernel_param p;
  p.name = toks.back();
  toks.pop_back();
  bool global = false, seen_star = false;
  std::string base;
  for (const std::string& t : toks) {
    if (t == "*") {
      if (seen_star) fail(source, at, "pointer to pointer parameters are not supported");
      seen_star = true;
    } else if (t == "const") {
      if (!seen_star) p.is_const = true;
    } else if (t == "KILN_GLOBAL") {
      global = true;
    } else if (t == "KILN_LOCAL") {
      fail(source, at,
           "KILN_LOCAL pointer parameters are not supported: declare KILN_LOCAL "
           "arrays inside the kernel");
    } else if (t == "volatile" || t == "KILN_RESTRICT" || t == "restrict" || t == "__restrict__") {
    } else {
      base += base.empty() ? t : " " + t;
    }
  }
  auto it = type_table().find(base);
  if (it == type_table().end())
    fail(source, at,
         "parameter '" + p.name + "' has type '" + base +
             "', not a scalar type (int8_t..uint64_t, float, double, bool)");
  p.type = it->second;
  p.is_pointer = seen_star;
  if (seen_star && !global)
    fail(source, at, "pointer parameter '" + p.name + "' must be declared KILN_GLOBAL");
  if (!seen_star && global)
    fail(source, at, "KILN_GLOBAL parameter '" + p.name + "' must be a pointer");
  const std::size_t name_pos = text.rfind(p.name);
  type_text = std::string(text.substr(0, name_pos));
  while (!type_text.empty() && std::isspace(static_cast<unsigned char>(type_text.back())))
    type_text.pop_back();
  while (!type_text.empty() && std::isspace(static_cast<unsigned char>(type_text.front())))
    type_text.erase(type_text.begin());
  return p;
}

}  // namespace

std::string blank_comments_and_literals(std::string_view s) {
  std::string out(s);
  enum { code, line_comment, block_comment, str, chr } st = code;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const char c = s[i], n = i + 1 < s.size() ? s[i + 1] : '\0';
    switch (st) {
      case code:
        if (c == '/' && n == '/')
          st = line_comment, out[i] = ' ';
        else if (c == '/' && n == '*')
          st = block_comment, out[i] = ' ', out[++i] = ' ';
        else if (c == '"')
          st = str;
        else if (c == '\'')
          st = chr;
        break;
      case line_comment:
        if (c == '\n')
          st = code;
        else
          out[i] = ' ';
        break;
      case block_comment:
        if (c == '*' && n == '/')
          st = code, out[i] = ' ', out[++i] = ' ';
        else if (c != '\n')
          out[i] = ' ';
        break;
      case str:
      case chr:
        if (c == '\\' && i + 1 < out.size()) {
          out[i] = ' ';
          if (n != '\n') out[++i] = ' ';
        } else if ((st == str && c == '"') || (st == chr && c == '\'')) {
          st = code;
        } else if (c != '\n') {
          out[i] = ' ';
        }
        break;
    }
  }
  return out;
}

std::string excerpt(std::string_view source, const std::vector<int>& lines, int context) {
  std::vector<std::string_view> all;
  for (std::size_t b = 0; b <= source.size();) {
    std::size_t e = source.find('\n', b);
    if (e == std::string_view::npos) e = source.size();
    all.push_back(source.substr(b, e - b));
    b = e + 1;
  }
  std::set<int> marked(lines.begin(), lines.end()), shown;
  for (int l : lines)
    for (int k = l - context; k <= l + context; ++k)
      if (k >= 1 && k <= static_cast<int>(all.size())) shown.insert(k);
  std::ostringstream o;
  int prev = 0;
  for (int k : shown) {
    if (prev && k != prev + 1) o << "      ...\n";
    o << (marked.count(k) ? '>' : ' ') << ' ';
    o.width(4);
    o << k << " | " << all[static_cast<std::size_t>(k - 1)] << '\n';
    prev = k;
  }
  return o.str();
}

parsed_source parse(std::string_view source) {
  const std::string text = blank_comments_and_literals(source);
  parsed_source out;
  std::set<std::string> names;
  for (std::size_t kw : find_word(text, "KILN_KERNEL")) {
    if (in_directive(text, kw)) continue;
    kernel_decl k;
    std::size_t p = skip_space(text, kw + 11);
    if (text.compare(p, 4, "void") != 0 || (p + 4 < text.size() && ident_char(text[p + 4])))
      fail(source, kw, "a KILN_KERNEL function must return void");
    p = skip_space(text, p + 4);
    std::size_t e = p;
    while (e < text.size() && ident_char(text[e])) ++e;
    if (e == p) fail(source, p, "expected the kernel's name after KILN_KERNEL void");
    k.name = text.substr(p, e - p);
    k.name_offset = p;
    k.line = line_at(source, p);
    p = skip_space(text, e);
    if (p >= text.size() || text[p] != '(') fail(source, p, "expected '(' after the kernel name");
    k.params_open = p;
    int depth = 0;
    std::size_t q = p;
    for (; q < text.size(); ++q) {
      if (text[q] == '(')
        ++depth;
      else if (text[q] == ')' && --depth == 0)
        break;
    }
    if (q >= text.size()) fail(source, p, "unbalanced '(' in the kernel's parameter list");
    k.params_close = q;
    std::string_view plist = std::string_view(text).substr(p + 1, q - p - 1);
    std::size_t nonspace = plist.find_first_not_of(" \t\r\n");
    const bool empty = nonspace == std::string_view::npos ||
                       (plist.substr(nonspace).starts_with("void") &&
                        plist.find_first_not_of(" \t\r\n", nonspace + 4) == std::string_view::npos);
    if (!empty) {
      std::size_t b = 0;
      while (b <= plist.size()) {
        std::size_t c = plist.find(',', b);
        if (c == std::string_view::npos) c = plist.size();
        std::string type_text;
        k.params.push_back(parse_param(source, p + 1 + b, plist.substr(b, c - b), type_text));
        k.param_types.push_back(type_text);
        b = c + 1;
      }
    }
    if (!names.insert(k.name).second) fail(source, kw, "kernel '" + k.name + "' defined twice");
    out.kernels.push_back(std::move(k));
  }
  if (out.kernels.empty())
    throw invalid_argument(
        "kernel source declares no entry point: mark kernels with "
        "'KILN_KERNEL void name(...)'");
  if (auto b = find_word(text, "kiln_barrier"); !b.empty())
    out.uses_barrier = true, out.barrier_line = line_at(source, b.front());
  if (auto l = find_word(text, "KILN_LOCAL"); !l.empty())
    out.uses_local_memory = true, out.local_line = line_at(source, l.front());
  if (auto d = find_word(text, "double"); !d.empty())
    out.uses_double = true, out.double_line = line_at(source, d.front());
  return out;
}

}  // namespace kiln::kernel_lang
