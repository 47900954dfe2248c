// Shared by the backend plugins: wraps each ABI implementation so that no C++ exception
// crosses the C boundary. Each plugin instantiates Guard with its own set_error.
//
//   .init = kiln_plugin::Guard<&set_error, init>::call,
#pragma once

#include <exception>
#include <new>

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

template <set_error_fn SetError, class... A, kiln_status (*Fn)(A...)>
struct Guard<SetError, Fn> {
  static kiln_status call(A... a) noexcept {
    try {
      return Fn(a...);
    } catch (...) {
      return from_exception<SetError>();
    }
  }
};

template <set_error_fn SetError, class... A, void (*Fn)(A...)>
struct Guard<SetError, Fn> {
  static void call(A... a) noexcept {
    try {
      Fn(a...);
    } catch (...) {
      from_exception<SetError>();
    }
  }
};

template <set_error_fn SetError, int (*Fn)()>
int count_guard() noexcept {
  try {
    return Fn();
  } catch (...) {
    from_exception<SetError>();
    return 0;
  }
}

}  // namespace kiln_plugin
