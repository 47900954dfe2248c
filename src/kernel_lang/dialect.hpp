// Per-backend spellings of the portable kernel language (tinygrad-style tables): a prelude
// defining the builtins, the hidden first parameter every kernel body gets, and the entry
// wrapper that maps the backend's launch onto the body with the exact launch range.
#pragma once

#include <string>
#include <string_view>

#include "backend_abi.h"
#include "kernel_lang/parser.hpp"

namespace kiln::kernel_lang {

struct dialect_table {
  const char* name;
  const char* prelude;
  const char* body_param;  // inserted first in every kernel body's parameter list
  // Appends the backend entry point for kernel k to out.
  void (*emit_entry)(std::string& out, const kernel_decl& k);
  // Dialects whose kernels are their own entry points (OpenCL C: __local variables may only be
  // declared in a kernel function) leave emit_entry null. Instead render() replaces each
  // kernel's parameter list with emit_params and opens its body with emit_prologue, which
  // rebuilds the user's parameters and guards the launch range. Neither may emit a newline.
  void (*emit_params)(std::string& out, const kernel_decl& k) = nullptr;
  void (*emit_prologue)(std::string& out, const kernel_decl& k) = nullptr;
  // Respells what the dialect lacks in the user's source, keeping every offset and line:
  // `blank` is the source with comments and literals blanked (same length).
  void (*respell)(std::string& source, const std::string& blank) = nullptr;
};

// The table whose name is `dialect` (a backend's kiln_backend_v1::dialect); kiln::unsupported
// naming it when no table has that name.
const dialect_table& dialect_for(std::string_view dialect);

extern const dialect_table cuda_dialect;
extern const dialect_table cpp_dialect;
extern const dialect_table opencl_dialect;

// Name of the renamed kernel body: "kiln__body_<name>".
std::string body_name(const std::string& kernel);
// Name of the CPU backend's entry symbol for a kernel: "kiln_cpu_<name>".
std::string cpu_entry_name(const std::string& kernel);

}  // namespace kiln::kernel_lang
