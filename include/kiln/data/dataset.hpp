// kiln::data::dataset: samples on the host (float features [N, F] row-major, int64 labels [N]),
// the unit that loaders (kiln/data/loader.hpp) batch and upload, plus seeded permutations and
// train/test splits.
//
//   kiln::data::dataset all = kiln::data::load_mnist(kiln::data::default_mnist_dir());
//   auto [train, test] = kiln::data::split(all, 8000, /*seed=*/1);   // 8000 and 2000 samples
//   std::vector<std::int64_t> p = kiln::data::permutation(10, 7);     // same on every platform
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/tensor.hpp"

namespace kiln::data {

struct dataset {
  std::vector<float> images;         // size() * features values, sample i at [i * features, ...)
  std::vector<std::int64_t> labels;  // size() values
  std::int64_t features = 0;

  std::int64_t size() const noexcept { return static_cast<std::int64_t>(labels.size()); }
  // The whole set as tensors on dev: images [N, F] f32, labels [N] i64.
  tensor images_tensor(const device& dev) const;
  tensor labels_tensor(const device& dev) const;
  // images and labels agree with features and each other (else kiln::invalid_argument).
  void check() const;
};

// A uniformly shuffled 0..n-1: Fisher-Yates driven by std::mt19937_64(seed), whose output the
// C++ standard fixes, so the order is the same with every compiler and standard library.
std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed);

// The samples of d at rows (in that order).
dataset select(const dataset& d, const std::vector<std::int64_t>& rows);

// Shuffles d with permutation(d.size(), seed) and cuts it: the first n_train samples are the
// training set, the rest the test set (disjoint; together all of d). n_train > d.size() is
// kiln::invalid_argument.
std::pair<dataset, dataset> split(const dataset& d, std::int64_t n_train, std::uint64_t seed);

}  // namespace kiln::data
