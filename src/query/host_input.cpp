#include "query/host_input.hpp"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "runtime/disk_cache.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {
namespace {

// Measured on the lent H100 host (docs/benchmarks.md): below this, the CPU backend finishes a
// host-resident query before the data would have crossed PCIe.
constexpr std::uint64_t default_crossover = 8ull << 20;
constexpr std::uint64_t stage_bytes = 8ull << 20;  // one staging buffer

struct staging {
  std::mutex mu;
  void* buf[2] = {nullptr, nullptr};
  std::optional<event> done[2];
};

staging& staging_for(const device& dev) {
  static std::mutex mu;
  static auto* all = new std::map<const device_impl*, std::unique_ptr<staging>>;  // kept
  std::lock_guard lock(mu);
  auto& s = (*all)[dev.impl().get()];
  if (!s) {
    s = std::make_unique<staging>();
    for (auto& b : s->buf) b = host_alloc(dev, stage_bytes);
  }
  return *s;
}

void copy_in(const device& dev, memory_impl& dst, const void* src, std::uint64_t bytes) {
  queue& q = dev.default_queue();
  if (dev.info().type == device_type::cpu) {  // device memory is host memory: one copy
    copy_h2d(*q.impl(), dst, 0, src, bytes);
    return;
  }
  staging& s = staging_for(dev);
  std::lock_guard lock(s.mu);
  const auto* p = static_cast<const unsigned char*>(src);
  for (std::uint64_t off = 0, k = 0; off < bytes; off += stage_bytes, ++k) {
    const std::uint64_t len = std::min(stage_bytes, bytes - off);
    const int slot = static_cast<int>(k & 1);
    if (s.done[slot]) s.done[slot]->wait();  // the DMA out of this buffer has finished
    std::memcpy(s.buf[slot], p + off, len);
    copy_h2d(*q.impl(), dst, off, s.buf[slot], len);
    s.done[slot] = q.record();
  }
  // Later queue work is ordered after the copies; the staging buffers are reused only after
  // their events, so nothing needs to wait here.
}

// "cuda:0@NVIDIA_H100_80GB_HBM3": a device and the model it was measured on.
std::string placement_key(const device& gpu) {
  std::string k = gpu.id() + "@" + gpu.info().name;
  std::replace(k.begin(), k.end(), ' ', '_');
  return k;
}

}  // namespace

void stage_host_inputs(query_desc& d, query_stats& st) {
  std::uint64_t bytes = 0;
  for (const auto& in : d.inputs) bytes += d.n * size_of(in.type);
  if (d.where == placement::automatic) d.dev = automatic_device(bytes);
  if (!d.dev.impl()) throw invalid_argument("kiln::on: no device given");
  for (auto& in : d.inputs) {
    const std::uint64_t b = d.n * size_of(in.type);
    in.mem = allocate(d.dev, std::max<std::uint64_t>(b, 1));
    in.offset = 0;
    if (b) copy_in(d.dev, *in.mem, in.host, b);
    in.host = nullptr;
    in.on_host = false;
  }
  st.host_to_device_bytes += bytes;
}

device automatic_device(std::uint64_t bytes) {
  std::optional<device> gpu;
  for (const device& d : device::all())
    if (d.info().type == device_type::gpu) {
      gpu = d;
      break;
    }
  if (gpu && bytes >= gpu_crossover_bytes(*gpu)) return *gpu;
  return device::host();
}

std::uint64_t gpu_crossover_bytes(const device& gpu) {
  return stored_placement(gpu, "").value_or(default_crossover);
}

std::string store_crossover(const device& gpu, std::uint64_t bytes) {
  return store_placement(gpu, "", bytes);
}

std::filesystem::path placement_file() {
  auto dir = disk_cache::configured_dir();
  return dir ? *dir / "placement.txt" : std::filesystem::path();
}

namespace {

// A line's key, name ("" for the crossover's form) and value; false for other lines.
bool parse_line(const std::string& line, std::string& key, std::string& name,
                std::uint64_t& value) {
  std::istringstream ls(line);
  std::string a, b, c, extra;
  if (!(ls >> a >> b)) return false;
  const bool named = static_cast<bool>(ls >> c);
  if (named && ls >> extra) return false;
  const std::string& v = named ? c : b;
  if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos) return false;
  try {
    value = std::stoull(v);
  } catch (const std::exception&) {
    return false;
  }
  key = a;
  name = named ? b : "";
  return true;
}

}  // namespace

std::optional<std::uint64_t> stored_placement(const device& dev, const std::string& name) {
  const auto file = placement_file();
  if (file.empty()) return std::nullopt;
  std::ifstream in(file);
  const std::string want = placement_key(dev);
  std::string line, key, n;
  std::uint64_t value = 0;
  std::optional<std::uint64_t> found;
  while (std::getline(in, line))
    if (parse_line(line, key, n, value) && key == want && n == name) found = value;
  return found;
}

std::string store_placement(const device& dev, const std::string& name, std::uint64_t value) {
  const auto file = placement_file();
  if (file.empty()) throw invalid_argument("kiln calibrate: the cache is disabled (KILN_CACHE=0)");
  if (name.find_first_of(" \t\n") != std::string::npos)
    throw invalid_argument("kiln: a placement name may not hold white space: '" + name + "'");
  std::filesystem::create_directories(file.parent_path());
  const std::string want = placement_key(dev);
  std::string kept, line, key, n;
  std::uint64_t v = 0;
  {
    std::ifstream in(file);
    while (std::getline(in, line))
      if (!(parse_line(line, key, n, v) && key == want && n == name)) kept += line + "\n";
  }
  const auto tmp = file.string() + ".tmp";
  std::ofstream(tmp) << kept << want << " " << (name.empty() ? "" : name + " ") << value << "\n";
  std::filesystem::rename(tmp, file);
  return file.string();
}

}  // namespace kiln::detail::q
