#include "runtime/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <string_view>
#include <thread>

namespace kiln::detail {
namespace fs = std::filesystem;

namespace {

constexpr std::array<char, 8> magic = {'K', 'I', 'L', 'N', 'B', 'I', 'N', '\0'};
constexpr std::string_view entry_ext = ".kbin";
constexpr std::string_view temp_ext = ".tmp";
constexpr auto stale_temp_age = std::chrono::hours(1);

static_assert(disk_cache::header_size == 8 + 4 + 4 + 8 * 5);
static_assert(disk_cache::header_checksum_offset == disk_cache::header_size - 8);

using header_bytes = std::array<std::byte, disk_cache::header_size>;

// --- little-endian field codec --------------------------------------------------------------

template <typename T>
void put_le(std::byte* out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<std::byte>(v >> (8 * i));
}

template <typename T>
T get_le(const std::byte* in) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[i]) << (8 * i);
  return v;
}

header_bytes encode_header(const cache_key& key, std::span<const std::byte> payload) {
  header_bytes h{};
  std::memcpy(h.data(), magic.data(), magic.size());
  put_le<std::uint32_t>(h.data() + 8, cache_format_version);
  put_le<std::uint32_t>(h.data() + 12, 0);  // reserved
  put_le<std::uint64_t>(h.data() + 16, key.hi);
  put_le<std::uint64_t>(h.data() + 24, key.lo);
  put_le<std::uint64_t>(h.data() + 32, payload.size());
  put_le<std::uint64_t>(h.data() + 40, checksum64(payload));
  put_le<std::uint64_t>(h.data() + 48,
                        checksum64(std::span(h.data(), disk_cache::header_checksum_offset)));
  return h;
}

// True when the header is intact and belongs to `key`; sets the payload size and checksum.
bool decode_header(const header_bytes& h, const cache_key& key, std::uint64_t& payload_size,
                   std::uint64_t& payload_checksum) {
  if (std::memcmp(h.data(), magic.data(), magic.size()) != 0) return false;
  if (get_le<std::uint64_t>(h.data() + 48) !=
      checksum64(std::span(h.data(), disk_cache::header_checksum_offset)))
    return false;
  if (get_le<std::uint32_t>(h.data() + 8) != cache_format_version) return false;
  if (get_le<std::uint64_t>(h.data() + 16) != key.hi) return false;
  if (get_le<std::uint64_t>(h.data() + 24) != key.lo) return false;
  payload_size = get_le<std::uint64_t>(h.data() + 32);
  payload_checksum = get_le<std::uint64_t>(h.data() + 40);
  return true;
}

// --- POSIX helpers --------------------------------------------------------------------------

struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

enum class read_status { ok, short_read, error };

