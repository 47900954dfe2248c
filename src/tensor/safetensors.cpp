// safetensors reading and writing (kiln/tensor/safetensors.hpp). The header is JSON parsed and
// written with nlohmann-json; data is read per tensor into an aligned host block and uploaded.
#include "kiln/tensor/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

namespace kiln {
namespace {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host would need byte swaps");

using ojson = nlohmann::ordered_json;

// Header sizes beyond this are refused before allocating (the reference implementation's limit).
constexpr std::uint64_t max_header_bytes = 100u << 20;

struct dtype_name {
  const char* name;
  scalar_type type;
};
constexpr dtype_name dtype_names[] = {
    {"BOOL", scalar_type::boolean}, {"U8", scalar_type::u8},   {"I8", scalar_type::i8},
    {"U16", scalar_type::u16},      {"I16", scalar_type::i16}, {"U32", scalar_type::u32},
    {"I32", scalar_type::i32},      {"U64", scalar_type::u64}, {"I64", scalar_type::i64},
    {"F32", scalar_type::f32},      {"F64", scalar_type::f64}, {"F16", scalar_type::f16},
    {"BF16", scalar_type::bf16}};
// Valid in the format, but with no kiln::scalar_type to hold them.
constexpr const char* unsupported_dtypes[] = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3",
                                              "F6_E3M2", "F4",      "C64"};

[[noreturn]] void malformed(const std::string& path, const std::string& why) {
  throw invalid_argument("kiln::load_safetensors: " + path + ": " + why);
}

scalar_type parse_dtype(const std::string& path, const std::string& name, const std::string& s) {
  for (const auto& d : dtype_names)
    if (s == d.name) return d.type;
  for (const char* u : unsupported_dtypes)
    if (s == u)
      throw unsupported("kiln::load_safetensors: " + path + ": tensor \"" + name + "\" has dtype " +
                        s + ", which kiln::tensor does not have");
  malformed(path, "tensor \"" + name + "\" has unknown dtype \"" + s + "\"");
}

struct entry {
  std::string name;
  scalar_type dtype;
  shape_t shape;
  std::uint64_t begin, end;
};

std::uint64_t read_u64_le(const unsigned char* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

entry parse_entry(const std::string& path, const std::string& name, const ojson& v,
                  std::uint64_t data_bytes) {
  if (!v.is_object()) malformed(path, "entry \"" + name + "\" is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) malformed(path, "tensor \"" + name + "\" has no \"" + key + "\"");
  if (!v["dtype"].is_string()) malformed(path, "tensor \"" + name + "\": dtype is not a string");
  entry e{name, parse_dtype(path, name, v["dtype"].get<std::string>()), {}, 0, 0};
  const ojson& shape = v["shape"];
  if (!shape.is_array()) malformed(path, "tensor \"" + name + "\": shape is not an array");
  if (shape.size() > static_cast<std::size_t>(max_tensor_rank))
    malformed(path, "tensor \"" + name + "\" has rank " + std::to_string(shape.size()) +
                        ", more than kiln::tensor's " + std::to_string(max_tensor_rank));
  // numel * size must not overflow; bounded by the data size, which fits in a file.
  std::uint64_t bytes = size_of(e.dtype);
  for (const ojson& d : shape) {
    if (!d.is_number_unsigned())
      malformed(path, "tensor \"" + name + "\": shape holds " + d.dump() +
                          ", not a non-negative integer");
    const auto n = d.get<std::uint64_t>();
    if (n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      malformed(path, "tensor \"" + name + "\": dimension " + d.dump() + " is too large");
    e.shape.push_back(static_cast<std::int64_t>(n));
    bytes = (n != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / n)
                ? std::numeric_limits<std::uint64_t>::max()
                : bytes * n;
  }
  const ojson& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned())
    malformed(path, "tensor \"" + name + "\": data_offsets is not [begin, end]");
  e.begin = off[0].get<std::uint64_t>();
  e.end = off[1].get<std::uint64_t>();
  if (e.begin > e.end || e.end > data_bytes)
    malformed(path, "tensor \"" + name + "\": data_offsets [" + std::to_string(e.begin) + ", " +
                        std::to_string(e.end) + ") out of range of the " +
                        std::to_string(data_bytes) + "-byte data");
  if (e.end - e.begin != bytes)
    malformed(path,
              "tensor \"" + name + "\": shape " + to_string(e.shape) + " of " +
                  v["dtype"].get<std::string>() + " needs " +
                  (bytes == std::numeric_limits<std::uint64_t>::max() ? std::string("too many")
                                                                      : std::to_string(bytes)) +
                  " bytes, data_offsets hold " + std::to_string(e.end - e.begin));
  return e;
}

}  // namespace

const char* safetensors_dtype(scalar_type t) noexcept {
  for (const auto& d : dtype_names)
    if (d.type == t) return d.name;
  return "?";
}

const tensor& safetensors_file::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  throw not_found("kiln::safetensors_file: no tensor called \"" + name + "\"");
}

bool safetensors_file::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& p) { return p.first == name; });
}

