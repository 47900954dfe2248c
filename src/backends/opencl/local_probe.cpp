// Kiln's own count of a kernel's local memory, for drivers that do not report it.
//
// CL_KERNEL_LOCAL_MEM_SIZE is the driver's word, and PoCL 5's CPU device answers 0 for every
// kernel (its metadata holds the automatic locals but the query never reads them) and then runs
// kernels beyond CL_DEVICE_LOCAL_MEM_SIZE. So compile() appends, for each kernel that declares
// __local arrays, a one-item probe kernel "kiln__locals__<name>" that stores the sum of their
// sizeof; the driver's compiler evaluates the sizes (macros, -D options, typedefs). kernel_get()
// runs the probe only when the driver reported 0, once per kernel. The probe source is built by
// a small scan of the OpenCL C text: a declaration it cannot read is left uncounted, and a
// probe that fails to build makes compile() build the plain source instead (no check, no harm).
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>

#include "opencl_backend.hpp"

namespace kiln_opencl {

namespace {

bool ident(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

bool word_at(const std::string& s, size_t p, std::string_view w) {
  return s.compare(p, w.size(), w) == 0 && (p == 0 || !ident(s[p - 1])) &&
         (p + w.size() >= s.size() || !ident(s[p + w.size()]));
}

// The source with comments, string and character literals and preprocessor lines blanked
// (newlines kept), so that the scan below sees code only, at the same offsets.
std::string blank_non_code(const std::string& s) {
  std::string b = s;
  bool line_start = true;
  for (size_t i = 0; i < b.size();) {
    const char c = b[i];
    if (c == '\n') {
      line_start = true;
      ++i;
      continue;
    }
    if (line_start && c == '#') {  // a directive, with its backslash continuations
      while (i < b.size() && !(b[i] == '\n' && b[i - 1] != '\\')) b[i++] = ' ';
      continue;
    }
    if (!std::isspace(static_cast<unsigned char>(c))) line_start = false;
    if (c == '/' && i + 1 < b.size() && b[i + 1] == '/') {
      while (i < b.size() && b[i] != '\n') b[i++] = ' ';
    } else if (c == '/' && i + 1 < b.size() && b[i + 1] == '*') {
      const size_t end = b.find("*/", i + 2);
      const size_t stop = end == std::string::npos ? b.size() : end + 2;
      for (; i < stop; ++i)
        if (b[i] != '\n') b[i] = ' ';
    } else if (c == '"' || c == '\'') {
      b[i++] = ' ';
      while (i < b.size() && b[i] != c && b[i] != '\n') {
        if (b[i] == '\\' && i + 1 < b.size()) b[i++] = ' ';
        b[i++] = ' ';
      }
      if (i < b.size() && b[i] == c) b[i++] = ' ';
    } else {
      ++i;
    }
  }
  return b;
}

// Index of the bracket matching the one at `open`, or npos.
size_t matching(const std::string& b, size_t open, char o, char c) {
  int depth = 0;
  for (size_t i = open; i < b.size(); ++i) {
    if (b[i] == o)
      ++depth;
    else if (b[i] == c && --depth == 0)
      return i;
  }
  return std::string::npos;
}

std::string trim(std::string_view v) {
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
  while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
  return std::string(v);
}

// True when the word at p starts a declaration statement: the previous code character, past
// `volatile`/`const`, ends a statement or opens a block (not a parameter list or a cast).
bool starts_statement(const std::string& b, size_t p) {
  for (;;) {
    while (p > 0 && std::isspace(static_cast<unsigned char>(b[p - 1]))) --p;
    if (p == 0) return false;
    if (ident(b[p - 1])) {
      size_t q = p;
      while (q > 0 && ident(b[q - 1])) --q;
      const std::string w = b.substr(q, p - q);
      if (w != "volatile" && w != "const") return false;
      p = q;
      continue;
    }
    return b[p - 1] == ';' || b[p - 1] == '{' || b[p - 1] == '}';
  }
}

// "sizeof(T[..])" terms of one declaration's text after the address-space word, e.g.
// "float a[N], b[2][M]"; nothing for pointers, initialisers or attributes.
void declaration_terms(const std::string& decl, std::vector<std::string>& terms) {
  std::vector<std::string> parts;
  int depth = 0;
  size_t from = 0;
  for (size_t i = 0; i <= decl.size(); ++i) {
    if (i < decl.size() && depth == 0 && std::strchr("*(=", decl[i])) return;  // not an array
    if (i == decl.size() || (decl[i] == ',' && depth == 0)) {
      parts.push_back(trim(std::string_view(decl).substr(from, i - from)));
      from = i + 1;
    } else if (decl[i] == '[') {
      ++depth;
    } else if (decl[i] == ']') {
      --depth;
    }
  }
  std::string type;
  for (size_t n = 0; n < parts.size(); ++n) {
    const std::string& part = parts[n];
    const size_t bracket = std::min(part.find('['), part.size());
    size_t name = bracket;
    while (name > 0 && std::isspace(static_cast<unsigned char>(part[name - 1]))) --name;
    const size_t name_end = name;
    while (name > 0 && ident(part[name - 1])) --name;
    if (name == name_end) return;  // not "name[...]"
    if (n == 0) type = trim(std::string_view(part).substr(0, name));
    if (type.empty()) return;
    terms.push_back("(ulong)sizeof(" + type + " " + part.substr(bracket) + ")");
  }
}

}  // namespace

std::string with_local_probes(const std::string& source) {
  const std::string b = blank_non_code(source);
  std::string probes;
  for (size_t p = 0; p < b.size(); ++p) {
    if (!word_at(b, p, "__kernel") && !word_at(b, p, "KILN_KERNEL") && !word_at(b, p, "kernel"))
      continue;
    size_t paren = b.find('(', p), name = 0, name_end = 0, close = std::string::npos;
    for (; paren != std::string::npos; paren = b.find('(', close)) {  // past __attribute__((..))
      name_end = paren;
      while (name_end > p && std::isspace(static_cast<unsigned char>(b[name_end - 1]))) --name_end;
      name = name_end;
      while (name > p && ident(b[name - 1])) --name;
      close = matching(b, paren, '(', ')');
      if (close == std::string::npos || b.compare(name, name_end - name, "__attribute__") != 0)
        break;
    }
    if (paren == std::string::npos) break;
    if (name == name_end || close == std::string::npos) continue;
    const size_t brace = b.find_first_of("{;", close);
    if (brace == std::string::npos || b[brace] == ';') continue;  // a prototype
    const size_t end = matching(b, brace, '{', '}');
    if (end == std::string::npos) break;
    std::vector<std::string> terms;
    for (size_t q = brace; q < end; ++q) {
      size_t len = 0;
      for (std::string_view w : {"__local", "local", "KILN_LOCAL"})
        if (word_at(b, q, w)) len = w.size();
      if (len == 0 || !starts_statement(b, q)) continue;
      const size_t semi = b.find(';', q);
      if (semi == std::string::npos || semi > end) break;
      declaration_terms(b.substr(q + len, semi - q - len), terms);
      q = semi;
    }
    if (!terms.empty()) {
      probes += "\n__kernel void kiln__locals__" + b.substr(name, name_end - name) +
                "(__global ulong* kiln__out) { kiln__out[0] = 0";
      for (const std::string& t : terms) probes += " + " + t;
      probes += "; }";
    }
    p = end;
  }
  return probes.empty() ? std::string() : source + "\n" + probes + "\n";
}

kiln_status probe_local_bytes(kiln_device_s* dev, cl_program program, const std::string& name,
                              uint64_t* out) {
  *out = 0;
  const std::string probe_name = "kiln__locals__" + name;
  cl_int e = CL_SUCCESS;
  cl_kernel k = g_cl.clCreateKernel(program, probe_name.c_str(), &e);
  if (e != CL_SUCCESS) return KILN_OK;  // no probe: no local arrays, or built without probes
  cl_mem m = g_cl.clCreateBuffer(dev->ctx, CL_MEM_READ_WRITE, sizeof(cl_ulong), nullptr, &e);
  if (e != CL_SUCCESS) {
    g_cl.clReleaseKernel(k);
    return cl_fail(e, "clCreateBuffer", "local memory probe");
  }
  const size_t one = 1;
  cl_ulong bytes = 0;
  e = g_cl.clSetKernelArg(k, 0, sizeof m, &m);
  if (e == CL_SUCCESS)
    e = g_cl.clEnqueueNDRangeKernel(dev->internal, k, 1, nullptr, &one, &one, 0, nullptr, nullptr);
  if (e == CL_SUCCESS)
    e = g_cl.clEnqueueReadBuffer(dev->internal, m, CL_TRUE, 0, sizeof bytes, &bytes, 0, nullptr,
                                 nullptr);
  g_cl.clReleaseMemObject(m);
  g_cl.clReleaseKernel(k);
  if (e != CL_SUCCESS) return cl_fail(e, "local memory probe", probe_name.c_str());
  *out = bytes;
  return KILN_OK;
}

bool local_probe_forced() {
  // Test hook: ignore the driver's CL_KERNEL_LOCAL_MEM_SIZE and trust the probe alone, so that
  // drivers that do report it (PoCL 3, NVIDIA) exercise the path PoCL 5 needs.
  static const bool forced = [] {
    const char* v = std::getenv("KILN_OPENCL_LOCAL_PROBE");
    return v && std::strcmp(v, "always") == 0;
  }();
  return forced;
}

}  // namespace kiln_opencl
