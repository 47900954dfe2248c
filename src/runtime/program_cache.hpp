// The in-memory kernel cache: (source, options) -> loaded program, per device. The hot path
// hashes only the lengths and the first and last bytes of the source, then confirms with one
// memcmp, so a repeated compile of a large source costs well under a microsecond per KB.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kiln::detail {

struct program_impl;

struct program_cache {
  // Programs of device generation `gen` only: one compiled before a reset never comes back.
  std::shared_ptr<program_impl> find(std::string_view source, std::string_view options,
                                     std::uint32_t gen);
  // Returns the program the cache keeps: p, or the one another thread inserted first (so two
  // threads that compiled one source at once share a program, and neither is unloaded while
  // the other's launches may still use it).
  std::shared_ptr<program_impl> insert(std::string_view source, std::string_view options,
                                       std::uint32_t gen, std::shared_ptr<program_impl> p);
  void clear();  // after a device reset: every program belongs to the old generation

 private:
  struct entry {
    std::string source, options;
    std::uint32_t gen;
    std::shared_ptr<program_impl> program;
  };
  static std::uint64_t prehash(std::string_view source, std::string_view options) noexcept;
  std::mutex mu_;
  std::unordered_map<std::uint64_t, std::vector<entry>> map_;
};

}  // namespace kiln::detail