safetensors_file load_safetensors(const std::string& path, const device& dev) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw not_found("kiln::load_safetensors: cannot open " + path + ": " + std::strerror(errno));
  in.seekg(0, std::ios::end);
  const auto file_bytes = static_cast<std::uint64_t>(in.tellg());
  in.seekg(0);
  if (file_bytes < 8)
    malformed(path, "truncated: " + std::to_string(file_bytes) +
                        " bytes, less than the 8-byte "
                        "header length");
  unsigned char len_bytes[8];
  in.read(reinterpret_cast<char*>(len_bytes), 8);
  const std::uint64_t header_bytes = read_u64_le(len_bytes);
  if (header_bytes > file_bytes - 8)
    malformed(path, "header length " + std::to_string(header_bytes) + " runs past the end of the " +
                        std::to_string(file_bytes) + "-byte file (truncated?)");
  if (header_bytes > max_header_bytes)
    malformed(path, "header length " + std::to_string(header_bytes) + " is over the 100 MiB limit");
  std::string header(header_bytes, '\0');
  in.read(header.data(), static_cast<std::streamsize>(header_bytes));
  if (!in) malformed(path, "could not read the header");
  const std::uint64_t data_bytes = file_bytes - 8 - header_bytes;

  ojson j;
  try {
    j = ojson::parse(header);
  } catch (const nlohmann::json::exception& e) {
    malformed(path, std::string("the header is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) malformed(path, "the header is not a JSON object");

  safetensors_file out;
  std::vector<entry> entries;
  for (const auto& [key, v] : j.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) malformed(path, "__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) malformed(path, "__metadata__ \"" + mk + "\" is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(path, key, v, data_bytes));
  }
  // The spec's rule: the data is covered exactly, no overlap and no holes.
  std::stable_sort(entries.begin(), entries.end(),
                   [](const entry& a, const entry& b) { return a.begin < b.begin; });
  std::uint64_t at = 0;
  for (const entry& e : entries) {
    if (e.begin != at)
      malformed(path,
                "tensor \"" + e.name + "\" starts at byte " + std::to_string(e.begin) +
                    (e.begin < at ? ", overlapping the tensor before it (which ends at "
                                  : ", leaving a hole after the tensor before it (ending at ") +
                    std::to_string(at) + ")");
    at = e.end;
  }
  if (at != data_bytes)
    malformed(path, "the tensors cover " + std::to_string(at) + " of the " +
                        std::to_string(data_bytes) + " data bytes");

  const std::uint64_t data_start = 8 + header_bytes;
  std::vector<std::uint64_t> block;  // 8-byte aligned staging for every dtype
  for (const entry& e : entries) {
    const std::uint64_t n = e.end - e.begin;
    block.assign((n + 7) / 8, 0);
    in.seekg(static_cast<std::streamoff>(data_start + e.begin));
    in.read(reinterpret_cast<char*>(block.data()), static_cast<std::streamsize>(n));
    if (!in) malformed(path, "could not read tensor \"" + e.name + "\"");
    if (e.dtype == scalar_type::boolean) {
      const auto* b = reinterpret_cast<const unsigned char*>(block.data());
      for (std::uint64_t i = 0; i < n; ++i)
        if (b[i] > 1)
          malformed(path, "tensor \"" + e.name + "\" (BOOL) holds byte " + std::to_string(b[i]) +
                              " at element " + std::to_string(i));
    }
    out.tensors.emplace_back(e.name, detail::tensor_from_host(dev, e.dtype, block.data(),
                                                              n / size_of(e.dtype), e.shape));
  }
  return out;
}

namespace {

// Writes to a temporary beside path, flushes it to disk, and renames it over path.
class atomic_file {
 public:
  explicit atomic_file(const std::string& path) : path_(path) {
    static std::atomic<unsigned> counter{0};
    tmp_ = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail("cannot create " + tmp_);
  }
  ~atomic_file() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  void write(const void* p, std::size_t n) {
    if (n && std::fwrite(p, 1, n, f_) != n) fail("cannot write " + tmp_);
  }
  void commit() {
    if (std::fflush(f_) != 0 || ::fsync(::fileno(f_)) != 0) fail("cannot flush " + tmp_);
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail("cannot close " + tmp_);
    if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
      fail("cannot rename " + tmp_ + " to " + path_);
    committed_ = true;
  }

 private:
  [[noreturn]] void fail(const std::string& what) {
    throw backend_failure("kiln::save_safetensors: " + what + ": " + std::strerror(errno));
  }
  std::string path_, tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

}  // namespace

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string where = "kiln::save_safetensors: " + path + ": ";
  std::set<std::string> names;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw invalid_argument(where + "a tensor has an empty name");
    if (name == "__metadata__")
      throw invalid_argument(where + "\"__metadata__\" is reserved for the metadata map");
    if (!names.insert(name).second)
      throw invalid_argument(where + "two tensors are called \"" + name + "\"");
    if (!t.defined()) throw invalid_argument(where + "tensor \"" + name + "\" is undefined");
  }

  ojson header = ojson::object();
  if (!metadata.empty()) {
    ojson m = ojson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    const std::uint64_t bytes = static_cast<std::uint64_t>(t.numel()) * size_of(t.dtype());
    header[name] = {{"dtype", safetensors_dtype(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned

  atomic_file f(path);
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(text.size() >> (8 * i));
  f.write(len, 8);
  f.write(text.data(), text.size());
  std::vector<std::uint64_t> block;
  for (const auto& [name, t] : tensors) {
    const auto n = static_cast<std::uint64_t>(t.numel());
    block.assign((n * size_of(t.dtype()) + 7) / 8, 0);
    if (n) detail::tensor_read(t, t.dtype(), block.data(), n);  // evaluates, makes contiguous
    f.write(block.data(), n * size_of(t.dtype()));
  }
  f.commit();
}

}  // namespace kiln
