// Running a PyTorch peer script (bench/torch_*.py --tsv) and reading its rows: each prints
// "ROW<TAB>group<TAB>name<TAB>variant<TAB>value<TAB>unit<TAB>ms" per case; other lines are
// echoed with a "torch|" prefix.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace kiln_bench {

struct torch_row {
  std::string group, name, variant, unit;
  double value = 0;
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// "a,b,,c" -> {"a", "b", "c"}.
inline std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    const std::string item =
        s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

inline std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

// Runs cmd (stderr merged) and returns its ROW lines; a failing script is reported, not fatal.
inline std::vector<torch_row> run_torch_rows(const std::string& cmd) {
  std::vector<torch_row> rows;
  std::printf("\n== PyTorch: %s\n", cmd.c_str());
  std::fflush(stdout);
  std::FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) {
    std::printf("PyTorch: could not start %s\n", cmd.c_str());
    return rows;
  }
  std::string line;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p)) {
    line += buf;
    if (line.empty() || line.back() != '\n') continue;
    line.pop_back();
    if (line.rfind("ROW\t", 0) == 0) {
      std::vector<std::string> f;
      for (std::size_t s = 0, t; s <= line.size(); s = t + 1) {
        t = line.find('\t', s);
        if (t == std::string::npos) t = line.size();
        f.push_back(line.substr(s, t - s));
      }
      if (f.size() >= 6) rows.push_back({f[1], f[2], f[3], f[5], std::atof(f[4].c_str())});
    } else {
      std::printf("  torch| %s\n", line.c_str());
    }
    line.clear();
  }
  const int status = pclose(p);
  if (status != 0)
    std::printf("PyTorch: exited with status %d\n",
                WIFEXITED(status) ? WEXITSTATUS(status) : status);
  return rows;
}

}  // namespace kiln_bench
