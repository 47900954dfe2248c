// Host inputs (host_range | kiln::on(dev)): the device is chosen (kiln::automatic: by size,
// from the calibrated crossover) and the data is streamed to it in chunks through the device's
// pinned staging pool (host_staging.hpp), the host's copy of a chunk overlapping the DMAs of
// the ones before it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "kiln/query.hpp"

namespace kiln::detail::q {

void stage_host_inputs(query_desc& d, query_stats& st);

// kiln::automatic: the device for a query reading `bytes` of host data.
device automatic_device(std::uint64_t bytes);

// Input size (bytes) from which a GPU beats the CPU on host data: calibrated value from
// <cache dir>/placement.txt, else the measured default.
std::uint64_t gpu_crossover_bytes(const device& gpu);
// Writes the crossover of `gpu` into placement.txt (`kiln calibrate`). Returns the file.
std::string store_crossover(const device& gpu, std::uint64_t bytes);

// The placement store, <cache dir>/placement.txt: one value per line, keyed by the device and
// the model it was measured on ("cuda:0@NVIDIA_H200"):
//   <key> <value>           the query crossover in bytes (the format's first form, kept)
//   <key> <name> <value>    a named value: kiln::tensor's thresholds (elementwise, reduction,
//                           gemm, conv), docs/placement.md
// Readers skip lines of the other form, so older Kilns read their crossover from a newer file.
// name "" is the crossover. nullopt: no file, no cache dir (KILN_CACHE=0), or no such line.
std::optional<std::uint64_t> stored_placement(const device& dev, const std::string& name);
// Replaces (or adds) dev's `name` line, atomically (write and rename). Returns the file;
// kiln::invalid_argument when the cache is disabled.
std::string store_placement(const device& dev, const std::string& name, std::uint64_t value);
// The file (empty when the cache is disabled).
std::filesystem::path placement_file();

}  // namespace kiln::detail::q
