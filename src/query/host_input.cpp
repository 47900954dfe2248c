#include "query/host_input.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <system_error>
#include <thread>

#include "query/host_staging.hpp"
#include "runtime/disk_cache.hpp"
#include "runtime/runtime.hpp"

namespace kiln::detail::q {
namespace {

// Measured on the lent H100 host (docs/benchmarks.md): below this, the CPU backend finishes a
// host-resident query before the data would have crossed PCIe.
constexpr std::uint64_t default_crossover = 8ull << 20;

// Copies host data into fresh device memory `dst`. Later work on the default queue (the
// query's kernels) is ordered after the copies; the host range is no longer read on return.
void copy_in(const device& dev, memory_impl& dst, const void* src, std::uint64_t bytes) {
  const host_transfer_config c = host_transfer();
  if (void* p = host_address(dst, c)) {  // device memory is host memory: one copy
    parallel_copy(p, src, bytes, c);
    return;
  }
  staging_pool& pool = staging_pool::of(dev);
  queue& cq = pool.h2d();
  // Pinned already, or a CPU device (its "DMA" is a memcpy): one copy, no staging.
  if (pinned_for(dev, src, bytes) || direct_device(dev, c)) {
    copy_h2d(*cq.impl(), dst, 0, src, bytes);
    const event e = cq.record();
    dev.default_queue().wait(e);
    e.wait();  // the caller may free its buffer once the query returns (to_buffer: at once)
    return;
  }
  // Chunks through the pool: the host's copy into one slot overlaps the DMA out of the others.
  const std::uint64_t chunk =
      std::min(std::max<std::uint64_t>(c.chunk_bytes, 1), pool.slot_bytes());
  const auto* from = static_cast<const unsigned char*>(src);
  for (std::uint64_t off = 0; off < bytes; off += chunk) {
    const std::uint64_t len = std::min(chunk, bytes - off);
    slot_lease s(pool, pool.acquire());
    parallel_copy(s->p, from + off, len, c);
    s.submitted(cq);
    copy_h2d(*cq.impl(), dst, off, s->p, len);
    s.done(cq);
  }
  dev.default_queue().wait(cq.record());
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

// An exclusive flock on `path` (created if missing) for the object's lifetime: it orders
// writers in this process and in others; the lock ends with the descriptor, also on a crash.
class file_lock {
 public:
  explicit file_lock(const std::string& path)
      : fd_(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0)
      throw std::filesystem::filesystem_error("kiln: cannot open the placement store's lock", path,
                                              std::error_code(errno, std::generic_category()));
    while (::flock(fd_, LOCK_EX) != 0)
      if (errno != EINTR) {
        const int e = errno;
        ::close(fd_);
        throw std::filesystem::filesystem_error("kiln: cannot lock the placement store", path,
                                                std::error_code(e, std::generic_category()));
      }
  }
  ~file_lock() { ::close(fd_); }
  file_lock(const file_lock&) = delete;
  file_lock& operator=(const file_lock&) = delete;

 private:
  int fd_;
};

// "<file>.<pid>.<thread>.tmp": no two live writers share it.
std::string unique_temp_name(const std::filesystem::path& file) {
  std::ostringstream s;
  s << file.string() << '.' << ::getpid() << '.' << std::this_thread::get_id() << ".tmp";
  return s.str();
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
  // Read, edit and replace under the lock: concurrent writers (threads, `kiln calibrate` runs,
  // test processes sharing a cache directory) would otherwise drop each other's lines.
  const file_lock lock(file.string() + ".lock");
  std::string kept, line, key, n;
  std::uint64_t v = 0;
  {
    std::ifstream in(file);
    while (std::getline(in, line))
      if (!(parse_line(line, key, n, v) && key == want && n == name)) kept += line + "\n";
  }
  // A temporary of this writer's own, so that no other writer truncates it under us.
  const std::string tmp = unique_temp_name(file);
  {
    std::ofstream out(tmp);
    out << kept << want << " " << (name.empty() ? "" : name + " ") << value << "\n";
    out.close();
    if (!out) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      throw std::filesystem::filesystem_error("kiln: cannot write the placement store", tmp,
                                              std::make_error_code(std::errc::io_error));
    }
  }
  std::filesystem::rename(tmp, file);
  return file.string();
}

}  // namespace kiln::detail::q
