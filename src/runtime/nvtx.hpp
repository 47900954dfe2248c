// NVTX ranges in the "kiln" domain, so Nsight Systems shows Kiln's work by name.
//
//   KILN_TRACE_RANGE("tensor eval");                      // a fixed name, registered once
//   detail::trace_range range("launch", kernel.name);     // "launch <name>", built on demand
//
// NVTX3 is header-only: its first call looks for a tool (NVTX_INJECTION64_PATH, set by nsys)
// and dlopens it; without one, the domain handle is null and a range does nothing but test
// it. Built without the header (KILN_HAVE_NVTX undefined: no CUDA toolkit), everything here
// is an empty inline. The two forms live in different inline namespaces, so both may be
// compiled into one program (the tests do) without breaking the one-definition rule.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>

#if KILN_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace kiln::detail {
#if KILN_HAVE_NVTX
inline namespace nvtx_on {

// The "kiln" domain; null when no tool is attached (NVTX returns null without one).
inline nvtxDomainHandle_t trace_domain() noexcept {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("kiln");
  return domain;
}

// A name registered with the tool once (a tool then copies no string per range).
class trace_name {
 public:
  explicit trace_name(const char* text) noexcept
      : text_(text),
        handle_(trace_domain() ? nvtxDomainRegisterStringA(trace_domain(), text) : nullptr) {}
  const char* text() const noexcept { return text_; }
  nvtxStringHandle_t handle() const noexcept { return handle_; }

 private:
  const char* text_;
  nvtxStringHandle_t handle_;
};

// Pushes a range in the constructor and pops it in the destructor (same thread).
class trace_range {
 public:
  explicit trace_range(const trace_name& name) noexcept : domain_(trace_domain()) {
    if (!domain_) return;
    nvtxEventAttributes_t a = attributes();
    if (name.handle()) {
      a.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
      a.message.registered = name.handle();
    } else {
      a.messageType = NVTX_MESSAGE_TYPE_ASCII;
      a.message.ascii = name.text();
    }
    nvtxDomainRangePushEx(domain_, &a);
  }
  // "<prefix> <name>", cut at 127 characters; formatted only when a tool is attached.
  trace_range(const char* prefix, std::string_view name) noexcept : domain_(trace_domain()) {
    if (!domain_) return;
    char text[128];
    const std::size_t p = std::min(std::strlen(prefix), sizeof text - 2);
    std::memcpy(text, prefix, p);
    text[p] = ' ';
    const std::size_t n = std::min(name.size(), sizeof text - p - 2);
    std::memcpy(text + p + 1, name.data(), n);
    text[p + 1 + n] = '\0';
    nvtxEventAttributes_t a = attributes();
    a.messageType = NVTX_MESSAGE_TYPE_ASCII;
    a.message.ascii = text;  // the tool copies it during the call
    nvtxDomainRangePushEx(domain_, &a);
  }
  ~trace_range() {
    if (domain_) nvtxDomainRangePop(domain_);
  }
  trace_range(const trace_range&) = delete;
  trace_range& operator=(const trace_range&) = delete;

 private:
  static nvtxEventAttributes_t attributes() noexcept {
    nvtxEventAttributes_t a{};
    a.version = NVTX_VERSION;
    a.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
    return a;
  }
  nvtxDomainHandle_t domain_;
};

}  // namespace nvtx_on
#else
inline namespace nvtx_off {

class trace_name {
 public:
  explicit trace_name(const char* text) noexcept : text_(text) {}
  const char* text() const noexcept { return text_; }

 private:
  const char* text_;
};

class trace_range {
 public:
  explicit trace_range(const trace_name&) noexcept {}
  trace_range(const char*, std::string_view) noexcept {}
  trace_range(const trace_range&) = delete;
  trace_range& operator=(const trace_range&) = delete;
};

}  // namespace nvtx_off
#endif
}  // namespace kiln::detail

#define KILN_TRACE_CONCAT_(a, b) a##b
#define KILN_TRACE_CONCAT(a, b) KILN_TRACE_CONCAT_(a, b)
// A range over the rest of the enclosing scope, named by a string literal registered once.
#define KILN_TRACE_RANGE(literal)                                                                 \
  static const ::kiln::detail::trace_name KILN_TRACE_CONCAT(kiln_trace_name_, __LINE__)(literal); \
  const ::kiln::detail::trace_range KILN_TRACE_CONCAT(                                            \
      kiln_trace_range_, __LINE__)(KILN_TRACE_CONCAT(kiln_trace_name_, __LINE__))
