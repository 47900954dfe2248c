#include "codegen/render_source.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <deque>
#include <mutex>

#include "codegen/target.hpp"
#include "kernel_lang/checked_access.hpp"
#include "kiln/error.hpp"

namespace kiln::codegen {
using kernel_lang::blank_comments_and_literals;
using kernel_lang::excerpt;
using kernel_lang::kernel_decl;
using kernel_lang::parsed_source;

namespace {
// Constant-initialised (zeros) before any registration's constructor runs, whatever the order
// of static initialisation across files.
constexpr std::size_t max_targets = 16;
const target* g_targets[max_targets];
std::size_t g_target_count;
}  // namespace

target_registration::target_registration(const target& t) noexcept {
  if (g_target_count < max_targets) g_targets[g_target_count++] = &t;
}

void apply_tile_policy(tile_policy& p, std::string_view spec) {
  std::string_view rest(spec);
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    const std::size_t eq = item.find('=');
    const std::string key(item.substr(0, eq));
    std::uint32_t* field = nullptr;
    if (key == "group") field = &p.group;
    if (key == "map_items") field = &p.map_items;
    if (key == "reduce_items") field = &p.reduce_items;
    if (key == "compact_items") field = &p.compact_items;
    if (key == "scan_items") field = &p.scan_items;
    if (key == "lookback_window") field = &p.lookback_window;
    if (key == "spin_ns") field = &p.spin_ns;
    const std::string value = eq == std::string_view::npos ? "" : std::string(item.substr(eq + 1));
    const unsigned long v = std::strtoul(value.c_str(), nullptr, 10);
    if (!field || value.empty() || value.find_first_not_of("0123456789") != std::string::npos ||
        (v == 0 && key != "spin_ns") || (v > 1024 && key != "spin_ns") ||
        ((key == "group" || key == "lookback_window") && v % 32 != 0))
      throw invalid_argument(
          "KILN_TILE_POLICY: '" + std::string(item) +
          "' is not one of group or lookback_window (multiples of 32), map_items, "
          "reduce_items, compact_items, scan_items = 1..1024, spin_ns");
    *field = static_cast<std::uint32_t>(v);
  }
}

namespace {
// KILN_TILE_POLICY="compact_items=24,scan_items=12": tile shapes for tuning (docs/query.md).
// Applied to a copy of each target when it is first asked for; kernels and their launchers
// both read the copy, and the shape is part of the generated source, so cached programs of
// another shape are never reused.
const target* tuned(const target* t) {
  static const char* const spec = std::getenv("KILN_TILE_POLICY");  // read once per process
  if (!spec || !*spec) return t;
  static std::mutex mu;
  static std::deque<std::pair<const target*, target>> copies;  // stable addresses
  std::lock_guard lock(mu);
  for (const auto& [from, copy] : copies)
    if (from == t) return &copy;
  target copy = *t;
  apply_tile_policy(copy.tiles, spec);
  return &copies.emplace_back(t, copy).second;
}
}  // namespace

const target& target_for(std::string_view name) {
  for (std::size_t i = 0; i < g_target_count; ++i)
    if (name == g_targets[i]->name) return *tuned(g_targets[i]);
  std::string known;
  for (std::size_t i = 0; i < g_target_count; ++i)
    known.append(known.empty() ? "" : ", ").append(g_targets[i]->name);
  throw unsupported("Kiln has no codegen target named '" + std::string(name) +
                    "' (targets: " + known + ")");
}

std::string body_name(const std::string& kernel) { return "kiln__body_" + kernel; }

std::string checked_params(const kernel_decl& k) {
  std::string s = "KILN_GLOBAL uint64_t* kiln__err";
  for (std::size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].is_pointer) s += ", uint64_t " + kernel_lang::checked_count_name(i);
  return s;
}

