// MNIST digits from IDX files (the classic format), as written by scripts/fetch_mnist.sh:
// <dir>/images-idx3-ubyte and <dir>/labels-idx1-ubyte (docs/data.md).
//
//   const std::string dir = kiln::data::default_mnist_dir();
//   if (!kiln::data::mnist_available(dir)) { /* run scripts/fetch_mnist.sh */ }
//   kiln::data::dataset all = kiln::data::load_mnist(dir);        // [10000, 784] normalised
//   auto [train, test] = kiln::data::split(all, 8000, 1);
//
// Errors: a missing file is kiln::not_found; a bad magic number, a truncated file, trailing
// bytes, image and label counts that differ, images other than 28x28 (load_mnist) and labels
// above 9 are kiln::invalid_argument naming the file.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/data/dataset.hpp"

namespace kiln::data {

inline constexpr const char* mnist_images_file = "images-idx3-ubyte";
inline constexpr const char* mnist_labels_file = "labels-idx1-ubyte";
inline constexpr std::uint32_t idx_images_magic = 0x00000803;  // u8 data, 3 dimensions
inline constexpr std::uint32_t idx_labels_magic = 0x00000801;  // u8 data, 1 dimension
inline constexpr std::int64_t mnist_side = 28;

// The files' contents: count images of rows x cols u8 pixels (0 = background, 255 = ink),
// row-major, and count u8 labels.
struct mnist_raw {
  std::int64_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count * rows * cols
  std::vector<std::uint8_t> labels;  // count
};

struct mnist_options {
  // x / 255, then (x - mean) / std when normalize is set (PyTorch's MNIST recipe, whose
  // mean and std are the training set's); x / 255 alone (in [0, 1]) otherwise.
  bool normalize = true;
  float mean = 0.1307f;
  float std = 0.3081f;
};

// Reads and checks both files (magic, sizes, label range 0..9).
mnist_raw read_mnist_idx(const std::string& dir);
// Writes both IDX files (big-endian dimensions), replacing any that exist.
void write_mnist_idx(const std::string& dir, const mnist_raw& raw);

// Images as float [N, 784] (28x28 required), labels as int64 [N].
dataset load_mnist(const std::string& dir, const mnist_options& opt = {});
dataset to_dataset(const mnist_raw& raw, const mnist_options& opt = {});

// $KILN_MNIST_DIR when set; else the first data/mnist holding the images file in the current
// directory or one of its parents; else data/mnist beside the first parent that is a Kiln
// checkout (has include/kiln/kiln.hpp); else "data/mnist".
std::string default_mnist_dir();
// Both files exist in dir (nothing is read or checked; never throws).
bool mnist_available(const std::string& dir) noexcept;

}  // namespace kiln::data
