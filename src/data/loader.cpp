// data_loader (kiln/data/loader.hpp). Hand-off protocol, all under m_: the worker takes a slot
// from free_, fills it without the lock (no one else touches a slot outside free_ and ready_),
// and appends it to ready_; next() pops ready_, uploads without the lock, and returns the slot
// to free_. stop_ wakes the worker out of its wait; done_ tells next() the epoch is over.
#include "kiln/data/loader.hpp"

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

namespace kiln::data {
namespace {

constexpr int max_prefetch = 16;

std::int64_t numel_of(const shape_t& s) {
  std::int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

}  // namespace

data_loader::data_loader(dataset data, const device& dev, loader_options opt)
    : data_(std::move(data)), dev_(dev), opt_(std::move(opt)) {
  data_.check();
  if (opt_.batch_size < 1)
    throw invalid_argument("kiln::data::data_loader: batch_size " +
                           std::to_string(opt_.batch_size) + " (must be at least 1)");
  if (opt_.prefetch < 1 || opt_.prefetch > max_prefetch)
    throw invalid_argument("kiln::data::data_loader: prefetch " + std::to_string(opt_.prefetch) +
                           " (must be 1.." + std::to_string(max_prefetch) + ")");
  if (opt_.sample_shape.empty()) opt_.sample_shape = {data_.features};
  // Negative sizes can still multiply to the feature count ({-2, -3} for 6).
  if (numel_of(opt_.sample_shape) != data_.features ||
      std::any_of(opt_.sample_shape.begin(), opt_.sample_shape.end(),
                  [](std::int64_t d) { return d < 0; }))
    throw shape_error("kiln::data::data_loader: sample_shape " + to_string(opt_.sample_shape) +
                      " does not hold the dataset's " + std::to_string(data_.features) +
                      " features");
  const auto b = static_cast<std::size_t>(opt_.batch_size);
  const auto f = static_cast<std::size_t>(std::max<std::int64_t>(data_.features, 1));
  for (int i = 0; i < opt_.prefetch; ++i) {
    x_slots_.emplace_back(dev_, b * f);
    y_slots_.emplace_back(dev_, b);
  }
}

data_loader::~data_loader() { stop(); }

std::int64_t data_loader::batches_per_epoch() const noexcept {
  const std::int64_t n = size(), b = opt_.batch_size;
  return opt_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<std::int64_t> data_loader::order(std::int64_t epoch) const {
  if (opt_.shuffle) return permutation(size(), opt_.seed + static_cast<std::uint64_t>(epoch));
  std::vector<std::int64_t> o(static_cast<std::size_t>(size()));
  for (std::size_t i = 0; i < o.size(); ++i) o[i] = static_cast<std::int64_t>(i);
  return o;
}

void data_loader::start_epoch(std::int64_t epoch) {
  stop();
  std::vector<std::int64_t> o = order(epoch);
  {
    std::lock_guard lock(m_);
    free_.clear();
    for (int i = opt_.prefetch - 1; i >= 0; --i) free_.push_back(i);
    ready_.clear();
    stop_ = false;
    done_ = false;
    error_ = nullptr;
    next_index_ = 0;
  }
  ++generation_;
  worker_ = std::thread(&data_loader::work, this, std::move(o));
}

void data_loader::stop() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  std::lock_guard lock(m_);
  ready_.clear();
  done_ = true;
}

void data_loader::work(std::vector<std::int64_t> order) {
  const auto f = static_cast<std::size_t>(data_.features);
  const std::int64_t b = opt_.batch_size, batches = batches_per_epoch();
  try {
    for (std::int64_t k = 0; k < batches; ++k) {
      int slot;
      {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return stop_ || !free_.empty(); });
        if (stop_) break;
        slot = free_.back();
        free_.pop_back();
      }
      const std::int64_t first = k * b, rows = std::min(b, size() - first);
      float* x = x_slots_[static_cast<std::size_t>(slot)].data();
      std::int64_t* y = y_slots_[static_cast<std::size_t>(slot)].data();
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto src = static_cast<std::size_t>(order[static_cast<std::size_t>(first + r)]);
        if (f) std::memcpy(x + static_cast<std::size_t>(r) * f, &data_.images[src * f], f * 4);
        y[r] = data_.labels[src];
      }
      {
        std::lock_guard lock(m_);
        ready_.push_back({slot, rows});
      }
      cv_.notify_all();
    }
  } catch (...) {
    std::lock_guard lock(m_);
    error_ = std::current_exception();
  }
  {
    std::lock_guard lock(m_);
    done_ = true;
  }
  cv_.notify_all();
}

std::optional<batch> data_loader::next() {
  ready_batch rb{};
  {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return !ready_.empty() || done_; });
    if (ready_.empty()) {
      if (std::exception_ptr e = std::exchange(error_, nullptr)) std::rethrow_exception(e);
      return std::nullopt;
    }
    rb = ready_.front();
    ready_.pop_front();
  }
  // The slot goes back to the worker however the upload ends.
  struct give_back {
    data_loader* l;
    int slot;
    ~give_back() {
      {
        std::lock_guard lock(l->m_);
        l->free_.push_back(slot);
      }
      l->cv_.notify_all();
    }
  } guard{this, rb.slot};
  const auto slot = static_cast<std::size_t>(rb.slot);
  shape_t xs{rb.rows};
  xs.insert(xs.end(), opt_.sample_shape.begin(), opt_.sample_shape.end());
  const auto nx = static_cast<std::size_t>(rb.rows * data_.features);
  batch out;
  out.x = tensor::from(dev_, std::span<const float>(x_slots_[slot].data(), nx), xs);
  out.y = tensor::from(
      dev_, std::span<const std::int64_t>(y_slots_[slot].data(), static_cast<std::size_t>(rb.rows)),
      shape_t{rb.rows});
  out.index = next_index_++;
  return out;
}

}  // namespace kiln::data
