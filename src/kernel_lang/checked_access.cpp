#include "kernel_lang/checked_access.hpp"

#include <algorithm>
#include <cctype>
#include <map>

namespace kiln::kernel_lang {
namespace {

bool ident_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

std::size_t skip_space(std::string_view t, std::size_t p, std::size_t end) {
  while (p < end && std::isspace(static_cast<unsigned char>(t[p]))) ++p;
  return p;
}

// Offset of the bracket closing the one opened at `open`, or npos; counts (), [] and {} in
// the blanked text, so brackets inside literals and comments do not count.
std::size_t matching(std::string_view blank, std::size_t open, std::size_t end) {
  int depth = 0;
  for (std::size_t p = open; p < end; ++p) {
    const char c = blank[p];
    if (c == '(' || c == '[' || c == '{') ++depth;
    if ((c == ')' || c == ']' || c == '}') && --depth == 0) return p;
  }
  return std::string_view::npos;
}

// Whether the body assigns to `name` (=, op=, ++, --): its accesses then cannot be checked
// against the count of the buffer it was given.
bool reassigned(std::string_view blank, std::size_t begin, std::size_t end, std::string_view name) {
  for (std::size_t p = blank.find(name, begin); p < end; p = blank.find(name, p + 1)) {
    const std::size_t e = p + name.size();
    if ((p > 0 && ident_char(blank[p - 1])) || (e < blank.size() && ident_char(blank[e]))) continue;
    std::size_t before = p;
    while (before > begin && std::isspace(static_cast<unsigned char>(blank[before - 1]))) --before;
    if (before >= begin + 2 &&
        (blank.substr(before - 2, 2) == "++" || blank.substr(before - 2, 2) == "--"))
      return true;
    const std::size_t q = skip_space(blank, e, end);
    if (q + 1 >= end) continue;
    const std::string_view op = blank.substr(q, 2);
    if (op == "++" || op == "--") return true;
    if (blank[q] == '=' && blank[q + 1] != '=') return true;
    if (std::string_view("+-*/%&|^").find(blank[q]) != std::string_view::npos &&
        blank[q + 1] == '=')
      return true;
    if ((op == "<<" || op == ">>") && q + 2 < end && blank[q + 2] == '=') return true;
  }
  return false;
}

struct rewriter {
  std::string_view source, blank;
  std::map<std::string, std::size_t, std::less<>> checked;  // parameter name -> index
  std::string out;

  int line_at(std::size_t off) const {
    return 1 + static_cast<int>(std::count(source.begin(), source.begin() + long(off), '\n'));
  }

  // Copies source[begin, end) to out, rewriting checked accesses (nested ones too).
  void copy(std::size_t begin, std::size_t end) {
    std::size_t p = begin;
    while (p < end) {
      if (!ident_char(blank[p]) || (p > 0 && ident_char(blank[p - 1]))) {
        out += source[p++];
        continue;
      }
      std::size_t e = p;
      while (e < end && ident_char(blank[e])) ++e;
      const std::string_view word = blank.substr(p, e - p);
      const auto it = checked.find(word);
      const std::size_t lb = skip_space(blank, e, end);
      // Not a member (s.x[i], s->x[i]) and followed by '['.
      std::size_t before = p;
      while (before > 0 && std::isspace(static_cast<unsigned char>(blank[before - 1]))) --before;
      const bool member = before > 0 && (blank[before - 1] == '.' ||
                                         (before > 1 && blank.substr(before - 2, 2) == "->"));
      const std::size_t rb = lb < end && blank[lb] == '[' ? matching(blank, lb, end) : end;
      if (it == checked.end() || member || rb >= end) {
        out.append(source.substr(p, e - p));
        p = e;
        continue;
      }
      const std::string i = std::to_string(it->second);
      out += "(*kiln__ck(";
      out.append(source.substr(p, lb - p));  // the name and any spaces or newlines before '['
      out += ", (";
      copy(lb + 1, rb);
      out += "), " + checked_count_name(it->second) + ", kiln__err, " + i + "u, " +
             std::to_string(line_at(p)) + "u))";
      p = rb + 1;
    }
  }
};

}  // namespace

std::string checked_count_name(std::size_t i) { return "kiln__n" + std::to_string(i); }

std::string rewrite_checked_accesses(std::string_view source, const parsed_source& parsed) {
  const std::string blank = blank_comments_and_literals(source);
  rewriter r{source, blank, {}, {}};
  r.out.reserve(source.size() * 2);
  std::size_t at = 0;
  for (const kernel_decl& k : parsed.kernels) {
    const std::size_t open = blank.find('{', k.params_close);
    if (open == std::string::npos) break;  // no body: the renderer reports it
    std::size_t close = matching(blank, open, blank.size());
    if (close == std::string::npos) close = blank.size();
    r.checked.clear();
    for (std::size_t i = 0; i < k.params.size(); ++i)
      if (k.params[i].is_pointer && !reassigned(blank, open + 1, close, k.params[i].name))
        r.checked.emplace(k.params[i].name, i);
    r.out.append(source.substr(at, open + 1 - at));
    r.copy(open + 1, close);
    at = close;
  }
  r.out.append(source.substr(std::min(at, source.size())));
  return r.out;
}

}  // namespace kiln::kernel_lang
