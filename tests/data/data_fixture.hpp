// Helpers of the kiln::data tests: a temporary directory per test and small generated datasets.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <kiln/data/mnist.hpp>
#include <random>
#include <string>
#include <vector>

namespace data_test {

// A fresh directory under the system temp dir, removed with the object.
class temp_dir {
 public:
  temp_dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("kiln_data_") + info->test_suite_name() + "_" + info->name();
    for (char& c : name)
      if (c == '/') c = '_';
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~temp_dir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// n 28x28 images; image i's pixels are (i * 7 + p) % 256 and its label i % 10.
inline kiln::data::mnist_raw small_mnist(std::int64_t n) {
  kiln::data::mnist_raw r;
  r.count = n;
  r.rows = r.cols = 28;
  for (std::int64_t i = 0; i < n; ++i) {
    for (int p = 0; p < 28 * 28; ++p)
      r.pixels.push_back(static_cast<std::uint8_t>((i * 7 + p) % 256));
    r.labels.push_back(static_cast<std::uint8_t>(i % 10));
  }
  return r;
}

// n samples of f features; sample i holds i * 1000 + j at feature j, label i.
inline kiln::data::dataset numbered(std::int64_t n, std::int64_t f) {
  kiln::data::dataset d;
  d.features = f;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < f; ++j) d.images.push_back(static_cast<float>(i * 1000 + j));
    d.labels.push_back(i);
  }
  return d;
}

inline std::vector<char> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<char>& b) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

}  // namespace data_test
