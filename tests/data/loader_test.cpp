// data_loader on every device. The suite is "ConcurrentLoader" so that the ThreadSanitizer stage
// (`ctest -R Concurrent`) runs it: every test here crosses the prefetch thread.
#include <gtest/gtest.h>

#include <kiln/data/loader.hpp>
#include <set>

#include "conformance/backends.hpp"
#include "data/data_fixture.hpp"

namespace {

using namespace kiln::data;
using data_test::numbered;

class ConcurrentLoader : public conformance::DeviceTest {
 protected:
  // Checks batch b against the numbered dataset (row of label l holds l * 1000 + j) and
  // returns its labels.
  std::vector<std::int64_t> check_batch(const batch& b, std::int64_t rows, std::int64_t f) {
    EXPECT_EQ(b.x.get_device(), dev());
    EXPECT_EQ(b.x.dtype(), kiln::scalar_type::f32);
    EXPECT_EQ(b.y.dtype(), kiln::scalar_type::i64);
    EXPECT_EQ(b.y.shape(), kiln::shape_t{rows});
    EXPECT_EQ(b.x.size(0), rows);
    const auto x = b.x.to_vector<float>();
    const auto y = b.y.to_vector<std::int64_t>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < f; ++j)
        EXPECT_EQ(x[static_cast<std::size_t>(r * f + j)],
                  static_cast<float>(y[static_cast<std::size_t>(r)] * 1000 + j))
            << "row " << r << " feature " << j;
    return y;
  }
};

TEST_P(ConcurrentLoader, EverySampleOncePerEpoch) {
  data_loader loader(numbered(103, 5), dev(), {.batch_size = 10, .seed = 3});
  EXPECT_EQ(loader.batches_per_epoch(), 11);
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    std::vector<std::int64_t> seen;
    std::int64_t count = 0;
    for (batch& b : loader.epoch(epoch)) {
      EXPECT_EQ(b.index, count);
      const std::int64_t rows = count < 10 ? 10 : 3;  // the last batch holds the rest
      EXPECT_EQ(b.x.shape(), (kiln::shape_t{rows, 5}));
      for (auto l : check_batch(b, rows, 5)) seen.push_back(l);
      ++count;
    }
    EXPECT_EQ(count, 11);
    EXPECT_EQ(seen, loader.order(epoch));  // in the documented order
    std::set<std::int64_t> unique(seen.begin(), seen.end());
    EXPECT_EQ(unique.size(), 103u);
    EXPECT_EQ(*unique.rbegin(), 102);
  }
}

TEST_P(ConcurrentLoader, DropLastAndSampleShape) {
  data_loader loader(numbered(25, 12), dev(),
                     {.batch_size = 4, .drop_last = true, .sample_shape = {1, 3, 4}});
  EXPECT_EQ(loader.batches_per_epoch(), 6);
  loader.start_epoch(0);
  int count = 0;
  while (auto b = loader.next()) {
    EXPECT_EQ(b->x.shape(), (kiln::shape_t{4, 1, 3, 4}));
    check_batch(*b, 4, 12);
    ++count;
  }
  EXPECT_EQ(count, 6);
  EXPECT_FALSE(loader.next());  // stays over

  EXPECT_THROW(data_loader(numbered(4, 12), dev(), {.sample_shape = {5, 2}}), kiln::shape_error);
  EXPECT_THROW(data_loader(numbered(4, 12), dev(), {.batch_size = 0}), kiln::invalid_argument);
  EXPECT_THROW(data_loader(numbered(4, 12), dev(), {.prefetch = 0}), kiln::invalid_argument);
}

TEST_P(ConcurrentLoader, SeedsAndEpochsFixTheOrder) {
  const loader_options opt{.batch_size = 7, .seed = 11};
  data_loader a(numbered(50, 1), dev(), opt), b(numbered(50, 1), dev(), opt);
  auto labels = [](data_loader& l, std::int64_t e) {
    std::vector<std::int64_t> out;
    for (batch& x : l.epoch(e))
      for (auto v : x.y.to_vector<std::int64_t>()) out.push_back(v);
    return out;
  };
  const auto a0 = labels(a, 0);
  EXPECT_EQ(a0, labels(b, 0));
  EXPECT_NE(a0, labels(a, 1));
  EXPECT_EQ(a0, labels(a, 0));  // an epoch replays
  EXPECT_EQ(a0, permutation(50, 11));

  data_loader plain(numbered(9, 1), dev(), {.batch_size = 4, .shuffle = false});
  EXPECT_EQ(labels(plain, 5), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8}));
}

TEST_P(ConcurrentLoader, StopsEarlyWithoutDeadlock) {
  // Big enough batches that the worker is busy gathering when the consumer leaves.
  const dataset d = numbered(512, 784);
  for (int round = 0; round < 4; ++round) {
    data_loader loader(d, dev(), {.batch_size = 128, .seed = 1, .prefetch = 2});
    for (batch& b : loader.epoch(0)) {
      EXPECT_EQ(b.x.shape(), (kiln::shape_t{128, 784}));
      break;  // the range's destructor stops the worker mid-epoch
    }
    loader.start_epoch(1);  // never consumed: restarted, then destroyed while it fills the ring
    loader.start_epoch(2);
    if (round % 2) {
      auto b = loader.next();
      ASSERT_TRUE(b);
      EXPECT_EQ(b->y.to_vector<std::int64_t>()[0], loader.order(2)[0]);
    }
  }  // ~data_loader joins a worker waiting for a free slot
}

TEST_P(ConcurrentLoader, AnOldRangeDoesNotStopANewerEpoch) {
  data_loader loader(numbered(20, 2), dev(), {.batch_size = 3});
  std::optional<data_loader::epoch_range> old;
  old.emplace(loader, 0);
  EXPECT_FALSE(old->begin() == std::default_sentinel);
  int count = 0;
  for ([[maybe_unused]] batch& b : loader.epoch(1))
    if (count++ == 0) old.reset();  // epoch 0's range goes; epoch 1 carries on
  EXPECT_EQ(count, 7);
}

TEST_P(ConcurrentLoader, EmptyAndUnstarted) {
  data_loader loader(numbered(0, 3), dev(), {.batch_size = 2});
  EXPECT_FALSE(loader.next());  // no epoch started
  EXPECT_EQ(loader.batches_per_epoch(), 0);
  int count = 0;
  for (batch& b : loader.epoch(0)) count += static_cast<int>(b.x.numel());
  EXPECT_EQ(count, 0);
  loader.stop();
  loader.stop();
}

INSTANTIATE_TEST_SUITE_P(data, ConcurrentLoader, ::testing::ValuesIn(::conformance::device_ids()),
                         ::conformance::device_param_name);

}  // namespace
