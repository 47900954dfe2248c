#include "kiln/error.hpp"

#include "runtime/runtime.hpp"

namespace kiln {

const char* to_string(error_category c) noexcept {
  switch (c) {
    case error_category::invalid_argument: return "invalid argument";
    case error_category::out_of_memory: return "out of memory";
    case error_category::compile_error: return "compile error";
    case error_category::unsupported: return "unsupported";
    case error_category::backend_failure: return "backend failure";
    case error_category::not_found: return "not found";
    case error_category::device_lost: return "device lost";
  }
  return "error";
}

namespace detail {

void throw_status(const kiln_backend& api, kiln_status s, const std::string& what) {
  std::string msg = what + " (" + api.name + "): " + api.last_error();
  if (s == KILN_ERR_DEVICE_LOST) {
    // The plugin knows which of its devices failed: mark them, so that every later call on
    // them is refused in the core (never reaching a poisoned driver context).
    for (const auto& b : registry::get().backends)
      if (b->api == &api)
        for (const auto& d : b->devices) d->refresh_lost();
    throw device_lost(msg + "; kiln::device::reset() makes the device usable again");
  }
  switch (s) {
    case KILN_ERR_INVALID_ARGUMENT: throw invalid_argument(msg);
    case KILN_ERR_OUT_OF_MEMORY: throw out_of_memory(msg);
    case KILN_ERR_COMPILE: throw compile_error(msg, api.last_error(), "");
    case KILN_ERR_UNSUPPORTED: throw unsupported(msg);
    case KILN_ERR_NOT_FOUND: throw not_found(msg);
    default: throw backend_failure(msg);
  }
}

}  // namespace detail
}  // namespace kiln
