// Host datasets: permutations, selection and splits (kiln/data/dataset.hpp).
#include "kiln/data/dataset.hpp"

#include <algorithm>
#include <random>
#include <string>

namespace kiln::data {

void dataset::check() const {
  std::uint64_t values = 0;  // features * labels, which must not wrap to images.size()
  if (features < 0 ||
      __builtin_mul_overflow(static_cast<std::uint64_t>(features), labels.size(), &values) ||
      values != images.size())
    throw invalid_argument("kiln::data::dataset: " + std::to_string(images.size()) +
                           " image values for " + std::to_string(labels.size()) + " labels of " +
                           std::to_string(features) + " features each");
}

tensor dataset::images_tensor(const device& dev) const {
  check();
  return tensor::from(dev, images, {size(), features});
}

tensor dataset::labels_tensor(const device& dev) const { return tensor::from(dev, labels); }

std::vector<std::int64_t> permutation(std::int64_t n, std::uint64_t seed) {
  if (n < 0) throw invalid_argument("kiln::data::permutation: n = " + std::to_string(n));
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) p[static_cast<std::size_t>(i)] = i;
  // Not std::shuffle / uniform_int_distribution: their algorithms differ between libraries.
  // The modulo's bias is below n / 2^64.
  std::mt19937_64 rng(seed);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(i + 1));
    std::swap(p[static_cast<std::size_t>(i)], p[static_cast<std::size_t>(j)]);
  }
  return p;
}

dataset select(const dataset& d, const std::vector<std::int64_t>& rows) {
  d.check();
  dataset out;
  out.features = d.features;
  out.images.resize(rows.size() * static_cast<std::size_t>(d.features));
  out.labels.resize(rows.size());
  const auto f = static_cast<std::size_t>(d.features);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const std::int64_t r = rows[i];
    if (r < 0 || r >= d.size())
      throw invalid_argument("kiln::data::select: row " + std::to_string(r) + " of a dataset of " +
                             std::to_string(d.size()));
    std::copy_n(d.images.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(r) * f), f,
                out.images.begin() + static_cast<std::ptrdiff_t>(i * f));
    out.labels[i] = d.labels[static_cast<std::size_t>(r)];
  }
  return out;
}

std::pair<dataset, dataset> split(const dataset& d, std::int64_t n_train, std::uint64_t seed) {
  if (n_train < 0 || n_train > d.size())
    throw invalid_argument("kiln::data::split: " + std::to_string(n_train) +
                           " training samples out of " + std::to_string(d.size()));
  const std::vector<std::int64_t> p = permutation(d.size(), seed);
  const auto cut = p.begin() + static_cast<std::ptrdiff_t>(n_train);
  return {select(d, {p.begin(), cut}), select(d, {cut, p.end()})};
}

}  // namespace kiln::data
