// safetensors refusals: malformed files on load, bad arguments on save, and atomic saving.
#include <gtest/gtest.h>

#include <filesystem>
#include <kiln/tensor/safetensors.hpp>

#include "data/data_fixture.hpp"

namespace {

using data_test::read_bytes;
using data_test::temp_dir;
using data_test::write_bytes;
using kiln::tensor;

// 8-byte LE length, header (unpadded unless the caller pads it), data.
std::vector<char> file_of(const std::string& header, std::size_t data_bytes,
                          std::uint64_t claimed = UINT64_MAX) {
  const std::uint64_t n = claimed == UINT64_MAX ? header.size() : claimed;
  std::string f;  // a string, not vector inserts: GCC 12 warns falsely (-Warray-bounds) there
  for (int i = 0; i < 8; ++i) f += static_cast<char>(n >> (8 * i));
  f += header;
  f.append(data_bytes, '\1');
  return {f.begin(), f.end()};
}

template <class E>
void expect_load_error(const std::vector<char>& bytes, const std::string& says) {
  temp_dir dir;
  write_bytes(dir.file("x.safetensors"), bytes);
  try {
    kiln::load_safetensors(dir.file("x.safetensors"), kiln::device::host());
    ADD_FAILURE() << "loaded; expected an error saying \"" << says << "\"";
  } catch (const E& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  std::uint64_t b, std::uint64_t e) {
  return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape +
         ",\"data_offsets\":[" + std::to_string(b) + "," + std::to_string(e) + "]}";
}

TEST(SafetensorsErrors, Refusals) {
  using kiln::invalid_argument;
  const std::string ok = "{" + entry("a", "F32", "[2]", 0, 8) + "}";
  {  // the well-formed base loads
    temp_dir dir;
    write_bytes(dir.file("ok"), file_of(ok, 8));
    EXPECT_EQ(kiln::load_safetensors(dir.file("ok"), kiln::device::host()).at("a").numel(), 2);
  }
  expect_load_error<invalid_argument>({1, 0, 0}, "truncated");
  expect_load_error<invalid_argument>(file_of(ok, 8, 1000), "runs past the end");
  expect_load_error<invalid_argument>(file_of(ok, 7), "out of range");      // data truncated
  expect_load_error<invalid_argument>(file_of(ok, 9), "cover 8 of the 9");  // trailing data
  expect_load_error<invalid_argument>(file_of("{\"a\":", 0), "not valid JSON");
  expect_load_error<invalid_argument>(file_of("[1,2]", 0), "not a JSON object");
  expect_load_error<invalid_argument>(file_of("{" + entry("a", "F33", "[2]", 0, 8) + "}", 8),
                                      "unknown dtype \"F33\"");
  expect_load_error<kiln::unsupported>(file_of("{" + entry("a", "F8_E4M3", "[2]", 0, 2) + "}", 2),
                                       "F8_E4M3");
  expect_load_error<invalid_argument>(file_of("{" + entry("a", "F32", "[3]", 0, 8) + "}", 8),
                                      "needs 12 bytes");
  expect_load_error<invalid_argument>(file_of("{" + entry("a", "F32", "[-2]", 0, 8) + "}", 8),
                                      "not a non-negative integer");
  expect_load_error<invalid_argument>(file_of("{" + entry("a", "F32", "[2]", 8, 0) + "}", 8),
                                      "out of range");
  expect_load_error<invalid_argument>(
      file_of("{" + entry("a", "F32", "[2]", 0, 8) + "," + entry("b", "F32", "[2]", 4, 12) + "}",
              12),
      "overlapping");
  expect_load_error<invalid_argument>(
      file_of("{" + entry("a", "F32", "[1]", 0, 4) + "," + entry("b", "F32", "[1]", 8, 12) + "}",
              12),
      "hole");
  expect_load_error<invalid_argument>(file_of(R"({"a":{"dtype":"F32","shape":[2]}})", 8),
                                      "no \"data_offsets\"");
  expect_load_error<invalid_argument>(
      file_of(R"({"__metadata__":{"k":1},)" + entry("a", "F32", "[2]", 0, 8) + "}", 8),
      "is not a string");
}

TEST(SafetensorsErrors, BoolBytesMustBeZeroOrOne) {
  std::vector<char> f = file_of("{" + entry("a", "BOOL", "[2]", 0, 2) + "}", 2);
  temp_dir dir;
  write_bytes(dir.file("ok"), f);
  EXPECT_EQ(kiln::load_safetensors(dir.file("ok"), kiln::device::host()).at("a").to_vector<bool>(),
            (std::vector<bool>{true, true}));
  f.back() = 2;
  expect_load_error<kiln::invalid_argument>(f, "holds byte 2");
}

TEST(SafetensorsErrors, MissingFile) {
  temp_dir dir;
  EXPECT_THROW(kiln::load_safetensors(dir.file("none"), kiln::device::host()), kiln::not_found);
}

TEST(SafetensorsErrors, SaveRefusesBadArguments) {
  temp_dir dir;
  const kiln::device host = kiln::device::host();
  const tensor t = tensor::ones(host, {2});
  using kiln::invalid_argument;
  EXPECT_THROW(kiln::save_safetensors(dir.file("a"), {{"x", t}, {"x", t}}), invalid_argument);
  EXPECT_THROW(kiln::save_safetensors(dir.file("a"), {{"", t}}), invalid_argument);
  EXPECT_THROW(kiln::save_safetensors(dir.file("a"), {{"__metadata__", t}}), invalid_argument);
  EXPECT_THROW(kiln::save_safetensors(dir.file("a"), {{"x", tensor()}}), invalid_argument);
  EXPECT_FALSE(std::filesystem::exists(dir.file("a")));
  EXPECT_THROW(kiln::save_safetensors(dir.file("no/such/dir/a"), {{"x", t}}),
               kiln::backend_failure);
}

TEST(SafetensorsErrors, SavingReplacesAtomically) {
  temp_dir dir;
  const kiln::device host = kiln::device::host();
  const std::string path = dir.file("ckpt.safetensors");
  kiln::save_safetensors(path, {{"w", tensor::ones(host, {3})}});
  const std::vector<char> first = read_bytes(path);
  // A failed save (duplicate names) leaves the old file as it was, and no temporary behind.
  EXPECT_THROW(kiln::save_safetensors(
                   path, {{"w", tensor::zeros(host, {3})}, {"w", tensor::zeros(host, {3})}}),
               kiln::invalid_argument);
  EXPECT_EQ(read_bytes(path), first);
  kiln::save_safetensors(path, {{"w", tensor::zeros(host, {3})}});
  EXPECT_EQ(kiln::load_safetensors(path, host).at("w").to_vector<float>(),
            (std::vector<float>{0, 0, 0}));
  int entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.str())) ++entries;
  EXPECT_EQ(entries, 1);
}

}  // namespace
