// Content-addressed key for the persistent kernel cache.
//
// The key is an XXH3-128 digest of everything that can change the compiled binary. Each field is
// length-prefixed so that no two different field tuples share an encoding.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kiln::detail {

struct cache_key {
  std::uint64_t hi = 0, lo = 0;

  // 32 lowercase hex chars: hi then lo, each zero-padded to 16.
  std::string hex() const;

  bool operator==(const cache_key&) const = default;
};

// Bump when the entry layout or the key recipe changes: old entries then simply stop matching.
inline constexpr std::uint32_t cache_format_version = 1;

cache_key make_cache_key(std::string_view backend, std::string_view arch,
                         std::string_view compiler_id, std::string_view options,
                         std::string_view source);

// XXH3-64 of the bytes.
std::uint64_t checksum64(std::span<const std::byte> bytes);

}  // namespace kiln::detail
