// Character corpora (kiln/data/text.hpp): vocabulary, encode/decode, the seeded split by
// document, training windows, the unigram baseline, and reading fortune files.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <kiln/data/text.hpp>

namespace {

using kiln::data::char_corpus;

const std::vector<std::string> docs = {"the cat sat\n", "a dog ran\n", "cats and dogs\n",
                                       "tea at ten\n",  "one two\n",   "zebra crossing\n"};

TEST(CharCorpus, VocabularyEncodeDecodeAndSplit) {
  const char_corpus c = char_corpus::from_documents(docs, 0.34, 3);
  EXPECT_EQ(c.vocab, std::string("\n abcdeghinorstwz"));
  EXPECT_EQ(c.documents, 6);
  const auto ids = c.encode("cat\n");
  EXPECT_EQ(ids, (std::vector<std::int64_t>{4, 2, 14, 0}));
  EXPECT_EQ(c.decode(ids), "cat\n");
  // Two of six documents (a fraction of 0.34) go to validation; every byte lands once.
  std::size_t total = 0;
  for (const auto& d : docs) total += d.size();
  EXPECT_EQ(c.train.size() + c.val.size(), total);
  EXPECT_GT(c.val.size(), 0u);
  const std::string val = c.decode(c.val);
  int whole = 0;
  for (const auto& d : docs) whole += val.find(d) != std::string::npos;
  EXPECT_EQ(whole, 2) << val;
  // Seeded: the same seed, the same split; another seed, (here) another.
  EXPECT_EQ(char_corpus::from_documents(docs, 0.34, 3).val, c.val);
  EXPECT_NE(char_corpus::from_documents(docs, 0.34, 4).val, c.val);
  EXPECT_THROW(c.encode("CAT"), kiln::invalid_argument);
  EXPECT_THROW(c.decode(std::vector<std::int64_t>{99}), kiln::invalid_argument);
  EXPECT_THROW(char_corpus::from_documents({"", ""}), kiln::invalid_argument);
  EXPECT_THROW(char_corpus::from_documents(docs, 1.0), kiln::invalid_argument);
}

TEST(CharCorpus, BatchesAreNextTokenWindowsOfTheSplit) {
  const char_corpus c = char_corpus::from_documents(docs, 0.2, 1);
  const kiln::device host = kiln::device::host();
  auto [x, y] = c.batch(c.train, 3, 5, 9, host);
  EXPECT_EQ(x.shape(), (kiln::shape_t{3, 5}));
  EXPECT_EQ(x.dtype(), kiln::scalar_type::i64);
  const auto xs = x.to_vector<std::int64_t>(), ys = y.to_vector<std::int64_t>();
  const std::string train = c.decode(c.train);
  for (int b = 0; b < 3; ++b) {
    const std::string wx = c.decode(std::span(xs).subspan(std::size_t(b * 5), 5));
    const std::string wy = c.decode(std::span(ys).subspan(std::size_t(b * 5), 5));
    const auto at = train.find(wx + wy.back());
    ASSERT_NE(at, std::string::npos) << wx;
    EXPECT_EQ(wx.substr(1), wy.substr(0, 4));  // targets: the inputs moved by one
  }
  auto [x2, y2] = c.batch(c.train, 3, 5, 9, host);
  EXPECT_EQ(x2.to_vector<std::int64_t>(), xs);  // seeded
  EXPECT_THROW(c.batch(c.train, 1, std::int64_t(c.train.size()), 1, host), kiln::invalid_argument);
  EXPECT_THROW(c.batch(c.train, 0, 4, 1, host), kiln::invalid_argument);
}

TEST(CharCorpus, UnigramLossIsTheCrossEntropyOfByteFrequencies) {
  const char_corpus c = char_corpus::from_documents({"aaab", "aab"}, 0.5, 0);
  // Train is one document; add-one smoothing over the vocabulary {a, b}.
  const std::string train = c.decode(c.train), val = c.decode(c.val);
  double na = 1, nb = 1;
  for (char ch : train) (ch == 'a' ? na : nb) += 1;
  double want = 0;
  for (char ch : val) want -= std::log((ch == 'a' ? na : nb) / (na + nb));
  EXPECT_NEAR(c.unigram_loss(), want / double(val.size()), 1e-12);
}

TEST(CharCorpus, FortuneFilesAreSplitAtPercentLines) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kiln_fortunes_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "wisdom") << "Look before\nyou leap.\n%\nHaste makes waste.\n%\n";
  std::ofstream(dir / "more") << "A stitch in time.\n";
  std::ofstream(dir / "wisdom.dat") << std::string("\x02\x00\x01", 3);  // an index: skipped
  fs::create_symlink(dir / "wisdom", dir / "wisdom.u8");                // a link: skipped
  const char_corpus c = kiln::data::load_fortunes(dir.string(), 0.0, 0);
  EXPECT_EQ(c.documents, 3);
  const std::string all = c.decode(c.train);
  EXPECT_NE(all.find("Look before\nyou leap.\n"), std::string::npos);
  EXPECT_EQ(all.find('%'), std::string::npos);
  EXPECT_EQ(all.size(),
            std::string("Look before\nyou leap.\nHaste makes waste.\nA stitch in time.\n").size());
  fs::remove_all(dir);
  EXPECT_THROW(kiln::data::load_fortunes(dir.string()), kiln::not_found);
}

}  // namespace