read_status read_full(int fd, std::byte* out, std::size_t n) {
  while (n > 0) {
    const ssize_t r = ::read(fd, out, n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return read_status::error;
    if (r == 0) return read_status::short_read;
    out += r;
    n -= static_cast<std::size_t>(r);
  }
  return read_status::ok;
}

bool write_full(int fd, std::span<const std::byte> bytes) {
  const std::byte* p = bytes.data();
  std::size_t n = bytes.size();
  while (n > 0) {
    const ssize_t r = ::write(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<std::size_t>(r);
  }
  return true;
}

// Removes a bad entry, but only if `path` still names the file we read: a concurrent store() may
// already have renamed a good entry over it.
void remove_if_unchanged(const fs::path& path, const struct stat& read_st) {
  struct stat now_st;
  if (::stat(path.c_str(), &now_st) != 0) return;
  if (now_st.st_dev != read_st.st_dev || now_st.st_ino != read_st.st_ino) return;
  std::error_code ec;
  fs::remove(path, ec);
}

// --- temporary names ------------------------------------------------------------------------

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

std::uint64_t initial_seed() noexcept {
  std::uint64_t seed =
      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  try {
    std::random_device rd;
    seed ^= (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  } catch (...) {
    // No entropy source: pid + thread id + clock still make the name unique in practice, and
    // O_EXCL catches the rest.
  }
  return seed;
}

// pid and thread id keep concurrent writers on one host apart; the random part covers hosts or
// pid namespaces sharing one directory (and a forked child inheriting this thread's state).
std::string temp_name(const cache_key& key) {
  thread_local std::uint64_t state = initial_seed();
  const auto tid = std::hash<std::thread::id>{}(std::this_thread::get_id());
  const std::uint64_t rnd = splitmix64(state) ^ static_cast<std::uint64_t>(::getpid());
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".%ld.%zx.%016llx", static_cast<long>(::getpid()), tid,
                static_cast<unsigned long long>(rnd));
  return key.hex() + suffix + std::string(temp_ext);
}

// --- directory layout -----------------------------------------------------------------------

bool is_lower_hex(std::string_view s) {
  for (char c : s)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  return true;
}

bool is_shard_name(std::string_view name) { return name.size() == 2 && is_lower_hex(name); }

// "<32 hex>.kbin" whose first two digits match the shard directory.
bool is_entry_name(std::string_view name, std::string_view shard) {
  return name.size() == 32 + entry_ext.size() && name.ends_with(entry_ext) &&
         is_lower_hex(name.substr(0, 32)) && name.substr(0, 2) == shard;
}

// "<32 hex>.<anything>.tmp", as made by temp_name().
bool is_temp_name(std::string_view name) {
  return name.size() > 33 + temp_ext.size() && name.ends_with(temp_ext) &&
         is_lower_hex(name.substr(0, 32)) && name[32] == '.';
}

enum class file_kind { entry, temp, other };

// Calls fn(path, kind, directory_entry) for each regular file in each shard directory. Errors
// end the walk of that directory quietly: scan() and clear() are best effort.
template <typename Fn>
void for_each_file(const fs::path& dir, Fn&& fn) {
  std::error_code ec;
  std::vector<fs::path> shards;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (it->is_directory(ec2) && is_shard_name(it->path().filename().native()))
      shards.push_back(it->path());
  }
  for (const fs::path& shard : shards) {
    const std::string shard_name = shard.filename().native();
    for (fs::directory_iterator it(shard, ec), end; !ec && it != end; it.increment(ec)) {
      std::error_code ec2;
      if (!it->is_regular_file(ec2)) continue;
      const std::string name = it->path().filename().native();
      const file_kind kind = is_entry_name(name, shard_name) ? file_kind::entry
                             : is_temp_name(name)            ? file_kind::temp
                                                             : file_kind::other;
      fn(*it, kind);
    }
    ec.clear();
  }
}

bool is_stale(const fs::directory_entry& e) {
  std::error_code ec;
  const auto mtime = e.last_write_time(ec);
  return !ec && fs::file_time_type::clock::now() - mtime > stale_temp_age;
}

bool env_is_off(std::string_view v) {
  std::string lower(v);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower == "0" || lower == "off" || lower == "false";
}

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : nullptr;
}

}  // namespace

std::optional<fs::path> disk_cache::configured_dir() {
  if (const char* v = env("KILN_CACHE"); v != nullptr && env_is_off(v)) return std::nullopt;
  if (const char* v = env("KILN_CACHE_DIR")) return fs::path(v);
  // The XDG spec says relative values are invalid and must be ignored.
  if (const char* v = env("XDG_CACHE_HOME"); v != nullptr && fs::path(v).is_absolute())
    return fs::path(v) / "kiln";
  if (const char* v = env("HOME")) return fs::path(v) / ".cache" / "kiln";
  return std::nullopt;
}

fs::path disk_cache::entry_path(const cache_key& key) const {
  const std::string hex = key.hex();
  return dir_ / hex.substr(0, 2) / (hex + std::string(entry_ext));
}

