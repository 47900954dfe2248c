// MNIST IDX files (kiln/data/mnist.hpp): the header is a big-endian u32 magic then one
// big-endian u32 per dimension, then the u8 data, nothing after it.
#include "kiln/data/mnist.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void bad(const std::string& path, const std::string& why) {
  throw invalid_argument("kiln::data: " + path + ": " + why);
}

// Reads the IDX file at path: the dimensions (as many as the magic's low byte says) and data.
std::vector<std::uint8_t> read_idx(const std::string& path, std::uint32_t magic,
                                   std::vector<std::uint32_t>& dims) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw not_found("kiln::data: cannot open " + path + ": " + std::strerror(errno) +
                    " (scripts/fetch_mnist.sh fetches MNIST)");
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  const std::uint64_t rank = magic & 0xff, header = 4 * (1 + rank);
  if (size < header)
    bad(path, "truncated: " + std::to_string(size) + " bytes, the header alone is " +
                  std::to_string(header));
  std::vector<unsigned char> h(header);
  in.read(reinterpret_cast<char*>(h.data()), static_cast<std::streamsize>(header));
  auto be32 = [&](std::size_t at) {
    return std::uint32_t{h[at]} << 24 | std::uint32_t{h[at + 1]} << 16 |
           std::uint32_t{h[at + 2]} << 8 | std::uint32_t{h[at + 3]};
  };
  if (be32(0) != magic) {
    char got[16], want[16];
    std::snprintf(got, sizeof got, "0x%08x", be32(0));
    std::snprintf(want, sizeof want, "0x%08x", magic);
    bad(path, std::string("bad magic number ") + got + ", expected " + want);
  }
  dims.clear();
  std::uint64_t n = 1;
  for (std::uint64_t d = 0; d < rank; ++d) {
    dims.push_back(be32(4 * (1 + d)));
    if (dims.back() != 0 && n > size / dims.back()) {  // more than the file holds: no overflow
      n = size + 1;
      break;
    }
    n *= dims.back();
  }
  if (size - header != n)
    bad(path, (size - header < n ? "truncated: " : "trailing bytes: ") + std::string("holds ") +
                  std::to_string(size - header) + " data bytes, its dimensions need " +
                  std::to_string(n));
  std::vector<std::uint8_t> data(n);
  in.read(reinterpret_cast<char*>(data.data()), static_cast<std::streamsize>(n));
  if (!in) bad(path, "read failed");
  return data;
}

void write_idx(const std::string& path, std::uint32_t magic, const std::vector<std::uint32_t>& dims,
               const std::vector<std::uint8_t>& data) {
  std::vector<unsigned char> h;
  auto put = [&](std::uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) h.push_back(static_cast<unsigned char>(v >> s));
  };
  put(magic);
  for (auto d : dims) put(d);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(h.data()), static_cast<std::streamsize>(h.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
  out.close();
  if (!out) throw backend_failure("kiln::data: cannot write " + path + ": " + std::strerror(errno));
}

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

}  // namespace

mnist_raw read_mnist_idx(const std::string& dir) {
  const std::string ipath = (fs::path(dir) / mnist_images_file).string();
  const std::string lpath = (fs::path(dir) / mnist_labels_file).string();
  mnist_raw r;
  std::vector<std::uint32_t> idims, ldims;
  r.pixels = read_idx(ipath, idx_images_magic, idims);
  r.labels = read_idx(lpath, idx_labels_magic, ldims);
  if (idims[0] != ldims[0])
    bad(lpath, std::to_string(ldims[0]) + " labels for the " + std::to_string(idims[0]) +
                   " images of " + ipath);
  r.count = idims[0];
  r.rows = idims[1];
  r.cols = idims[2];
  for (std::size_t i = 0; i < r.labels.size(); ++i)
    if (r.labels[i] > 9)
      bad(lpath, "label " + std::to_string(r.labels[i]) + " of sample " + std::to_string(i) +
                     " is not a digit 0..9");
  return r;
}

void write_mnist_idx(const std::string& dir, const mnist_raw& raw) {
  if (raw.count < 0 || raw.rows < 0 || raw.cols < 0 ||
      raw.pixels.size() != static_cast<std::size_t>(raw.count * raw.rows * raw.cols) ||
      raw.labels.size() != static_cast<std::size_t>(raw.count))
    throw invalid_argument("kiln::data::write_mnist_idx: " + std::to_string(raw.pixels.size()) +
                           " pixels and " + std::to_string(raw.labels.size()) + " labels for " +
                           std::to_string(raw.count) + " images of " + std::to_string(raw.rows) +
                           "x" + std::to_string(raw.cols));
  const auto u32 = [](std::int64_t v) { return static_cast<std::uint32_t>(v); };
  write_idx((fs::path(dir) / mnist_images_file).string(), idx_images_magic,
            {u32(raw.count), u32(raw.rows), u32(raw.cols)}, raw.pixels);
  write_idx((fs::path(dir) / mnist_labels_file).string(), idx_labels_magic, {u32(raw.count)},
            raw.labels);
}

dataset to_dataset(const mnist_raw& raw, const mnist_options& opt) {
  if (raw.rows != mnist_side || raw.cols != mnist_side)
    throw invalid_argument("kiln::data: MNIST images are 28x28, these are " +
                           std::to_string(raw.rows) + "x" + std::to_string(raw.cols));
  if (opt.normalize && !(opt.std > 0))
    throw invalid_argument("kiln::data::mnist_options: std must be positive");
  dataset d;
  d.features = mnist_side * mnist_side;
  // One table for the 256 byte values: the same float for the same byte everywhere.
  float table[256];
  for (int v = 0; v < 256; ++v) {
    const float x = static_cast<float>(v) / 255.f;
    table[v] = opt.normalize ? (x - opt.mean) / opt.std : x;
  }
  d.images.resize(raw.pixels.size());
  for (std::size_t i = 0; i < raw.pixels.size(); ++i) d.images[i] = table[raw.pixels[i]];
  d.labels.assign(raw.labels.begin(), raw.labels.end());
  return d;
}

dataset load_mnist(const std::string& dir, const mnist_options& opt) {
  return to_dataset(read_mnist_idx(dir), opt);
}

std::string default_mnist_dir() {
  if (const char* e = std::getenv("KILN_MNIST_DIR"); e && *e) return e;
  std::error_code ec;
  const fs::path cwd = fs::current_path(ec);
  if (ec) return "data/mnist";
  for (fs::path p = cwd;; p = p.parent_path()) {
    if (is_file(p / "data" / "mnist" / mnist_images_file)) return (p / "data" / "mnist").string();
    if (p == p.parent_path()) break;
  }
  for (fs::path p = cwd;; p = p.parent_path()) {
    if (is_file(p / "include" / "kiln" / "kiln.hpp")) return (p / "data" / "mnist").string();
    if (p == p.parent_path()) break;
  }
  return "data/mnist";
}

bool mnist_available(const std::string& dir) noexcept {
  try {
    return is_file(fs::path(dir) / mnist_images_file) && is_file(fs::path(dir) / mnist_labels_file);
  } catch (...) {
    return false;
  }
}

}  // namespace kiln::data