std::string checked_args(const kernel_decl& k) {
  std::string s = "kiln__err";
  for (std::size_t i = 0; i < k.params.size(); ++i)
    if (k.params[i].is_pointer) s += ", " + kernel_lang::checked_count_name(i);
  return s;
}
std::string cpu_entry_name(const std::string& kernel) { return "kiln_cpu_" + kernel; }

namespace {

// Kernels as their own entry points: the parameter list becomes the dialect's (on one line,
// followed by as many newlines as the user's list spanned) and the body opens with the
// prologue, so every later line keeps its number.
// `blank` is the user's source with comments and literals blanked (offsets as in `source`).
std::string render_inline_entries(std::string out, std::string_view source,
                                  const std::string& blank, const parsed_source& parsed,
                                  const target& t, bool checked) {
  std::size_t at = 0;
  for (const kernel_decl& k : parsed.kernels) {
    const std::size_t brace = blank.find('{', k.params_close);
    if (brace == std::string::npos)
      throw compile_error(
          "kernel '" + k.name + "' (line " + std::to_string(k.line) + ") has no body", "",
          excerpt(source, {k.line}));
    out.append(source.substr(at, k.params_open + 1 - at));
    t.emit_params(out, k, checked);
    const std::string_view plist = source.substr(k.params_open, k.params_close - k.params_open);
    out.append(static_cast<std::size_t>(std::count(plist.begin(), plist.end(), '\n')), '\n');
    out.append(source.substr(k.params_close, brace + 1 - k.params_close));
    t.emit_prologue(out, k, checked);
    at = brace + 1;
  }
  out.append(source.substr(at));
  return out;
}

}  // namespace

std::string render(std::string_view user_source, const parsed_source& user_parsed,
                   std::string_view dialect, bool checked) {
  const target& t = target_for(dialect);
  if (checked && !t.checked_prelude)
    throw unsupported("the '" + std::string(dialect) + "' codegen target has no checked mode");
  // Checked mode renders the rewritten source (same lines, longer bodies) as if the user had
  // written it: parsed again for its offsets.
  std::string rewritten;
  parsed_source reparsed;
  if (checked) {
    rewritten = kernel_lang::rewrite_checked_accesses(user_source, user_parsed);
    reparsed = kernel_lang::parse(rewritten);
  }
  const std::string_view original = checked ? std::string_view(rewritten) : user_source;
  const parsed_source& parsed = checked ? reparsed : user_parsed;
  // Blanked once for the dialect hooks; respelling keeps every offset, so it stays valid.
  const bool hooks = t.respell || !t.emit_entry;
  const std::string blank = hooks ? blank_comments_and_literals(original) : std::string();
  std::string respelled;
  std::string_view source = original;
  if (t.respell) {
    respelled.assign(original);
    t.respell(respelled, blank);
    source = respelled;
  }
  std::string out = t.prelude;
  if (checked) out += t.checked_prelude;
  out.reserve(out.size() + source.size() * 2 + 512);
  out += "#line 1 \"";
  out += user_file_name;
  out += "\"\n";
  if (!t.emit_entry)
    return render_inline_entries(std::move(out), source, blank, parsed, t, checked);
  // Rewrite each kernel's name and open its parameter list with the hidden parameter; the
  // edits stay on the kernel's line so every line number is preserved.
  std::size_t at = 0;
  for (const kernel_decl& k : parsed.kernels) {
    out.append(source.substr(at, k.name_offset - at));
    out += body_name(k.name);
    out.append(source.substr(k.name_offset + k.name.size(),
                             k.params_open + 1 - (k.name_offset + k.name.size())));
    out += t.body_param;
    if (checked) out += ", " + checked_params(k);
    if (!k.params.empty()) out += ", ";
    at = k.params.empty() ? k.params_close : k.params_open + 1;
  }
  out.append(source.substr(at));
  out += "\n#line 1 \"kiln_entry_points\"\n";
  for (const kernel_decl& k : parsed.kernels) t.emit_entry(out, k, checked);
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

}  // namespace kiln::codegen
