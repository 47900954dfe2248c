// kiln::data::data_loader: mini-batches of a host dataset on a device, assembled ahead of time
// by a background thread.
//
//   kiln::data::data_loader loader(std::move(train), dev,
//                                  {.batch_size = 64, .shuffle = true, .seed = 1,
//                                   .sample_shape = {1, 28, 28}});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (kiln::data::batch& b : loader.epoch(epoch)) {
//       // b.x: f32 [B, 1, 28, 28] on dev, b.y: i64 [B]; B = 64 but the last may be smaller
//       train_step(b.x, b.y);
//     }
//
//   loader.start_epoch(3);                      // the same, pulled by hand
//   while (std::optional<kiln::data::batch> b = loader.next()) { ... }
//
// Order: epoch e visits every sample exactly once, in permutation(size(), seed + e) order
// (kiln/data/dataset.hpp) when shuffle is on, else 0, 1, 2, ...; the same seed and epoch give
// the same batches on every run and platform.
//
// Prefetch: a worker thread gathers the next batches' rows (by the epoch's order) into a ring of
// `prefetch` pinned host buffers (kiln::pinned_buffer, page-locked for the device's fast
// transfers) while the caller works on the current batch; next() uploads the oldest one on the
// caller's thread and hands its buffer back to the worker. Only the calling thread touches the
// device. Starting another epoch, or destroying the loader or the epoch range, mid-epoch stops
// and joins the worker. One loader serves one consumer thread at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/data/dataset.hpp"
#include "kiln/device.hpp"
#include "kiln/tensor.hpp"

namespace kiln::data {

struct loader_options {
  std::int64_t batch_size = 64;
  bool shuffle = true;
  std::uint64_t seed = 0;
  bool drop_last = false;  // skip a last batch smaller than batch_size
  // Shape of one sample in batch.x, e.g. {1, 28, 28}: x is [B, ...sample_shape]. Empty: {F}.
  // Its element count must be the dataset's features (else kiln::shape_error).
  shape_t sample_shape = {};
  int prefetch = 2;  // pinned buffers in the ring, 1..16: batches assembled ahead
};

struct batch {
  tensor x;                // f32 [B, ...sample_shape]
  tensor y;                // i64 [B]
  std::int64_t index = 0;  // of the batch within its epoch
};

class data_loader {
 public:
  // Takes the dataset (move it in to avoid a copy); kiln::invalid_argument for batch_size < 1,
  // prefetch outside 1..16 or an inconsistent dataset.
  data_loader(dataset data, const device& dev, loader_options opt = {});
  ~data_loader();
  data_loader(const data_loader&) = delete;
  data_loader& operator=(const data_loader&) = delete;

  const dataset& data() const noexcept { return data_; }
  const loader_options& options() const noexcept { return opt_; }
  const device& get_device() const noexcept { return dev_; }
  std::int64_t size() const noexcept { return data_.size(); }
  std::int64_t batches_per_epoch() const noexcept;
  // The sample order of epoch e (what the batches of epoch e hold, in turn).
  std::vector<std::int64_t> order(std::int64_t epoch) const;

  // Stops any epoch in progress and starts epoch e's worker.
  void start_epoch(std::int64_t epoch);
  // The next batch of the current epoch, or nullopt when it is over (or none was started).
  // Rethrows what the worker threw.
  std::optional<batch> next();
  // Stops the worker (joins it); next() then returns nullopt. Idempotent.
  void stop();

  class iterator;
  class epoch_range;
  // A range over epoch e's batches; begin() starts the epoch (once), destroying it stops it.
  epoch_range epoch(std::int64_t e);

 private:
  struct ready_batch {
    int slot;
    std::int64_t rows;
  };
  void work(std::vector<std::int64_t> order);

  dataset data_;
  device dev_;
  loader_options opt_;
  std::vector<pinned_buffer<float>> x_slots_;
  std::vector<pinned_buffer<std::int64_t>> y_slots_;

  std::mutex m_;
  std::condition_variable cv_;
  std::vector<int> free_;          // slots the worker may fill
  std::deque<ready_batch> ready_;  // filled slots, in batch order
  bool stop_ = false, done_ = true;
  std::exception_ptr error_;
  std::int64_t next_index_ = 0;
  std::uint64_t generation_ = 0;  // epochs started: an epoch_range stops only its own
  std::thread worker_;
};

class data_loader::iterator {
 public:
  using value_type = batch;
  using difference_type = std::ptrdiff_t;
  iterator() = default;
  batch& operator*() const { return *cur_; }
  batch* operator->() const { return &*cur_; }
  iterator& operator++() {
    cur_ = loader_->next();
    return *this;
  }
  void operator++(int) { ++*this; }
  bool operator==(std::default_sentinel_t) const { return !cur_; }

 private:
  friend class data_loader::epoch_range;
  data_loader* loader_ = nullptr;
  mutable std::optional<batch> cur_;  // the current batch; nullopt past the end
};

class data_loader::epoch_range {
 public:
  epoch_range(data_loader& l, std::int64_t e) : loader_(&l), epoch_(e) {}
  ~epoch_range() {
    if (started_ && loader_->generation_ == generation_) loader_->stop();
  }
  epoch_range(const epoch_range&) = delete;
  epoch_range& operator=(const epoch_range&) = delete;
  iterator begin() {
    if (!started_) {
      loader_->start_epoch(epoch_);
      generation_ = loader_->generation_;
      started_ = true;
    }
    iterator it;
    it.loader_ = loader_;
    it.cur_ = loader_->next();
    return it;
  }
  std::default_sentinel_t end() const { return {}; }

 private:
  data_loader* loader_;
  std::int64_t epoch_;
  std::uint64_t generation_ = 0;
  bool started_ = false;
};

inline data_loader::epoch_range data_loader::epoch(std::int64_t e) { return {*this, e}; }

}  // namespace kiln::data
