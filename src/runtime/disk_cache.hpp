// Persistent on-disk cache of compiled kernel binaries.
//
//   if (auto dir = disk_cache::configured_dir()) {
//     disk_cache cache(*dir);
//     const cache_key key = make_cache_key("cuda", "sm_90", compiler_id, options, source);
//     if (auto binary = cache.load(key)) return *binary;   // hit: validated bytes
//     std::vector<std::byte> binary = compile(...);
//     cache.store(key, binary);                            // best effort; result may be ignored
//   }
//
// One file per entry, <dir>/<first 2 hex>/<hex>.kbin, holding a checksummed header then the
// payload. Entries are published by rename(), so readers see either nothing or a whole file, and
// any number of threads and processes may share a directory. The cache is an optimisation: load()
// and store() never throw, and every failure is a miss or a `false`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "runtime/cache_key.hpp"

namespace kiln::detail {

class disk_cache {
 public:
  // Entry header: magic "KILNBIN\0", version u32, reserved u32, key hi u64, key lo u64,
  // payload size u64, payload checksum u64, header checksum u64 (of the preceding bytes).
  // All integers little-endian.
  static constexpr std::size_t header_size = 56;
  static constexpr std::size_t header_checksum_offset = 48;

  // KILN_CACHE=0/off/false disables (nullopt); KILN_CACHE_DIR overrides; else
  // $XDG_CACHE_HOME/kiln (absolute paths only, per the XDG spec); else $HOME/.cache/kiln; else
  // nullopt.
  static std::optional<std::filesystem::path> configured_dir();

  // The directory is created lazily on the first store().
  explicit disk_cache(std::filesystem::path dir) noexcept : dir_(std::move(dir)) {}

  // nullopt on a miss. Invalid entries (corrupt, truncated, wrong version or key) are removed and
  // reported as misses.
  std::optional<std::vector<std::byte>> load(const cache_key& key) const noexcept;

  // Writes a unique temporary file next to the entry, then renames it over the entry. Returns
  // false on any failure (read-only directory, full disk, ...).
  bool store(const cache_key& key, std::span<const std::byte> payload) const noexcept;

  struct stats {
    std::size_t entries = 0;
    std::uint64_t bytes = 0;
  };
  // Counts files named like entries and sums their sizes; contents are not validated.
  stats scan() const;
  // Removes entries and temporaries older than an hour (from crashed writers); leaves any other
  // file alone. Returns the number of entries removed.
  std::size_t clear() const;

  const std::filesystem::path& dir() const noexcept { return dir_; }
  std::filesystem::path entry_path(const cache_key& key) const;

 private:
  std::filesystem::path dir_;
};

}  // namespace kiln::detail
