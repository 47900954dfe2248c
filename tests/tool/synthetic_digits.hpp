// Synthetic MNIST-format digits for the `kiln train` tests: 10,000 28x28 images whose label k is
// a bright band at rows 2k..2k+3 over noise, learnable in one epoch, so a test accuracy or a
// falling loss says whether training worked. Written once per name under the test temp dir.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "kiln/data/mnist.hpp"

inline std::string learnable_digits(const std::string& name, std::uint32_t seed) {
  const std::string dir = testing::TempDir() + name;
  kiln::data::mnist_raw raw{10000, 28, 28, {}, {}};
  std::uint32_t state = seed;
  auto next = [&] { return state = state * 1664525u + 1013904223u; };
  for (std::int64_t i = 0; i < raw.count; ++i) {
    const int k = static_cast<int>(next() >> 16) % 10;
    raw.labels.push_back(static_cast<std::uint8_t>(k));
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x)
        raw.pixels.push_back(y >= 2 * k && y < 2 * k + 4 ? 200 + (next() >> 28)
                                                         : static_cast<std::uint8_t>(next() >> 27));
  }
  std::filesystem::create_directories(dir);
  kiln::data::write_mnist_idx(dir, raw);
  return dir;
}
