// DLPack 1.x's versioned capsule ("dltensor_versioned"), with the DLPack header Kiln builds
// against. Debian 12's libdlpack-dev is 0.6, which predates DLManagedTensorVersioned; the 1.x
// ABI (https://dmlc.github.io/dlpack/latest/c_api.html) keeps 0.6's DLTensor and adds a version,
// flags and a deleter of its own, so with a 0.x header Kiln declares those few members itself
// (the layout below is the 1.x header's, field for field); with a 1.x header it uses the header's.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

namespace kiln::python::dl {

#if defined(DLPACK_MAJOR_VERSION) && DLPACK_MAJOR_VERSION >= 1
using pack_version = DLPackVersion;
using managed_versioned = DLManagedTensorVersioned;
constexpr std::uint64_t flag_read_only = DLPACK_FLAG_BITMASK_READ_ONLY;
constexpr std::uint64_t flag_is_copied = DLPACK_FLAG_BITMASK_IS_COPIED;
#else
struct pack_version {
  std::uint32_t major;
  std::uint32_t minor;
};
struct managed_versioned {
  pack_version version;  // first, so that any 1.x consumer can read it
  void* manager_ctx;
  void (*deleter)(managed_versioned* self);
  std::uint64_t flags;
  DLTensor dl_tensor;
};
constexpr std::uint64_t flag_read_only = 1;  // the consumer must not write the memory
constexpr std::uint64_t flag_is_copied = 2;  // the producer copied it for this export
#endif

// The version Kiln's versioned capsules carry: the 1.0 ABI (1.1 only adds element type codes).
constexpr pack_version kiln_version{1, 0};

constexpr const char* legacy_name = "dltensor";
constexpr const char* legacy_used_name = "used_dltensor";
constexpr const char* versioned_name = "dltensor_versioned";
constexpr const char* versioned_used_name = "used_dltensor_versioned";

}  // namespace kiln::python::dl
