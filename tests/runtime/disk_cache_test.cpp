#include "runtime/disk_cache.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace kiln::detail {
namespace {
namespace fs = std::filesystem;

std::vector<std::byte> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::byte> out(n);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  return out;
}

cache_key key_n(int n) {
  return make_cache_key("cpu", "x86-64-v3", "test", "", "source " + std::to_string(n));
}

std::vector<std::byte> read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> chars{std::istreambuf_iterator<char>(in), {}};
  std::vector<std::byte> out(chars.size());
  std::memcpy(out.data(), chars.data(), chars.size());
  return out;
}

void write_file(const fs::path& p, std::span<const std::byte> bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << p;
}

void put_u32(std::vector<std::byte>& f, std::size_t at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) f[at + i] = static_cast<std::byte>(v >> (8 * i));
}
void put_u64(std::vector<std::byte>& f, std::size_t at, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) f[at + i] = static_cast<std::byte>(v >> (8 * i));
}
// Recomputes the header checksum so a test reaches the check after it.
void reseal_header(std::vector<std::byte>& f) {
  put_u64(f, disk_cache::header_checksum_offset,
          checksum64(std::span(f.data(), disk_cache::header_checksum_offset)));
}

// Each test gets a fresh, uniquely named directory, removed afterwards.
class DiskCacheTest : public testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    std::random_device rd;
    root_ =
        fs::temp_directory_path() / ("kiln_disk_cache_test_" + std::to_string(::getpid()) + "_" +
                                     std::to_string(counter++) + "_" + std::to_string(rd()));
    ASSERT_TRUE(fs::create_directories(root_));
    dir_ = root_ / "cache";  // not created: the cache must create it lazily
  }
  void TearDown() override {
    std::error_code ec;
    // Undo any chmod so remove_all can descend.
    for (auto it = fs::recursive_directory_iterator(root_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec))
      fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(root_, ec);
  }

  fs::path root_, dir_;
};

TEST_F(DiskCacheTest, MissOnEmptyAndMissingDir) {
  disk_cache cache(dir_);
  EXPECT_EQ(cache.load(key_n(1)), std::nullopt);
  EXPECT_FALSE(fs::exists(dir_)) << "load must not create the directory";
  fs::create_directories(dir_);
  EXPECT_EQ(cache.load(key_n(1)), std::nullopt);
}

TEST_F(DiskCacheTest, StoreThenLoadRoundTrips) {
  disk_cache cache(dir_);
  const std::size_t sizes[] = {0, 1, 55, 56, 57, 4096, 1 << 20};
  int n = 0;
  for (std::size_t size : sizes) {
    const auto payload = random_bytes(size, size + 1);
    const cache_key key = key_n(n++);
    ASSERT_TRUE(cache.store(key, payload)) << size;
    const auto got = cache.load(key);
    ASSERT_TRUE(got.has_value()) << size;
    EXPECT_EQ(*got, payload) << size;
    EXPECT_EQ(fs::file_size(cache.entry_path(key)), disk_cache::header_size + size);
  }
  // Persistent: a new instance on the same directory sees the entries.
  disk_cache again(dir_);
  EXPECT_EQ(again.load(key_n(0)), std::vector<std::byte>{});
  EXPECT_EQ(again.load(key_n(6)), random_bytes(1 << 20, (1 << 20) + 1));
}

TEST_F(DiskCacheTest, EntryPathLayout) {
  disk_cache cache(dir_);
  const cache_key key = key_n(1);
  const std::string hex = key.hex();
  EXPECT_EQ(cache.entry_path(key), dir_ / hex.substr(0, 2) / (hex + ".kbin"));
  EXPECT_EQ(cache.dir(), dir_);
}

TEST_F(DiskCacheTest, StoreOverwritesAndLeavesNoTemporaries) {
  disk_cache cache(dir_);
  const cache_key key = key_n(1);
  ASSERT_TRUE(cache.store(key, random_bytes(100, 1)));
  ASSERT_TRUE(cache.store(key, random_bytes(200, 2)));
  EXPECT_EQ(cache.load(key), random_bytes(200, 2));
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);
}

TEST_F(DiskCacheTest, DifferentKeyMisses) {
  disk_cache cache(dir_);
  ASSERT_TRUE(cache.store(key_n(1), random_bytes(64, 1)));
  EXPECT_EQ(cache.load(key_n(2)), std::nullopt);
  EXPECT_TRUE(cache.load(key_n(1)).has_value());
}

