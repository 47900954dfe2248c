// Loading compiled kernels (shared objects, from memory through memfd) and launching them over
// the thread pool, work-groups split into contiguous chunks.
#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.hpp"
#include "codegen/target.hpp"

namespace kiln::cpu {
loaded_library::~loaded_library() {
  if (handle) dlclose(handle);
  if (fd >= 0) close(fd);
}
}  // namespace kiln::cpu

namespace kiln::cpu::abi {

kiln_status program_load(kiln_device_h, const void* data, uint64_t size, kiln_program_h* out) {
  int fd = memfd_create("kiln-kernel", MFD_CLOEXEC);
  if (fd < 0) return fail(KILN_ERR_BACKEND, std::string("memfd_create: ") + strerror(errno));
  const char* p = static_cast<const char*>(data);
  for (uint64_t left = size; left > 0;) {
    ssize_t w = write(fd, p, left);
    if (w <= 0) {
      close(fd);
      return fail(KILN_ERR_BACKEND, std::string("writing the kernel library: ") + strerror(errno));
    }
    p += w;
    left -= static_cast<uint64_t>(w);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    close(fd);
    const char* e = dlerror();
    return fail(KILN_ERR_BACKEND, std::string("cannot load the kernel library: ") + (e ? e : "?"));
  }
  std::shared_ptr<loaded_library> loaded;
  try {
    loaded = std::make_shared<loaded_library>(lib, fd);
  } catch (...) {
    dlclose(lib);
    close(fd);
    return fail(KILN_ERR_OUT_OF_MEMORY, "out of host memory loading a kernel library");
  }
  *out = new kiln_program_s;
  (*out)->library = std::move(loaded);
  return KILN_OK;
}

// The library closes when the last launch queued from it has run (loaded_library).
void program_unload(kiln_program_h p) { delete p; }

kiln_status kernel_get(kiln_program_h p, const char* name, kiln_kernel_h* out) {
  const std::string sym = codegen::cpu_entry_name(name);
  void* f = dlsym(p->library->handle, sym.c_str());
  if (!f) return fail(KILN_ERR_NOT_FOUND, std::string("no kernel entry '") + name + "'");
  auto k = std::make_unique<kiln_kernel_s>();
  k->entry = reinterpret_cast<kiln_kernel_s::entry_fn>(f);
  k->library = p->library;
  *out = k.get();
  std::lock_guard lock(p->mu);
  p->kernels.push_back(std::move(k));
  return KILN_OK;
}

kiln_status kernel_limits(kiln_kernel_h, uint32_t* max_size, uint32_t* preferred) {
  *max_size = 4096;
  *preferred = 1024;
  return KILN_OK;
}

kiln_status launch(kiln_kernel_h k, kiln_queue_h q, const kiln_launch_dims* dims,
                   const kiln_kernel_arg* args, uint32_t num_args) {
  // Same layout as kiln_cpu_launch in the C++ dialect's prelude.
  struct launch_block {
    uint32_t dims;
    uint32_t local[3];
    uint64_t groups[3];
  };
  struct task_state {
    launch_block L;
    std::vector<uint64_t> storage;  // argument bytes, 8-byte slots
    std::vector<void*> ptrs;
  };
  auto st = std::make_shared<task_state>();
  st->L.dims = dims->dims;
  for (int d = 0; d < 3; ++d) {
    st->L.local[d] = dims->local[d];
    st->L.groups[d] = dims->groups[d];
  }
  std::vector<size_t> offsets(num_args);
  size_t slots = 0;
  for (uint32_t i = 0; i < num_args; ++i) {
    offsets[i] = slots;
    slots += args[i].is_mem ? 1 : (args[i].size + 7) / 8;
  }
  st->storage.assign(slots, 0);
  st->ptrs.resize(num_args);
  for (uint32_t i = 0; i < num_args; ++i) {
    uint64_t* slot = &st->storage[offsets[i]];
    if (args[i].is_mem) {
      const auto* r = static_cast<const kiln_mem_ref*>(args[i].value);
      char* ptr = r->base ? static_cast<char*>(r->base) + r->offset : nullptr;
      std::memcpy(slot, &ptr, sizeof ptr);
    } else {
      std::memcpy(slot, args[i].value, args[i].size);
    }
    st->ptrs[i] = slot;
  }
  const uint64_t groups = dims->groups[0] * dims->groups[1] * dims->groups[2];
  auto entry = k->entry;
  // The task holds the library: the program may be unloaded before the task runs.
  q->q.push([st, groups, entry, library = k->library] {
    (void)library;
    thread_pool& tp = pool();
    // A few chunks per thread balance uneven work without much scheduling cost.
    const uint64_t chunks = std::min<uint64_t>(groups, uint64_t(tp.size()) * 4);
    tp.run(chunks, [&](uint64_t c) {
      const uint64_t g0 = groups * c / chunks, g1 = groups * (c + 1) / chunks;
      if (g0 < g1) entry(st->ptrs.data(), &st->L, g0, g1);
    });
  });
  return KILN_OK;
}

}  // namespace kiln::cpu::abi