std::optional<std::vector<std::byte>> disk_cache::load(const cache_key& key) const noexcept {
  try {
    const fs::path path = entry_path(key);
    fd_guard fd{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
    if (fd.fd < 0) return std::nullopt;  // usually ENOENT: a plain miss
    struct stat st;
    if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;

    // I/O errors are misses but keep the file (it may be fine); bad contents remove it.
    const auto bad = [&]() -> std::optional<std::vector<std::byte>> {
      remove_if_unchanged(path, st);
      return std::nullopt;
    };
    const auto file_size = static_cast<std::uint64_t>(st.st_size);
    if (file_size < header_size) return bad();

    header_bytes header;
    read_status r = read_full(fd.fd, header.data(), header.size());
    if (r == read_status::error) return std::nullopt;
    if (r == read_status::short_read) return bad();
    std::uint64_t payload_size = 0, payload_checksum = 0;
    if (!decode_header(header, key, payload_size, payload_checksum)) return bad();
    if (payload_size != file_size - header_size) return bad();

    std::vector<std::byte> payload(payload_size);
    r = read_full(fd.fd, payload.data(), payload.size());
    if (r == read_status::error) return std::nullopt;
    if (r == read_status::short_read) return bad();
    std::byte extra;
    if (read_full(fd.fd, &extra, 1) != read_status::short_read) return bad();  // grew under us
    if (checksum64(payload) != payload_checksum) return bad();
    return payload;
  } catch (...) {  // bad_alloc from a path or the payload buffer
    return std::nullopt;
  }
}

bool disk_cache::store(const cache_key& key, std::span<const std::byte> payload) const noexcept {
  try {
    const fs::path path = entry_path(key);
    const fs::path shard = path.parent_path();
    std::error_code ec;
    fs::create_directories(shard, ec);
    // An error may come from a racing creator; only a missing directory is fatal.
    if (ec && !fs::is_directory(shard, ec)) return false;

    const header_bytes header = encode_header(key, payload);
    // O_EXCL guarantees the name is ours; retry on the (unlikely) collision.
    fs::path tmp;
    int raw_fd = -1;
    for (int attempt = 0; attempt < 4 && raw_fd < 0; ++attempt) {
      tmp = shard / temp_name(key);
      raw_fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (raw_fd < 0 && errno != EEXIST) return false;
    }
    if (raw_fd < 0) return false;

    fd_guard fd{raw_fd};
    bool ok = write_full(fd.fd, header) && write_full(fd.fd, payload);
    ok = (::close(fd.fd) == 0) && ok;  // close can report a deferred write error (NFS, quota)
    fd.fd = -1;
    if (ok && ::rename(tmp.c_str(), path.c_str()) == 0) return true;
    ::unlink(tmp.c_str());
    return false;
  } catch (...) {
    return false;
  }
}

disk_cache::stats disk_cache::scan() const {
  stats s;
  for_each_file(dir_, [&](const fs::directory_entry& e, file_kind kind) {
    if (kind != file_kind::entry) return;
    std::error_code ec;
    const std::uintmax_t size = e.file_size(ec);
    if (ec) return;  // removed since listing
    ++s.entries;
    s.bytes += size;
  });
  return s;
}

std::size_t disk_cache::clear() const {
  std::size_t removed = 0;
  std::vector<fs::path> doomed_temps;
  std::vector<fs::path> doomed_entries;
  for_each_file(dir_, [&](const fs::directory_entry& e, file_kind kind) {
    if (kind == file_kind::entry) doomed_entries.push_back(e.path());
    // A fresh temporary may belong to a live writer; removing it would only fail its store().
    if (kind == file_kind::temp && is_stale(e)) doomed_temps.push_back(e.path());
  });
  std::error_code ec;
  for (const fs::path& p : doomed_entries)
    if (fs::remove(p, ec)) ++removed;
  for (const fs::path& p : doomed_temps) fs::remove(p, ec);
  // Drop shard directories left empty; remove() refuses non-empty ones.
  for (fs::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    std::error_code ec2;
    if (is_shard_name(it->path().filename().native()) && it->is_directory(ec2))
      fs::remove(it->path(), ec2);
  }
  return removed;
}

}  // namespace kiln::detail
