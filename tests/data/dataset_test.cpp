// Host datasets: permutations, selection and train/test splits.
#include <gtest/gtest.h>

#include <algorithm>
#include <kiln/data/dataset.hpp>
#include <set>

#include "data/data_fixture.hpp"

namespace {

using namespace kiln::data;

TEST(Dataset, PermutationIsSeededAndComplete) {
  const auto p = permutation(1000, 42);
  EXPECT_EQ(p, permutation(1000, 42));
  EXPECT_NE(p, permutation(1000, 43));
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (std::int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[static_cast<std::size_t>(i)], i);
  // Fixed by the standard's mt19937_64: the same on every platform.
  EXPECT_EQ(permutation(5, 1), permutation(5, 1));
  EXPECT_TRUE(permutation(0, 1).empty());
  EXPECT_EQ(permutation(1, 1), std::vector<std::int64_t>{0});
  EXPECT_THROW(permutation(-1, 1), kiln::invalid_argument);
}

TEST(Dataset, SplitIsDeterministicAndDisjoint) {
  const dataset d = data_test::numbered(100, 3);
  const auto [train, test] = split(d, 80, 7);
  EXPECT_EQ(train.size(), 80);
  EXPECT_EQ(test.size(), 20);
  EXPECT_EQ(train.features, 3);
  std::set<std::int64_t> seen;
  for (const dataset* part : {&train, &test})
    for (std::int64_t i = 0; i < part->size(); ++i) {
      const std::int64_t label = part->labels[static_cast<std::size_t>(i)];
      EXPECT_TRUE(seen.insert(label).second) << "sample " << label << " twice";
      // The features travel with their label.
      for (int j = 0; j < 3; ++j)
        EXPECT_EQ(part->images[static_cast<std::size_t>(i * 3 + j)],
                  static_cast<float>(label * 1000 + j));
    }
  EXPECT_EQ(seen.size(), 100u);

  const auto [train2, test2] = split(d, 80, 7);
  EXPECT_EQ(train2.labels, train.labels);
  EXPECT_EQ(test2.images, test.images);
  EXPECT_NE(split(d, 80, 8).first.labels, train.labels);

  EXPECT_EQ(split(d, 0, 1).second.size(), 100);
  EXPECT_THROW(split(d, 101, 1), kiln::invalid_argument);
  EXPECT_THROW(split(d, -1, 1), kiln::invalid_argument);
}

TEST(Dataset, ChecksConsistency) {
  dataset d = data_test::numbered(4, 2);
  d.images.pop_back();
  EXPECT_THROW(d.check(), kiln::invalid_argument);
  EXPECT_THROW(select(data_test::numbered(4, 2), {4}), kiln::invalid_argument);
}

}  // namespace
