// The kernel caches. In memory: a repeated compile returns the same program; a changed source
// or options compiles anew. On disk: entries written by one process are used by the next, and
// corrupt, truncated or concurrently written entries never yield a wrong program.
//
// The disk cache directory (KILN_CACHE_DIR) is read once per process, and fork() is unsafe once
// the parent's queue and pool threads exist, so cache scenarios run in child processes: this
// test binary re-executed (posix_spawn) with a hidden helper test selected and env vars set.
#include <fcntl.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "conformance/backends.hpp"

extern char** environ;

namespace conformance {
namespace {

namespace fs = std::filesystem;

// The result proves the program works, whether it came from the compiler or a cache.
constexpr const char* cache_source = R"(
#ifndef SCALE
#define SCALE 3u
#endif
KILN_KERNEL void cached(KILN_GLOBAL uint32_t* y, uint32_t k) {
  const uint64_t i = kiln_global_id(0);
  y[i] = (uint32_t)i * SCALE + k;
})";
// A changed body (same kernel name and parameters).
constexpr const char* changed_source = R"(
#ifndef SCALE
#define SCALE 3u
#endif
KILN_KERNEL void cached(KILN_GLOBAL uint32_t* y, uint32_t k) {
  const uint64_t i = kiln_global_id(0);
  y[i] = (uint32_t)i * SCALE + k + 1u;
})";

// Runs `cached` and checks y[i] == i * scale + k + extra for every element.
bool runs_correctly(const kiln::device& dev, const kiln::program& p, std::uint32_t scale,
                    std::uint32_t extra = 0) {
  const std::uint64_t n = 1001;
  kiln::buffer<std::uint32_t> y(dev, n);
  y.fill(poison<std::uint32_t>());
  p.get_kernel("cached").launch(dev.default_queue(), kiln::range(n), y, 17u);
  const auto got = y.to_vector();
  for (std::uint64_t i = 0; i < n; ++i)
    if (got[i] != std::uint32_t(i) * scale + 17u + extra) return false;
  return true;
}

// --- the child side ------------------------------------------------------------------------

// Hidden helper, run only in a child started by run_children(): performs the scenario named by
// KILN_CONFORMANCE_CHILD and writes "step.key=value" lines to KILN_CONFORMANCE_CHILD_OUT.
TEST(DISABLED_CacheChild, Run) {
  const char* scenario = std::getenv("KILN_CONFORMANCE_CHILD");
  const char* out_path = std::getenv("KILN_CONFORMANCE_CHILD_OUT");
  const char* dev_id = std::getenv("KILN_CONFORMANCE_CHILD_DEVICE");
  if (!scenario || !out_path || !dev_id) GTEST_SKIP() << "a helper of the cache tests, not a test";
  const kiln::device dev = kiln::device::get(dev_id);
  std::ofstream out(out_path);
  auto report = [&](const std::string& step, bool ok) {
    const kiln::kernel_cache_stats s = kiln::cache_stats();
    out << step << ".compiles=" << s.compiles << "\n" << step << ".disk_hits=" << s.disk_hits
        << "\n" << step << ".memory_hits=" << s.memory_hits << "\n" << step
        << ".disk_rejects=" << s.disk_rejects << "\n" << step << ".ok=" << ok << "\n";
  };
  const std::string which = scenario;
  if (which == "compile_run") {
    report("run", runs_correctly(dev, kiln::program::compile(dev, cache_source), 3));
  } else if (which == "memory") {
    report("first", runs_correctly(dev, kiln::program::compile(dev, cache_source), 3));
    report("same", runs_correctly(dev, kiln::program::compile(dev, std::string(cache_source)), 3));
    report("options", runs_correctly(dev, kiln::program::compile(dev, cache_source, "-DSCALE=5u"), 5));
    report("source", runs_correctly(dev, kiln::program::compile(dev, changed_source), 3, 1));
    report("source_again", runs_correctly(dev, kiln::program::compile(dev, changed_source), 3, 1));
  } else {
    FAIL() << "unknown scenario " << which;
  }
  out << "done=1\n";
}

// --- the parent side -----------------------------------------------------------------------

struct child {
  pid_t pid = -1;
  fs::path out, log;
  int status = -1;
  std::map<std::string, std::uint64_t> values;
  std::string log_text;
  std::uint64_t operator[](const std::string& key) const {
    auto it = values.find(key);
    return it == values.end() ? ~std::uint64_t(0) : it->second;
  }
};