TEST_F(DiskCacheTest, CorruptedByteAnywhereIsMissAndRemoved) {
  disk_cache cache(dir_);
  const cache_key key = key_n(1);
  const auto payload = random_bytes(300, 7);
  ASSERT_TRUE(cache.store(key, payload));
  const fs::path path = cache.entry_path(key);
  const auto good = read_file(path);
  // Every header byte, and a few payload bytes (first, middle, last).
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < disk_cache::header_size; ++i) offsets.push_back(i);
  offsets.insert(offsets.end(),
                 {disk_cache::header_size, disk_cache::header_size + 150, good.size() - 1});
  for (std::size_t at : offsets) {
    auto bad = good;
    bad[at] ^= std::byte{0x20};
    write_file(path, bad);
    EXPECT_EQ(cache.load(key), std::nullopt) << "flipped byte " << at;
    EXPECT_FALSE(fs::exists(path)) << "flipped byte " << at;
  }
  ASSERT_TRUE(cache.store(key, payload));
  EXPECT_EQ(cache.load(key), payload);
}

TEST_F(DiskCacheTest, TruncatedOrExtendedFileIsMissAndRemoved) {
  disk_cache cache(dir_);
  const cache_key key = key_n(1);
  ASSERT_TRUE(cache.store(key, random_bytes(1000, 3)));
  const fs::path path = cache.entry_path(key);
  const auto good = read_file(path);
  for (std::size_t len : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8},
                          std::size_t{20}, disk_cache::header_size - 1, disk_cache::header_size,
                          disk_cache::header_size + 1, good.size() / 2, good.size() - 1}) {
    write_file(path, std::span(good.data(), len));
    EXPECT_EQ(cache.load(key), std::nullopt) << "truncated to " << len;
    EXPECT_FALSE(fs::exists(path)) << "truncated to " << len;
  }
  auto longer = good;
  longer.push_back(std::byte{0});
  write_file(path, longer);
  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(DiskCacheTest, WrongMagicOrVersionIsMiss) {
  disk_cache cache(dir_);
  const cache_key key = key_n(1);
  ASSERT_TRUE(cache.store(key, random_bytes(64, 4)));
  const fs::path path = cache.entry_path(key);
  const auto good = read_file(path);

  // Resealed, so only the magic / version check can catch these.
  auto bad_magic = good;
  bad_magic[0] = std::byte{'X'};
  reseal_header(bad_magic);
  write_file(path, bad_magic);
  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_FALSE(fs::exists(path));

  for (std::uint32_t version : {cache_format_version + 1, 0u, 0xffffffffu}) {
    auto bad_version = good;
    put_u32(bad_version, 8, version);
    reseal_header(bad_version);
    write_file(path, bad_version);
    EXPECT_EQ(cache.load(key), std::nullopt) << version;
    EXPECT_FALSE(fs::exists(path)) << version;
  }

  // A resealed header claiming a huge payload must not make load() allocate it.
  auto huge = good;
  put_u64(huge, 32, ~std::uint64_t{0} - 8);
  reseal_header(huge);
  write_file(path, huge);
  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(DiskCacheTest, EntryForAnotherKeyIsMiss) {
  disk_cache cache(dir_);
  const cache_key a = key_n(1), b = key_n(2);
  const auto payload = random_bytes(128, 5);
  ASSERT_TRUE(cache.store(a, payload));
  fs::create_directories(cache.entry_path(b).parent_path());
  fs::copy_file(cache.entry_path(a), cache.entry_path(b));
  EXPECT_EQ(cache.load(b), std::nullopt);
  EXPECT_FALSE(fs::exists(cache.entry_path(b)));
  EXPECT_EQ(cache.load(a), payload);
}

TEST_F(DiskCacheTest, NonRegularEntryIsMissAndKept) {
  disk_cache cache(dir_);
  const cache_key key = key_n(1);
  fs::create_directories(cache.entry_path(key));  // a directory where the file should be
  EXPECT_EQ(cache.load(key), std::nullopt);
  EXPECT_FALSE(cache.store(key, random_bytes(8, 1)));  // rename onto a directory fails
  EXPECT_TRUE(fs::is_directory(cache.entry_path(key)));
}

TEST_F(DiskCacheTest, StoreIntoNonCreatableDirReturnsFalse) {
  // A regular file in the way: fails even for root.
  const fs::path blocker = root_ / "not_a_dir";
  std::ofstream(blocker) << "x";
  disk_cache cache(blocker / "cache");
  bool stored = true;
  EXPECT_NO_THROW(stored = cache.store(key_n(1), random_bytes(16, 1)));
  EXPECT_FALSE(stored);
  EXPECT_EQ(cache.load(key_n(1)), std::nullopt);
  EXPECT_EQ(cache.scan().entries, 0u);
  EXPECT_EQ(cache.clear(), 0u);
}

TEST_F(DiskCacheTest, StoreIntoReadOnlyDirReturnsFalse) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  disk_cache cache(dir_);
  ASSERT_TRUE(cache.store(key_n(1), random_bytes(16, 1)));
  // Read-only top level: new shards cannot be created. Read-only shard: no temporary file.
  fs::permissions(cache.entry_path(key_n(1)).parent_path(),
                  fs::perms::owner_read | fs::perms::owner_exec);
  fs::permissions(dir_, fs::perms::owner_read | fs::perms::owner_exec);
  int other = 2;
  while (cache.entry_path(key_n(other)).parent_path() == cache.entry_path(key_n(1)).parent_path())
    ++other;
  bool stored = true;
  EXPECT_NO_THROW(stored = cache.store(key_n(other), random_bytes(16, 2)));
  EXPECT_FALSE(stored);
  EXPECT_NO_THROW(stored = cache.store(key_n(1), random_bytes(16, 3)));
  EXPECT_FALSE(stored);
  EXPECT_EQ(cache.load(key_n(1)), random_bytes(16, 1));  // old entry still readable
}

