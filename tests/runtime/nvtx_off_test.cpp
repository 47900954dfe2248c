// src/runtime/nvtx.hpp built as on a machine without the CUDA toolkit: every range is an
// empty inline that still compiles at each kind of call site.
#undef KILN_HAVE_NVTX
#include <gtest/gtest.h>

#include <string>
#include <type_traits>

#include "runtime/nvtx.hpp"

namespace {

TEST(NvtxOff, RangesCompileToNothing) {
  static_assert(std::is_empty_v<kiln::detail::trace_range>);
  const std::string kernel = "axpy";
  {
    KILN_TRACE_RANGE("query collect");
    const kiln::detail::trace_range launch("launch", kernel);
    KILN_TRACE_RANGE("nested on another line");
  }
  EXPECT_STREQ(kiln::detail::trace_name("compile").text(), "compile");
}

}  // namespace
