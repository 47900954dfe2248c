// MNIST IDX files: round trip, the loader's refusals, normalisation, and the real digits when
// scripts/fetch_mnist.sh has fetched them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <kiln/data/mnist.hpp>

#include "data/data_fixture.hpp"

namespace {

using namespace kiln::data;
using data_test::read_bytes;
using data_test::small_mnist;
using data_test::temp_dir;
using data_test::write_bytes;

TEST(MnistIdx, RoundTrip) {
  temp_dir dir;
  const mnist_raw r = small_mnist(13);
  write_mnist_idx(dir.str(), r);
  // Header: big-endian magic and dimensions.
  const std::vector<char> img = read_bytes(dir.file(mnist_images_file));
  ASSERT_EQ(img.size(), 16u + 13 * 784);
  EXPECT_EQ(std::vector<char>(img.begin(), img.begin() + 16),
            (std::vector<char>{0, 0, 8, 3, 0, 0, 0, 13, 0, 0, 0, 28, 0, 0, 0, 28}));
  const std::vector<char> lab = read_bytes(dir.file(mnist_labels_file));
  ASSERT_EQ(lab.size(), 8u + 13);
  EXPECT_EQ(std::vector<char>(lab.begin(), lab.begin() + 8),
            (std::vector<char>{0, 0, 8, 1, 0, 0, 0, 13}));

  const mnist_raw back = read_mnist_idx(dir.str());
  EXPECT_EQ(back.count, 13);
  EXPECT_EQ(back.rows, 28);
  EXPECT_EQ(back.cols, 28);
  EXPECT_EQ(back.pixels, r.pixels);
  EXPECT_EQ(back.labels, r.labels);
  EXPECT_TRUE(mnist_available(dir.str()));
}

TEST(MnistIdx, Normalisation) {
  temp_dir dir;
  mnist_raw r = small_mnist(2);
  r.pixels[0] = 0;
  r.pixels[1] = 255;
  r.pixels[2] = 51;
  write_mnist_idx(dir.str(), r);
  const dataset d = load_mnist(dir.str());
  ASSERT_EQ(d.size(), 2);
  ASSERT_EQ(d.features, 784);
  ASSERT_EQ(d.images.size(), 2u * 784);
  EXPECT_FLOAT_EQ(d.images[0], (0.f - 0.1307f) / 0.3081f);
  EXPECT_FLOAT_EQ(d.images[1], (1.f - 0.1307f) / 0.3081f);
  EXPECT_FLOAT_EQ(d.images[2], (0.2f - 0.1307f) / 0.3081f);
  EXPECT_EQ(d.labels, (std::vector<std::int64_t>{0, 1}));

  const dataset raw01 = load_mnist(dir.str(), {.normalize = false});
  EXPECT_FLOAT_EQ(raw01.images[0], 0.f);
  EXPECT_FLOAT_EQ(raw01.images[1], 1.f);
  EXPECT_FLOAT_EQ(raw01.images[2], 0.2f);
}

TEST(MnistIdx, MissingFile) {
  temp_dir dir;
  EXPECT_FALSE(mnist_available(dir.str()));
  EXPECT_THROW(read_mnist_idx(dir.str()), kiln::not_found);
  EXPECT_FALSE(mnist_available(dir.file("no/such/dir")));
}

// Writes a valid pair, lets `corrupt` change one file's bytes, and expects invalid_argument
// whose message contains `says`.
template <class F>
void expect_refused(const char* file, F corrupt, const std::string& says) {
  temp_dir dir;
  write_mnist_idx(dir.str(), small_mnist(4));
  std::vector<char> b = read_bytes(dir.file(file));
  corrupt(b);
  write_bytes(dir.file(file), b);
  try {
    read_mnist_idx(dir.str());
    ADD_FAILURE() << "no error; expected one saying \"" << says << "\"";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
}

TEST(MnistIdx, Refusals) {
  expect_refused(
      mnist_images_file, [](auto& b) { b[3] = 1; }, "bad magic number 0x00000801");
  expect_refused(
      mnist_labels_file, [](auto& b) { b[2] = 9; }, "bad magic");
  expect_refused(
      mnist_images_file, [](auto& b) { b.resize(b.size() - 1); }, "truncated");
  expect_refused(
      mnist_images_file, [](auto& b) { b.resize(10); }, "truncated");
  expect_refused(
      mnist_labels_file, [](auto& b) { b.push_back(0); }, "trailing bytes");
  expect_refused(
      mnist_images_file, [](auto& b) { b[7] = 100; }, "truncated");  // count 100
  expect_refused(
      mnist_labels_file, [](auto& b) { b.back() = 10; }, "not a digit");
  // Both files consistent on their own, but 3 labels for 4 images.
  expect_refused(
      mnist_labels_file,
      [](auto& b) {
        b[7] = 3;
        b.pop_back();
      },
      "3 labels for the 4 images");
}

TEST(MnistIdx, OnlyTwentyEightSquareImagesLoad) {
  temp_dir dir;
  mnist_raw r;
  r.count = 1;
  r.rows = 2;
  r.cols = 3;
  r.pixels.assign(6, 1);
  r.labels = {5};
  write_mnist_idx(dir.str(), r);
  EXPECT_EQ(read_mnist_idx(dir.str()).cols, 3);
  EXPECT_THROW(load_mnist(dir.str()), kiln::invalid_argument);
}

TEST(MnistIdx, DefaultDirHonoursEnvironment) {
  const char* old = std::getenv("KILN_MNIST_DIR");
  const std::string saved = old ? old : "";
  ::setenv("KILN_MNIST_DIR", "/some/where", 1);
  EXPECT_EQ(default_mnist_dir(), "/some/where");
  if (old)
    ::setenv("KILN_MNIST_DIR", saved.c_str(), 1);
  else
    ::unsetenv("KILN_MNIST_DIR");
  EXPECT_NE(default_mnist_dir().find("mnist"), std::string::npos);
}

// The real digits (scripts/fetch_mnist.sh): 10,000 images, about 1,000 of each digit.
TEST(MnistReal, TenThousandDigits) {
  const std::string dir = default_mnist_dir();
  if (!mnist_available(dir))
    GTEST_SKIP() << "MNIST not fetched (looked in " << dir << "): run scripts/fetch_mnist.sh";
  const mnist_raw r = read_mnist_idx(dir);
  ASSERT_EQ(r.count, 10000);
  std::vector<int> per_digit(10);
  for (auto l : r.labels) ++per_digit[l];
  for (int d = 0; d < 10; ++d) {
    EXPECT_GT(per_digit[d], 800) << "digit " << d;
    EXPECT_LT(per_digit[d], 1200) << "digit " << d;
  }
  EXPECT_EQ(*std::min_element(r.pixels.begin(), r.pixels.end()), 0);
  EXPECT_EQ(*std::max_element(r.pixels.begin(), r.pixels.end()), 255);
  // Mostly background, as MNIST is: the mean ink is about 0.13 of full scale.
  double mean = 0;
  for (auto p : r.pixels) mean += p / 255.0;
  mean /= static_cast<double>(r.pixels.size());
  EXPECT_NEAR(mean, 0.1307, 0.01);

  const dataset d = to_dataset(r);
  EXPECT_EQ(d.size(), 10000);
  const auto [lo, hi] = std::minmax_element(d.images.begin(), d.images.end());
  EXPECT_FLOAT_EQ(*lo, -0.1307f / 0.3081f);
  EXPECT_FLOAT_EQ(*hi, (1 - 0.1307f) / 0.3081f);
}

}  // namespace