TEST_F(DiskCacheTest, ScanCountsEntriesAndClearEmpties) {
  disk_cache cache(dir_);
  EXPECT_EQ(cache.scan().entries, 0u);
  EXPECT_EQ(cache.scan().bytes, 0u);
  EXPECT_EQ(cache.clear(), 0u);  // on a missing directory

  std::uint64_t expected_bytes = 0;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(cache.store(key_n(i), random_bytes(100 * i, i)));
    expected_bytes += disk_cache::header_size + 100 * i;
  }
  // Files that are not entries: a fresh and a stale temporary, a stranger, a misplaced entry.
  const fs::path shard = cache.entry_path(key_n(0)).parent_path();
  const std::string hex = key_n(0).hex();
  const fs::path fresh_tmp = shard / (hex + ".123.abc.0000000000000001.tmp");
  const fs::path stale_tmp = shard / (hex + ".456.def.0000000000000002.tmp");
  const fs::path stranger = shard / "notes.txt";
  const fs::path top_level = dir_ / "README";
  for (const auto& p : {fresh_tmp, stale_tmp, stranger, top_level}) std::ofstream(p) << "junk";
  fs::last_write_time(stale_tmp, fs::file_time_type::clock::now() - std::chrono::hours(2));
  // Right name pattern, wrong shard: not an entry.
  std::string other_shard = hex.substr(0, 2) == "00" ? "01" : "00";
  fs::create_directories(dir_ / other_shard);
  const fs::path misplaced = dir_ / other_shard / (hex + ".kbin");
  fs::copy_file(cache.entry_path(key_n(0)), misplaced);

  const auto s = cache.scan();
  EXPECT_EQ(s.entries, 5u);
  EXPECT_EQ(s.bytes, expected_bytes);

  EXPECT_EQ(cache.clear(), 5u);
  EXPECT_EQ(cache.scan().entries, 0u);
  EXPECT_EQ(cache.scan().bytes, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(cache.load(key_n(i)), std::nullopt);
  EXPECT_FALSE(fs::exists(stale_tmp));
  EXPECT_TRUE(fs::exists(fresh_tmp)) << "may belong to a live writer";
  EXPECT_TRUE(fs::exists(stranger)) << "clear() must only delete its own files";
  EXPECT_TRUE(fs::exists(top_level));
  EXPECT_TRUE(fs::exists(misplaced));

  // Still usable after clear().
  ASSERT_TRUE(cache.store(key_n(9), random_bytes(10, 9)));
  EXPECT_EQ(cache.scan().entries, 1u);
}

// Sets or unsets the variables for one test and restores them afterwards.
class env_guard {
 public:
  env_guard() {
    for (const char* name : names) {
      const char* v = std::getenv(name);
      saved_.push_back(v ? std::optional<std::string>(v) : std::nullopt);
      ::unsetenv(name);
    }
  }
  ~env_guard() {
    for (std::size_t i = 0; i < std::size(names); ++i) {
      if (saved_[i])
        ::setenv(names[i], saved_[i]->c_str(), 1);
      else
        ::unsetenv(names[i]);
    }
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }
  static void unset(const char* name) { ::unsetenv(name); }

