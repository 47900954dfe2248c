// Shared by the backend plugins: wraps each ABI implementation so that no C++ exception
// crosses the C boundary. Each plugin instantiates Guard with its own set_error; the table
// macro in plugin_table.hpp does it for every entry.
//
//   .init = kiln_plugin::Guard<&set_error, init>::call,
#pragma once

#include <cstddef>
#include <exception>
#include <new>
#include <type_traits>

#include "backend_abi.h"

namespace kiln_plugin {

using set_error_fn = kiln_status (*)(kiln_status, const char*, ...) noexcept;

template <set_error_fn SetError>
kiln_status from_exception() noexcept {
  try {
    throw;
  } catch (const std::bad_alloc&) {
    return SetError(KILN_ERR_OUT_OF_MEMORY, "out of host memory");
  } catch (const std::exception& e) {
    return SetError(KILN_ERR_BACKEND, "internal error: %s", e.what());
  } catch (...) {
    return SetError(KILN_ERR_BACKEND, "internal error: unknown exception");
  }
}

template <set_error_fn SetError, auto Fn>
struct Guard;

// A noexcept function cannot throw and is called as it is (last_error, availability and the
// other plain const char* entries). Anything else is caught: a status function returns the
// exception's status, the others record it for last_error() and return a zero value (0
// devices, no extension, unsupported).
template <set_error_fn SetError, class R, class... A, bool NoThrow, R (*Fn)(A...) noexcept(NoThrow)>
struct Guard<SetError, Fn> {
  static R call(A... a) noexcept {
    if constexpr (NoThrow) {
      return Fn(a...);
    } else {
      try {
        return Fn(a...);
      } catch (...) {
        if constexpr (std::is_same_v<R, kiln_status>) {
          return from_exception<SetError>();
        } else {
          from_exception<SetError>();
          if constexpr (!std::is_void_v<R>) return R{};
        }
      }
    }
  }
};

// An optional entry the plugin lacks, declared as `constexpr std::nullptr_t name = nullptr;`:
// the table holds NULL and the core takes its other path.
template <set_error_fn SetError>
struct Guard<SetError, nullptr> {
  static constexpr std::nullptr_t call = nullptr;
};

}  // namespace kiln_plugin
