// Character-level corpora (kiln/data/text.hpp).
#include "kiln/data/text.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "kiln/data/dataset.hpp"
#include "kiln/error.hpp"

namespace kiln::data {

char_corpus char_corpus::from_documents(const std::vector<std::string>& documents,
                                        double val_fraction, std::uint64_t seed) {
  if (!(val_fraction >= 0 && val_fraction < 1))
    throw invalid_argument("kiln::data::char_corpus: val_fraction must be in [0, 1)");
  std::array<bool, 256> seen{};
  std::size_t bytes = 0;
  for (const std::string& d : documents) {
    for (unsigned char ch : d) seen[ch] = true;
    bytes += d.size();
  }
  if (bytes == 0) throw invalid_argument("kiln::data::char_corpus: the documents hold no text");
  char_corpus c;
  for (int b = 0; b < 256; ++b)
    if (seen[std::size_t(b)]) c.vocab.push_back(static_cast<char>(b));
  c.documents = static_cast<std::int64_t>(documents.size());
  const std::vector<std::int64_t> order = permutation(c.documents, seed);
  std::int64_t n_val = std::int64_t(std::llround(val_fraction * double(c.documents)));
  if (val_fraction > 0 && c.documents >= 2)
    n_val = std::clamp<std::int64_t>(n_val, 1, c.documents - 1);
  for (std::int64_t k = 0; k < c.documents; ++k) {
    const std::vector<std::int64_t> ids = c.encode(documents[std::size_t(order[std::size_t(k)])]);
    auto& out = k < n_val ? c.val : c.train;
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return c;
}

std::vector<std::int64_t> char_corpus::encode(const std::string& text) const {
  std::array<std::int64_t, 256> id;
  id.fill(-1);
  for (std::size_t k = 0; k < vocab.size(); ++k)
    id[static_cast<unsigned char>(vocab[k])] = std::int64_t(k);
  std::vector<std::int64_t> out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    if (id[ch] < 0)
      throw invalid_argument("kiln::data::char_corpus::encode: byte " + std::to_string(int(ch)) +
                             " is not in the vocabulary");
    out.push_back(id[ch]);
  }
  return out;
}

std::string char_corpus::decode(std::span<const std::int64_t> ids) const {
  std::string s;
  s.reserve(ids.size());
  for (std::int64_t i : ids) {
    if (i < 0 || i >= vocab_size())
      throw invalid_argument("kiln::data::char_corpus::decode: id " + std::to_string(i) +
                             " is outside the vocabulary of " + std::to_string(vocab_size()));
    s.push_back(vocab[std::size_t(i)]);
  }
  return s;
}

std::pair<tensor, tensor> char_corpus::batch(const std::vector<std::int64_t>& split,
                                             std::int64_t batch, std::int64_t block,
                                             std::uint64_t seed, const device& dev) const {
  if (batch <= 0 || block <= 0)
    throw invalid_argument("kiln::data::char_corpus::batch: batch and block must be positive");
  const auto n = static_cast<std::int64_t>(split.size());
  if (n <= block)
    throw invalid_argument("kiln::data::char_corpus::batch: the split has " + std::to_string(n) +
                           " tokens, not more than the window of " + std::to_string(block));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int64_t> start(0, n - block - 1);
  std::vector<std::int64_t> x(std::size_t(batch * block)), y(x.size());
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t s = start(rng);
    std::copy_n(split.begin() + s, block, x.begin() + b * block);
    std::copy_n(split.begin() + s + 1, block, y.begin() + b * block);
  }
  return {tensor::from(dev, x, {batch, block}), tensor::from(dev, y, {batch, block})};
}

double char_corpus::unigram_loss() const {
  std::vector<double> count(vocab.size(), 1.0);  // add-one: every byte has some probability
  for (std::int64_t i : train) count[std::size_t(i)] += 1;
  double total = 0;
  for (double c : count) total += c;
  const std::vector<std::int64_t>& eval = val.empty() ? train : val;
  double loss = 0;
  for (std::int64_t i : eval) loss -= std::log(count[std::size_t(i)] / total);
  return eval.empty() ? 0 : loss / double(eval.size());
}

std::string default_fortunes_dir() {
  const char* env = std::getenv("KILN_FORTUNES_DIR");
  return env && *env ? env : "/usr/share/games/fortunes";
}

char_corpus load_fortunes(const std::string& dir, double val_fraction, std::uint64_t seed) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    // Plain files only: the .dat indexes are binary, the .u8 names are links to the same text.
    if (!e.is_regular_file() || e.is_symlink() || e.path().extension() == ".dat") continue;
    files.push_back(e.path());
  }
  if (ec || files.empty())
    throw not_found("kiln::data::load_fortunes: no fortune files in " + dir +
                    " (install Debian's fortunes package: scripts/quickstart.sh does)");
  std::sort(files.begin(), files.end());  // a fixed order: the split is the same everywhere
  std::vector<std::string> docs;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string line, doc;
    while (std::getline(in, line)) {
      if (line == "%") {
        if (!doc.empty()) docs.push_back(std::move(doc));
        doc.clear();
      } else {
        doc += line;
        doc += '\n';
      }
    }
    if (!doc.empty()) docs.push_back(std::move(doc));
  }
  return char_corpus::from_documents(docs, val_fraction, seed);
}

}  // namespace kiln::data
