// Character-level text corpora for language models (docs/data.md): documents tokenised by
// byte, split train/validation by document with a seed, and random training windows.
//
//   kiln::data::char_corpus c = kiln::data::load_fortunes();   // Debian's fortunes package
//   auto [x, y] = c.batch(c.train, 64, 256, seed, dev);          // int64 [64, 256] each; y = x + 1
//   std::string s = c.decode(ids);
//
// The fortunes come from the Debian packages fortunes-min and fortunes (installed by
// scripts/quickstart.sh): /usr/share/games/fortunes/<file>, fortunes separated by lines "%".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "kiln/tensor.hpp"

namespace kiln::data {

struct char_corpus {
  std::string vocab;                // the distinct bytes, ascending: token id = position
  std::vector<std::int64_t> train;  // token ids, documents joined
  std::vector<std::int64_t> val;
  std::int64_t documents = 0;

  // documents: split by document (a seeded shuffle; val_fraction of them, at least one, go to
  // validation when there are two or more); kiln::invalid_argument for no text.
  static char_corpus from_documents(const std::vector<std::string>& documents,
                                    double val_fraction = 0.1, std::uint64_t seed = 0);
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(vocab.size()); }
  // Ids of text (kiln::invalid_argument naming a byte outside the vocabulary) and back.
  std::vector<std::int64_t> encode(const std::string& text) const;
  std::string decode(std::span<const std::int64_t> ids) const;
  // batch windows of length block at seeded random offsets of `split` (train or val): inputs
  // and the next-token targets, int64 [batch, block] on dev. kiln::invalid_argument when the
  // split is not longer than block.
  std::pair<tensor, tensor> batch(const std::vector<std::int64_t>& split, std::int64_t batch,
                                  std::int64_t block, std::uint64_t seed, const device& dev) const;
  // The cross-entropy of predicting every validation byte by its training frequency (nats):
  // the loss a model must beat to have learned more than letter counts.
  double unigram_loss() const;
};

std::string default_fortunes_dir();  // KILN_FORTUNES_DIR, else /usr/share/games/fortunes

// The fortunes under dir (every plain file: no .dat index, no .u8 link, no "off" directory),
// one document per fortune. kiln::not_found when dir holds none (install the fortunes package).
char_corpus load_fortunes(const std::string& dir = default_fortunes_dir(),
                          double val_fraction = 0.1, std::uint64_t seed = 0);

}  // namespace kiln::data
