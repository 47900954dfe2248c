// Compiles C++-dialect kernel source into a shared object with the host compiler, spawned
// directly (posix_spawn, no shell) in a private temporary directory.
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "backends/cpu/cpu_backend.hpp"

extern char** environ;

namespace kiln::cpu {
namespace {

#ifndef KILN_BUILD_CXX
#define KILN_BUILD_CXX "c++"
#endif

bool executable(const std::string& p) { return !p.empty() && access(p.c_str(), X_OK) == 0; }

std::string find_on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return executable(name) ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(ss, dir, ':');)
    if (!dir.empty() && executable(dir + "/" + name)) return dir + "/" + name;
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Flags every kernel is built with: part of the compiler identity, hence of the cache key.
const std::vector<std::string>& base_flags() {
  static const std::vector<std::string> f = {"-std=c++17",         "-O3",   "-march=native",
                                             "-fno-math-errno",    "-fPIC", "-shared",
                                             "-fvisibility=hidden"};
  return f;
}

thread_local std::string compile_log;

}  // namespace

const std::string& compiler_path() {
  static const std::string path = [] {
    if (const char* env = std::getenv("KILN_CXX"); env && *env) return find_on_path(env);
    for (const char* c : {KILN_BUILD_CXX, "c++", "g++", "clang++"})
      if (auto p = find_on_path(c); !p.empty()) return p;
    return std::string();
  }();
  return path;
}

int run_process(const std::vector<std::string>& argv, const std::string& log_path) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0].c_str(), &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return -1;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

namespace abi {

// Identity for the cache key: the compiler's resolved path, size and modification time (an
// upgrade changes them) and the flags. Cheap: a stat, not a `--version` process per run.
kiln_status compiler_id(char* out, size_t size) {
  static const std::string id = [] {
    const std::string& cxx = compiler_path();
    if (cxx.empty()) return std::string();
    std::error_code ec;
    const std::string real = std::filesystem::canonical(cxx, ec).string();
    struct stat st {};
    if (ec || stat(real.c_str(), &st) != 0) return cxx;
    std::string r = real + " (" + std::to_string(st.st_size) + " bytes, mtime " +
                    std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + ")";
    for (const auto& f : base_flags()) r += " " + f;
    return r;
  }();
  if (id.empty())
    return fail(KILN_ERR_UNSUPPORTED,
                "no host C++ compiler found for CPU kernels: install g++ or set KILN_CXX");
  std::snprintf(out, size, "%s", id.c_str());
  return KILN_OK;
}

kiln_status compile(kiln_device_h, const char*, const char* source, const char* options,
                    kiln_blob* out, const char** log) {
  compile_log.clear();
  *log = compile_log.c_str();
  const std::string& cxx = compiler_path();
  if (cxx.empty())
    return fail(KILN_ERR_UNSUPPORTED,
                "no host C++ compiler found for CPU kernels: install g++ or set KILN_CXX");
  const char* tmp = std::getenv("TMPDIR");
  std::string dir_tmpl = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-build-XXXXXX";
  if (!mkdtemp(dir_tmpl.data()))
    return fail(KILN_ERR_BACKEND,
                "cannot create a build directory: " + std::string(strerror(errno)));
  const std::string dir = dir_tmpl, src = dir + "/kernel.cpp", so = dir + "/kernel.so",
                    log_path = dir + "/log.txt";
  struct cleanup {
    std::string d;
    ~cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(d, ec);
    }
  } rm{dir};
  {
    std::ofstream f(src, std::ios::binary);
    f << source;
    if (!f) return fail(KILN_ERR_BACKEND, "cannot write " + src);
  }
  std::vector<std::string> argv = {cxx};
  for (const auto& f : base_flags()) argv.push_back(f);
  std::istringstream user(options ? options : "");
  for (std::string opt; user >> opt;) argv.push_back(opt);
  argv.insert(argv.end(), {"-o", so, src});
  const int rc = run_process(argv, log_path);
  compile_log = read_file(log_path);
  *log = compile_log.c_str();
  if (rc == -1) return fail(KILN_ERR_BACKEND, "cannot run the host compiler " + cxx);
  if (rc != 0)
    return fail(KILN_ERR_COMPILE, "the host compiler failed (exit " + std::to_string(rc) + ")");
  std::string bytes = read_file(so);
  if (bytes.empty()) return fail(KILN_ERR_BACKEND, "the host compiler produced no output");
  out->data = std::malloc(bytes.size());
  if (!out->data) return fail(KILN_ERR_OUT_OF_MEMORY, "no memory for the compiled kernel");
  std::memcpy(out->data, bytes.data(), bytes.size());
  out->size = bytes.size();
  return KILN_OK;
}

void free_blob(kiln_blob blob) { std::free(blob.data); }

}  // namespace abi
}  // namespace kiln::cpu
