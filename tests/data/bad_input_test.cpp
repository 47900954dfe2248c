// Bad input at kiln::data's and kiln::nn's file entry points not covered by dataset_test,
// loader_test, mnist_test and the safetensors tests: datasets whose sizes overflow or disagree,
// negative rows, loader options out of range or with negative sample dimensions, a missing
// checkpoint. docs/testing.md ("Bad input, by entry point") lists what is covered where.
#include "bad_input.hpp"

#include <gtest/gtest.h>

#include <kiln/data/loader.hpp>
#include <kiln/nn.hpp>
#include <kiln/nn/checkpoint.hpp>

#include "conformance/backends.hpp"
#include "data/data_fixture.hpp"

namespace {

using bad_input::throws;
using namespace kiln::data;

// features * size() wrapping to images.size() must not pass as consistent.
TEST(DataBadInput, DatasetSizesThatOverflowOrDisagree) {
  dataset wraps;
  wraps.labels.resize(4);
  wraps.features = std::int64_t(1) << 62;  // 4 * 2^62 = 2^64: 0 when wrapped
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { wraps.check(); }, {"kiln::data::dataset"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)select(wraps, {0}); }, {"kiln::data::dataset"}));
  dataset negative = data_test::numbered(2, 3);
  negative.features = -3;
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { negative.check(); }, {"-3 features"}));
  dataset fewer_labels = data_test::numbered(3, 2);
  fewer_labels.labels.pop_back();
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { (void)fewer_labels.images_tensor(kiln::device::host()); }, {"kiln::data::dataset"}));
}

TEST(DataBadInput, RowsOutsideTheDataset) {
  const dataset d = data_test::numbered(4, 2);
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] {
        (void)select(d, {0, -1});
      },
      {"row -1", "dataset of 4"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)select(d, {INT64_MAX}); },
                                             {"row 9223372036854775807"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)split(d, INT64_MAX, 1); }, {"split"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)permutation(INT64_MIN, 1); }, {"permutation"}));
}

class DataBadInputTest : public conformance::DeviceTest {};
INSTANTIATE_TEST_SUITE_P(data, DataBadInputTest, ::testing::ValuesIn(::conformance::device_ids()),
                         ::conformance::device_param_name);

TEST_P(DataBadInputTest, LoaderOptionsOutOfRange) {
  auto refused = [&](loader_options o, std::initializer_list<std::string> parts) {
    return throws<kiln::invalid_argument>(
        [&] { data_loader l(data_test::numbered(4, 6), dev(), o); }, parts);
  };
  EXPECT_TRUE(refused({.batch_size = -1}, {"batch_size -1"}));
  EXPECT_TRUE(refused({.batch_size = INT64_MIN}, {"batch_size"}));
  EXPECT_TRUE(refused({.prefetch = -1}, {"prefetch -1", "1..16"}));
  EXPECT_TRUE(refused({.prefetch = 17}, {"prefetch 17"}));
  // Negative dimensions whose product is the feature count are still not a shape.
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] {
        data_loader l(data_test::numbered(4, 6), dev(), {.sample_shape = {-2, -3}});
      },
      {"sample_shape", "[-2, -3]"}));
  EXPECT_TRUE(throws<kiln::shape_error>(
      [&] { data_loader l(data_test::numbered(4, 6), dev(), {.sample_shape = {0}}); },
      {"sample_shape"}));
}

TEST_P(DataBadInputTest, LoaderOfAnInconsistentDataset) {
  dataset d = data_test::numbered(4, 2);
  d.images.pop_back();
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { data_loader l(d, dev()); }, {"kiln::data::dataset"}));
}

TEST(NnBadInput, CheckpointFileMissing) {
  kiln::nn::linear model(kiln::device::host(), 2, 2);
  EXPECT_TRUE(throws<kiln::not_found>(
      [&] { kiln::nn::load_checkpoint("/nonexistent/kiln/model.safetensors", model); },
      {"/nonexistent/kiln/model.safetensors"}));
}

}  // namespace