class CacheTest : public DeviceTest {
 protected:
  void SetUp() override {
    DeviceTest::SetUp();
    const char* tmp = std::getenv("TMPDIR");
    std::string tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-conformance-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr) << "mkdtemp " << tmpl;
    root_ = tmpl;
    cache_dir_ = root_ / "cache";  // absent: the first store creates it
    compile_everywhere(cache_source);
    compile_everywhere(cache_source, "-DSCALE=5u");
    compile_everywhere(changed_source);
  }
  void TearDown() override {
    std::error_code ec;
    if (!root_.empty()) fs::remove_all(root_, ec);
  }

  // Starts `count` children of one scenario at once, waits for all, parses their reports.
  std::vector<child> run_children(const std::string& scenario, int count = 1) {
    std::vector<child> kids(static_cast<std::size_t>(count));
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      const std::string kv = *e;
      if (!kv.starts_with("KILN_CACHE") && !kv.starts_with("KILN_CONFORMANCE_CHILD") &&
          !kv.starts_with("GTEST_"))
        env.push_back(kv);
    }
    env.push_back("KILN_CACHE_DIR=" + cache_dir_.string());
    env.push_back("KILN_CONFORMANCE_CHILD=" + scenario);
    env.push_back("KILN_CONFORMANCE_CHILD_DEVICE=" + dev().id());
    const std::string exe = fs::read_symlink("/proc/self/exe").string();
    for (std::size_t k = 0; k < kids.size(); ++k) {
      child& c = kids[k];
      c.out = root_ / (scenario + std::to_string(serial_) + "." + std::to_string(k) + ".out");
      c.log = root_ / (scenario + std::to_string(serial_) + "." + std::to_string(k) + ".log");
      std::vector<std::string> args = {exe, "--gtest_filter=DISABLED_CacheChild.Run",
                                       "--gtest_also_run_disabled_tests"};
      std::vector<std::string> child_env = env;
      child_env.push_back("KILN_CONFORMANCE_CHILD_OUT=" + c.out.string());
      std::vector<char*> argv, envp;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      for (auto& e : child_env) envp.push_back(e.data());
      envp.push_back(nullptr);
      posix_spawn_file_actions_t fa;
      posix_spawn_file_actions_init(&fa);
      posix_spawn_file_actions_addopen(&fa, 1, c.log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&fa, 1, 2);
      const int rc = posix_spawn(&c.pid, exe.c_str(), &fa, nullptr, argv.data(), envp.data());
      posix_spawn_file_actions_destroy(&fa);
      EXPECT_EQ(rc, 0) << "posix_spawn " << exe;
      if (rc != 0) c.pid = -1;
    }
    ++serial_;
    for (child& c : kids) {
      if (c.pid > 0)
        while (waitpid(c.pid, &c.status, 0) < 0 && errno == EINTR) {}
      std::ifstream in(c.out);
      for (std::string line; std::getline(in, line);)
        if (auto eq = line.find('='); eq != std::string::npos)
          c.values[line.substr(0, eq)] = std::stoull(line.substr(eq + 1));
      std::ifstream log(c.log);
      c.log_text.assign(std::istreambuf_iterator<char>(log), {});
    }
    return kids;
  }

  child run_child(const std::string& scenario) { return run_children(scenario, 1)[0]; }

  // Asserts the child exited cleanly and its kernel gave the right results.
  static ::testing::AssertionResult succeeded(const child& c, const std::string& step) {
    if (!WIFEXITED(c.status) || WEXITSTATUS(c.status) != 0 || c["done"] != 1 || c[step + ".ok"] != 1)
      return ::testing::AssertionFailure() << "child failed (status " << c.status << ", ok "
                                           << c[step + ".ok"] << "); its output:\n" << c.log_text;
    return ::testing::AssertionSuccess();
  }

  std::vector<fs::path> files_named(std::string_view ext) const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(cache_dir_, ec), end; !ec && it != end; it.increment(ec))
      if (it->is_regular_file() && it->path().string().ends_with(ext)) out.push_back(it->path());
    return out;
  }

  // Fills the cache with one entry for cache_source, checking the child compiled it.
  void populate() {
    const child c = run_child("compile_run");
    ASSERT_TRUE(succeeded(c, "run"));
    EXPECT_EQ(c["run.compiles"], 1u);
    EXPECT_EQ(c["run.disk_hits"], 0u);
    ASSERT_EQ(files_named(".kbin").size(), 1u);
  }

  // A child that must recompile (the entry is unusable) and still compute the right result.
  void expect_recompile(const char* why) {
    SCOPED_TRACE(why);
    const child c = run_child("compile_run");
    EXPECT_TRUE(succeeded(c, "run"));
    EXPECT_EQ(c["run.compiles"], 1u);
    EXPECT_EQ(c["run.disk_hits"], 0u);
  }

  void expect_disk_hit(const char* why) {
    SCOPED_TRACE(why);
    const child c = run_child("compile_run");
    EXPECT_TRUE(succeeded(c, "run"));
    EXPECT_EQ(c["run.disk_hits"], 1u);
    EXPECT_EQ(c["run.compiles"], 0u);
  }

  fs::path root_, cache_dir_;
  int serial_ = 0;
};
KILN_INSTANTIATE_PER_DEVICE(CacheTest);

