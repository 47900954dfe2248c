// Sets an environment variable for one scope and restores what was there (tests that switch a
// path with KILN_* variables: KILN_LINALG_PORTABLE, KILN_CUDNN_GRAPH, ...).
#pragma once

#include <cstdlib>
#include <optional>
#include <string>

namespace conformance {

class scoped_env {
 public:
  scoped_env(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value.c_str(), 1);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }
  scoped_env(const scoped_env&) = delete;
  scoped_env& operator=(const scoped_env&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

}  // namespace conformance