 private:
  static constexpr const char* names[] = {"KILN_CACHE", "KILN_CACHE_DIR", "XDG_CACHE_HOME", "HOME"};
  std::vector<std::optional<std::string>> saved_;
};

TEST(DiskCacheConfig, Precedence) {
  env_guard env;
  EXPECT_EQ(disk_cache::configured_dir(), std::nullopt) << "no HOME";

  env.set("HOME", "/home/u");
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/home/u/.cache/kiln"));

  env.set("XDG_CACHE_HOME", "/xdg");
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/xdg/kiln"));
  env.set("XDG_CACHE_HOME", "relative/xdg");  // invalid per the XDG spec: ignored
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/home/u/.cache/kiln"));
  env.set("XDG_CACHE_HOME", "");
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/home/u/.cache/kiln"));
  env.set("XDG_CACHE_HOME", "/xdg");

  env.set("KILN_CACHE_DIR", "/custom/dir");
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/custom/dir"));

  env.set("KILN_CACHE", "1");
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/custom/dir"));
  for (const char* off : {"0", "off", "false", "OFF", "False"}) {
    env.set("KILN_CACHE", off);
    EXPECT_EQ(disk_cache::configured_dir(), std::nullopt) << off;
  }
  env.unset("KILN_CACHE");
  env.unset("KILN_CACHE_DIR");
  env.unset("XDG_CACHE_HOME");
  EXPECT_EQ(disk_cache::configured_dir(), fs::path("/home/u/.cache/kiln"));
}

// Two processes x several threads hammer a few shared keys and some private ones.
TEST_F(DiskCacheTest, ConcurrentProcessesAndThreads) {
  constexpr int shared_keys = 4, threads = 4, iterations = 300;
  constexpr int private_keys_per_thread = 3;
  // Payload depends only on the key index, so every writer of a key writes identical bytes.
  const auto payload_for = [](int k) {
    return random_bytes(static_cast<std::size_t>(k % 7) * 997 + (k % 3 == 0 ? 0 : 64 * 1024),
                        static_cast<std::uint64_t>(k) * 7919 + 1);
  };
  // Keys: [0, shared) shared; then per (process, thread) private ranges.
  const auto private_key = [&](int process, int thread, int j) {
    return shared_keys + ((process * threads + thread) * private_keys_per_thread) + j;
  };
  const int total_keys = private_key(2, 0, 0);

  // Returns the number of failures seen by this process.
  const auto hammer = [&](int process) {
    disk_cache cache(dir_);
    std::atomic<int> failures{0};
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(process * 100 + t));
        std::vector<bool> stored(static_cast<std::size_t>(total_keys), false);
        for (int i = 0; i < iterations; ++i) {
          const int k =
              (rng() % 2 == 0)
                  ? static_cast<int>(rng() % shared_keys)
                  : private_key(process, t, static_cast<int>(rng() % private_keys_per_thread));
          const cache_key key = key_n(k);
          if (rng() % 2 == 0) {
            if (!cache.store(key, payload_for(k))) ++failures;
            stored[static_cast<std::size_t>(k)] = true;
          }
          const auto got = cache.load(key);
          if (got && *got != payload_for(k)) ++failures;  // wrong bytes: never acceptable
          if (!got && stored[static_cast<std::size_t>(k)]) ++failures;  // nothing removes entries
        }
        // Finally store every key this thread touches, so that all keys exist at the end.
        for (int k = 0; k < shared_keys; ++k)
          if (!cache.store(key_n(k), payload_for(k))) ++failures;
        for (int j = 0; j < private_keys_per_thread; ++j)
          if (!cache.store(key_n(private_key(process, t, j)),
                           payload_for(private_key(process, t, j))))
            ++failures;
      });
    }
    for (auto& th : pool) th.join();
    return failures.load();
  };

  // Fork before any thread exists in this process.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(hammer(1) == 0 ? 0 : 1);  // no gtest assertions in the child
  const int parent_failures = hammer(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child saw failures";
  EXPECT_EQ(parent_failures, 0);

  disk_cache cache(dir_);
  for (int k = 0; k < total_keys; ++k) EXPECT_EQ(cache.load(key_n(k)), payload_for(k)) << k;
  EXPECT_EQ(cache.scan().entries, static_cast<std::size_t>(total_keys));
  std::size_t temps = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_))
    temps += e.path().extension() == ".tmp";
  EXPECT_EQ(temps, 0u) << "temporaries left behind";
}

}  // namespace
}  // namespace kiln::detail