TEST_P(CacheTest, MemoryHitReturnsTheSameProgram) {
  const kiln::program first = kiln::program::compile(dev(), cache_source);
  const kiln::kernel_cache_stats before = kiln::cache_stats();
  const std::string copy(cache_source);  // equal text in other storage: still a hit
  const kiln::program second = kiln::program::compile(dev(), copy);
  const kiln::kernel_cache_stats after = kiln::cache_stats();
  EXPECT_EQ(after.memory_hits, before.memory_hits + 1);
  EXPECT_EQ(after.compiles, before.compiles);
  EXPECT_EQ(after.disk_hits, before.disk_hits);
  // get_device() returns a reference into the program object: one object, one address.
  EXPECT_EQ(&first.get_device(), &second.get_device()) << "a memory hit must return the same program";
  EXPECT_TRUE(runs_correctly(dev(), first, 3));
  EXPECT_TRUE(runs_correctly(dev(), second, 3));
}

TEST_P(CacheTest, ChangedSourceOrOptionsCompilesAnew) {
  const child c = run_child("memory");
  ASSERT_TRUE(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && c["done"] == 1) << c.log_text;
  EXPECT_EQ(c["first.compiles"], 1u);
  EXPECT_EQ(c["same.compiles"], 1u);
  EXPECT_EQ(c["same.memory_hits"], c["first.memory_hits"] + 1);
  EXPECT_EQ(c["options.compiles"], 2u) << "other options must compile anew";
  EXPECT_EQ(c["source.compiles"], 3u) << "a changed source must compile anew";
  EXPECT_EQ(c["source_again.compiles"], 3u);
  EXPECT_EQ(c["source_again.memory_hits"], c["same.memory_hits"] + 1);
  for (const char* step : {"first", "same", "options", "source", "source_again"})
    EXPECT_EQ(c[std::string(step) + ".ok"], 1u) << step << " gave wrong results";
}

TEST_P(CacheTest, DiskCacheHitInSecondProcess) {
  populate();
  expect_disk_hit("second process");
}

TEST_P(CacheTest, CorruptDiskEntryIsRecompiled) {
  populate();
  for (std::uint64_t where : {0u, 1u}) {  // a payload byte, then a header byte
    for (const fs::path& p : files_named(".kbin")) {
      std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
      const std::uint64_t size = fs::file_size(p);
      const std::uint64_t off = where == 0 ? size / 2 : 20;
      f.seekg(static_cast<std::streamoff>(off));
      const char byte = static_cast<char>(f.get() ^ 0x40);
      f.seekp(static_cast<std::streamoff>(off));
      f.put(byte);
    }
    expect_recompile(where == 0 ? "payload byte flipped" : "header byte flipped");
  }
  expect_disk_hit("the recompiled entry replaced the corrupt one");
}

TEST_P(CacheTest, TruncatedDiskEntryIsRecompiled) {
  populate();
  for (const bool keep_header : {true, false}) {
    for (const fs::path& p : files_named(".kbin"))
      fs::resize_file(p, keep_header ? fs::file_size(p) / 2 : 10);
    expect_recompile(keep_header ? "truncated to half" : "truncated inside the header");
  }
  expect_disk_hit("the recompiled entry replaced the truncated one");
}

TEST_P(CacheTest, ConcurrentFirstCompilesBothSucceed) {
  const std::vector<child> kids = run_children("compile_run", 2);
  for (const child& c : kids) {
    EXPECT_TRUE(succeeded(c, "run"));
    EXPECT_EQ(c["run.compiles"] + c["run.disk_hits"], 1u);
  }
  EXPECT_EQ(files_named(".kbin").size(), 1u);
  EXPECT_TRUE(files_named(".tmp").empty()) << "a writer left its temporary file behind";
  expect_disk_hit("after the race");
}

}  // namespace
}  // namespace conformance
