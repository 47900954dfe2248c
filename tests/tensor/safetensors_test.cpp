// safetensors round trips on every device ("tensor/Safetensors...", so `ctest -R tensor`), and a
// file built byte by byte from the format's specification.
#include <cstring>
#include <kiln/tensor/safetensors.hpp>

#include "data/data_fixture.hpp"
#include "tensor/tensor_fixture.hpp"

namespace {

using data_test::read_bytes;
using data_test::temp_dir;
using data_test::write_bytes;
using kiln::shape_t;
using kiln::tensor;

class Safetensors : public tensor_test::TensorTest {};

TEST_P(Safetensors, RoundTripsEveryDtypeShapeAndMetadata) {
  temp_dir dir;
  const std::vector<std::pair<std::string, tensor>> saved = {
      {"f32", tensor::from(dev(), std::vector<float>{1.5f, -2, 3, 4, 5, 6}, {2, 3})},
      {"f64", tensor::from(dev(), std::vector<double>{0.1, -1e300}, {2})},
      {"i64", tensor::from(dev(), std::vector<std::int64_t>{-1, INT64_MAX, 3, 4}, {2, 1, 2})},
      {"i32", tensor::from(dev(), std::vector<std::int32_t>{7}, {1})},
      {"u8", tensor::from(dev(), std::vector<std::uint8_t>{0, 255, 7}, {3})},
      {"bool", tensor::from(dev(), std::vector<bool>{true, false, true}, {3})},
      {"scalar", tensor::from(dev(), std::vector<float>{42}, {})},
      {"empty", tensor::zeros(dev(), {0, 4}, kiln::scalar_type::f64)},
      {"u16", tensor::from(dev(), std::vector<std::uint16_t>{65535, 1}, {2})}};
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"epoch", "3"}};
  kiln::save_safetensors(dir.file("m.safetensors"), saved, meta);

  // The header is padded so the data starts 8-byte aligned.
  const std::vector<char> bytes = read_bytes(dir.file("m.safetensors"));
  std::uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  const kiln::safetensors_file f = kiln::load_safetensors(dir.file("m.safetensors"), dev());
  EXPECT_EQ(f.metadata, meta);
  ASSERT_EQ(f.tensors.size(), saved.size());
  for (std::size_t i = 0; i < saved.size(); ++i) {
    SCOPED_TRACE(saved[i].first);
    const tensor& a = saved[i].second;
    const tensor& b = f.tensors[i].second;
    EXPECT_EQ(f.tensors[i].first, saved[i].first);  // saved order is kept
    EXPECT_EQ(b.get_device(), dev());
    EXPECT_EQ(b.dtype(), a.dtype());
    EXPECT_EQ(b.shape(), a.shape());
    EXPECT_TRUE((a == b).to(kiln::scalar_type::i64).sum().item<std::int64_t>() == a.numel());
  }
  EXPECT_EQ(f.at("f64").to_vector<double>(), (std::vector<double>{0.1, -1e300}));
  EXPECT_EQ(f.at("bool").to_vector<bool>(), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.at("scalar").dim(), 0);
  EXPECT_TRUE(f.contains("empty"));
  EXPECT_FALSE(f.contains("nope"));
  EXPECT_THROW(f.at("nope"), kiln::not_found);
}

TEST_P(Safetensors, WritesViewsAndLazyTensorsContiguous) {
  temp_dir dir;
  const tensor base = tensor::arange(dev(), 0, 12, 1, kiln::scalar_type::f32).reshape({3, 4});
  const tensor t = base.t();                // [4, 3], strided
  const tensor s = base.slice(1, 1, 4, 2);  // [3, 2], strided with an offset
  const tensor lazy = base * 2.f + 1.f;     // unevaluated
  kiln::save_safetensors(dir.file("v.safetensors"), {{"t", t}, {"s", s}, {"lazy", lazy}});
  const auto f = kiln::load_safetensors(dir.file("v.safetensors"), dev());
  EXPECT_EQ(f.at("t").shape(), (shape_t{4, 3}));
  EXPECT_EQ(f.at("t").to_vector<float>(), t.contiguous().to_vector<float>());
  EXPECT_EQ(f.at("s").to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11}));
  EXPECT_EQ(f.at("lazy").to_vector<float>(), lazy.to_vector<float>());
  EXPECT_TRUE(f.metadata.empty());
}

TEST_P(Safetensors, ReadsAHandBuiltFile) {
  // Per the specification: u64 LE header size, JSON, data at offsets after the header.
  const std::string json = R"({"b":{"dtype":"I64","shape":[],"data_offsets":[8,16]},)"
                           R"("__metadata__":{"who":"hand"},)"
                           R"("a":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})";
  std::string header = json;
  header.append((8 - header.size() % 8) % 8, ' ');
  std::vector<char> file(8);
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<char>(n >> (8 * i));
  file.insert(file.end(), header.begin(), header.end());
  const unsigned char data[16] = {0x00, 0x00, 0x80, 0x3f,                           // 1.0f
                                  0x00, 0x00, 0x00, 0xc0,                           // -2.0f
                                  0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};  // -2
  file.insert(file.end(), data, data + 16);
  temp_dir dir;
  write_bytes(dir.file("hand.safetensors"), file);

  const auto f = kiln::load_safetensors(dir.file("hand.safetensors"), dev());
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].first, "a");  // file order is data order
  EXPECT_EQ(f.at("a").shape(), (shape_t{1, 2}));
  EXPECT_EQ(f.at("a").to_vector<float>(), (std::vector<float>{1, -2}));
  EXPECT_EQ(f.at("b").item<std::int64_t>(), -2);
  EXPECT_EQ(f.metadata.at("who"), "hand");
}

KILN_INSTANTIATE_TENSOR_PER_DEVICE(Safetensors);

}  // namespace
