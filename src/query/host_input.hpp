// Host inputs (host_range | kiln::on(dev)): the device is chosen (kiln::automatic: by size,
// from the calibrated crossover) and the data is streamed to it through pinned staging
// buffers, the host's copy into one buffer overlapping the DMA out of the other.
#pragma once

#include <cstdint>
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

}  // namespace kiln::detail::q
