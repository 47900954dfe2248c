// kiln::graph's report: stage failures as kiln::graph_error naming the stage, and the summary
// as a text table and as JSON.
#include <cstdio>
#include <sstream>

#include "graph/graph_impl.hpp"

namespace kiln {
namespace detail {

std::string describe(std::exception_ptr e, error_category* category) {
  *category = error_category::backend_failure;
  try {
    std::rethrow_exception(e);
  } catch (const error& k) {
    *category = k.category();
    return k.what();
  } catch (const std::exception& x) {
    // A host function's or task's own exception: reported as a failure of the work; cause()
    // gives it back as it was thrown.
    return x.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

void throw_stage_failure(graph_impl& g, std::size_t index, std::exception_ptr e) {
  const stage& s = g.stages[index];
  error_category c;
  std::string msg = "graph '" + g.options.name + "', stage '" + s.name + "' (" + kind_name(s.kind) +
                    ") failed: " + describe(e, &c);
  std::string others;
  std::size_t skipped = 0;
  for (const stage& o : g.stages) {
    if (&o != &s && o.report.state == stage_state::failed) others += " '" + o.name + "'";
    skipped += o.report.state == stage_state::skipped;
  }
  if (!others.empty()) msg += "; also failed:" + others;
  if (skipped) msg += "; " + std::to_string(skipped) + " stage(s) skipped";
  throw graph_error(c, msg, s.name, e, g.summary);
}

}  // namespace detail

namespace {

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string json_number(double v) { return v < 0 ? "null" : fixed(v, 6); }

const char* kind_text(replay_kind k) {
  switch (k) {
    case replay_kind::none: return "none";
    case replay_kind::queues: return "queues";
    case replay_kind::cuda_graph: return "cuda_graph";
  }
  return "none";
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

}  // namespace

const char* to_string(stage_state s) noexcept {
  switch (s) {
    case stage_state::not_run: return "not_run";
    case stage_state::ran: return "ran";
    case stage_state::failed: return "failed";
    case stage_state::skipped: return "skipped";
  }
  return "unknown";
}

const stage_report* graph_summary::find(std::string_view stage) const {
  for (const stage_report& s : stages)
    if (s.name == stage) return &s;
  return nullptr;
}

std::size_t graph_summary::count(stage_state st) const {
  std::size_t n = 0;
  for (const stage_report& s : stages) n += s.state == st;
  return n;
}

std::string graph_summary::table() const {
  std::size_t w = 5;
  for (const stage_report& s : stages) w = std::max(w, s.name.size());
  std::ostringstream out;
  out << "graph '" << graph << "': " << replays << " run(s) as " << kind_text(kind);
  if (!kind_reason.empty() && kind != replay_kind::cuda_graph) out << " (" << kind_reason << ")";
  if (last_run_ms >= 0) out << ", last " << fixed(last_run_ms, 3) << " ms";
  if (last_device_ms >= 0) out << " (" << fixed(last_device_ms, 3) << " ms on the device)";
  out << "\n"
      << pad("stage", w) << "  kind    state    device   last ms   total ms  launches  bytes\n";
  for (const stage_report& s : stages) {
    out << pad(s.name, w) << "  " << pad(s.kind, 6) << "  " << pad(to_string(s.state), 7) << "  "
        << pad(s.device.empty() ? "-" : s.device, 7) << "  "
        << pad(s.last_ms < 0 ? "-" : fixed(s.last_ms, 3), 8) << "  " << pad(fixed(s.total_ms, 3), 9)
        << "  " << pad(std::to_string(s.launches), 8) << "  " << s.bytes << "\n";
    if (s.state == stage_state::failed) out << "  error: " << s.error << "\n";
  }
  return out.str();
}

std::string graph_summary::json() const {
  std::ostringstream out;
  out << "{\"graph\":" << json_string(graph) << ",\"kind\":\"" << kind_text(kind)
      << "\",\"kind_reason\":" << json_string(kind_reason) << ",\"replays\":" << replays
      << ",\"instantiations\":" << instantiations << ",\"updates\":" << updates
      << ",\"last_run_ms\":" << json_number(last_run_ms)
      << ",\"last_device_ms\":" << json_number(last_device_ms) << ",\"stages\":[";
  for (std::size_t i = 0; i < stages.size(); ++i) {
    const stage_report& s = stages[i];
    out << (i ? "," : "") << "{\"name\":" << json_string(s.name) << ",\"kind\":\"" << s.kind
        << "\",\"after\":[";
    for (std::size_t j = 0; j < s.after.size(); ++j)
      out << (j ? "," : "") << json_string(s.after[j]);
    out << "],\"state\":\"" << to_string(s.state) << "\",\"device\":" << json_string(s.device)
        << ",\"runs\":" << s.runs << ",\"failures\":" << s.failures << ",\"bytes\":" << s.bytes
        << ",\"launches\":" << s.launches << ",\"last_ms\":" << json_number(s.last_ms)
        << ",\"total_ms\":" << fixed(s.total_ms, 6);
    if (s.state == stage_state::failed) out << ",\"error\":" << json_string(s.error);
    out << "}";
  }
  out << "]}";
  return out.str();
}

}  // namespace kiln
