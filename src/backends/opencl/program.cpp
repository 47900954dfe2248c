// clBuildProgram from OpenCL C source, program binaries (CL_PROGRAM_BINARIES) for the disk
// cache, kernel lookup and launch with the device's limits checked first.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "opencl_backend.hpp"

namespace kiln_opencl {

namespace {

constexpr uint32_t kMaxArgs = 256;

thread_local std::string t_log;  // valid until the next compile on this thread

// The program compile() just built, kept so that the program_load() of its binary that
// follows (the core's compile-then-load) does not build it a second time.
struct LastBuilt {
  kiln_device_s* dev = nullptr;
  cl_program program = nullptr;
  std::vector<unsigned char> binary;
};
thread_local LastBuilt t_last;

void drop_last() {
  if (t_last.program) g_cl.clReleaseProgram(t_last.program);
  t_last = LastBuilt{};
}

std::string build_log(cl_program p, cl_device_id d) {
  size_t n = 0;
  if (g_cl.clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, 0, nullptr, &n) != CL_SUCCESS || n < 2)
    return {};
  std::string s(n, '\0');
  if (g_cl.clGetProgramBuildInfo(p, d, CL_PROGRAM_BUILD_LOG, n, s.data(), nullptr) != CL_SUCCESS)
    return {};
  s.resize(std::strlen(s.c_str()));
  return s;
}

// NVIDIA's compiler ignores #line and cites "<kernel>:LINE:COL" of the rendered source; this
// maps those citations back through the source's #line directives ("kernel.kiln:3:10"), so
// the core can show the user's offending lines.
std::string remap_log(const std::string& log, const char* source) {
  if (log.find("<kernel>:") == std::string::npos) return log;
  std::vector<std::pair<int, std::string>> where(1);  // rendered line -> (line, file)
  int line = 1;
  std::string file = "<kernel>";
  for (const char* p = source; *p;) {
    const char* e = std::strchr(p, '\n');
    const size_t len = e ? static_cast<size_t>(e - p) : std::strlen(p);
    where.emplace_back(line, file);
    int n = 0;
    char name[256];
    if (len > 6 && std::strncmp(p, "#line ", 6) == 0 &&
        std::sscanf(p, "#line %d \"%255[^\"]\"", &n, name) == 2) {
      line = n;
      file = name;
    } else {
      ++line;
    }
    p += len + (e ? 1 : 0);
  }
  std::string out;
  size_t at = 0;
  for (size_t p = log.find("<kernel>:"); p != std::string::npos; p = log.find("<kernel>:", at)) {
    out.append(log, at, p - at);
    size_t q = p + 9;
    int n = 0;
    while (q < log.size() && std::isdigit(static_cast<unsigned char>(log[q])))
      n = n * 10 + (log[q++] - '0');
    if (n > 0 && static_cast<size_t>(n) < where.size())
      out += where[static_cast<size_t>(n)].second + ":" +
             std::to_string(where[static_cast<size_t>(n)].first);
    else
      out.append(log, p, q - p);
    at = q;
  }
  out.append(log, at, std::string::npos);
  return out;
}

std::string build_options(const kiln_device_s* d, const char* user) {
  std::string o;
  // Division and sqrt rounded as IEEE requires, as NVRTC and the host compiler do by default.
  if (d->exact_div_sqrt) o += "-cl-fp32-correctly-rounded-divide-sqrt ";
  if (d->nvidia) o += "-DKILN_OPENCL_NVIDIA=1 ";
  o += "-w ";  // Kiln surfaces no warnings on any backend; PoCL would print them to stderr
  if (user) o += user;
  return o;
}

kiln_status bad_launch(const char* fmt, unsigned long long a = 0, unsigned long long b = 0,
                       unsigned long long c = 0) __attribute__((cold, format(printf, 1, 0)));
kiln_status bad_launch(const char* fmt, unsigned long long a, unsigned long long b,
                       unsigned long long c) {
  char msg[512];
  std::snprintf(msg, sizeof msg, fmt, a, b, c);
  return set_error(KILN_ERR_INVALID_ARGUMENT, "launch: %s", msg);
}

}  // namespace

kiln_status compile(kiln_device_h dev, const char*, const char* source, const char* options,
                    kiln_blob* out, const char** log) {
  t_log.clear();
  if (log) *log = t_log.c_str();
  if (!source || !out) return set_error(KILN_ERR_INVALID_ARGUMENT, "compile: NULL source or out");
  *out = kiln_blob{nullptr, 0};
  if (!dev)
    return set_error(KILN_ERR_UNSUPPORTED,
                     "compile: OpenCL builds for a device; compile-only without one is not "
                     "supported");
  drop_last();
  cl_int e = CL_SUCCESS;
  const std::string opts = build_options(dev, options);
  // With Kiln's local-memory probes first (local_probe.cpp); if that fails to build, the plain
  // source decides (and gives the log of the user's own error, if any).
  cl_program p = nullptr;
  const std::string probed = with_local_probes(source);
  if (!probed.empty()) {
    const char* text = probed.c_str();
    p = g_cl.clCreateProgramWithSource(dev->ctx, 1, &text, nullptr, &e);
    if (e == CL_SUCCESS) e = g_cl.clBuildProgram(p, 1, &dev->id, opts.c_str(), nullptr, nullptr);
    if (e != CL_SUCCESS && p) {
      g_cl.clReleaseProgram(p);
      p = nullptr;
    }
  }
  if (!p) {
    p = g_cl.clCreateProgramWithSource(dev->ctx, 1, &source, nullptr, &e);
    if (e != CL_SUCCESS) return cl_fail(e, "clCreateProgramWithSource");
    e = g_cl.clBuildProgram(p, 1, &dev->id, opts.c_str(), nullptr, nullptr);
  }
  if (e != CL_SUCCESS) {
    t_log = remap_log(build_log(p, dev->id), source);
    if (log) *log = t_log.c_str();
    g_cl.clReleaseProgram(p);
    if (e == CL_BUILD_PROGRAM_FAILURE || e == CL_INVALID_BUILD_OPTIONS)
      return set_error(KILN_ERR_COMPILE, "clBuildProgram (%s, %s): %s\n%.1500s", dev->info.name,
                       dev->platform_name.c_str(), cl_error_name(e), t_log.c_str());
    return cl_fail(e, "clBuildProgram", t_log.c_str());
  }
  size_t size = 0;
  e = g_cl.clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, nullptr);
  if (e != CL_SUCCESS || size == 0) {
    g_cl.clReleaseProgram(p);
    return e != CL_SUCCESS ? cl_fail(e, "clGetProgramInfo(BINARY_SIZES)")
                           : set_error(KILN_ERR_BACKEND, "compile: the driver gave no binary");
  }
  auto* data = static_cast<unsigned char*>(std::malloc(size));
  if (!data) {
    g_cl.clReleaseProgram(p);
    return set_error(KILN_ERR_OUT_OF_MEMORY, "compile: out of host memory");
  }
  e = g_cl.clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof data, &data, nullptr);
  if (e != CL_SUCCESS) {
    std::free(data);
    g_cl.clReleaseProgram(p);
    return cl_fail(e, "clGetProgramInfo(BINARIES)");
  }
  t_last.dev = dev;
  t_last.program = p;
  t_last.binary.assign(data, data + size);
  *out = kiln_blob{data, size};
  return KILN_OK;
}

void free_blob(kiln_blob blob) { std::free(blob.data); }

kiln_status program_load(kiln_device_h dev, const void* data, uint64_t size, kiln_program_h* out) {
  if (!dev || !data || !out || size == 0)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "program_load: NULL or empty argument");
  cl_program p = nullptr;
  if (t_last.program && t_last.dev == dev && t_last.binary.size() == size &&
      std::memcmp(t_last.binary.data(), data, size) == 0) {
    p = t_last.program;
    t_last.program = nullptr;
    drop_last();
  } else {
    cl_int status = CL_SUCCESS, e = CL_SUCCESS;
    const size_t n = size;
    const auto* bytes = static_cast<const unsigned char*>(data);
    p = g_cl.clCreateProgramWithBinary(dev->ctx, 1, &dev->id, &n, &bytes, &status, &e);
    if (e != CL_SUCCESS || status != CL_SUCCESS)
      return cl_fail(e != CL_SUCCESS ? e : status, "clCreateProgramWithBinary");
    const std::string opts = build_options(dev, nullptr);
    e = g_cl.clBuildProgram(p, 1, &dev->id, opts.c_str(), nullptr, nullptr);
    if (e != CL_SUCCESS) {
      const std::string l = build_log(p, dev->id);
      g_cl.clReleaseProgram(p);
      return cl_fail(e, "clBuildProgram(binary)", l.c_str());
    }
  }
  auto* prog = new kiln_program_s;
  prog->dev = dev;
  prog->program = p;
  *out = prog;
  return KILN_OK;
}

void program_unload(kiln_program_h program) {
  if (!program) return;
  for (auto& k : program->kernels) g_cl.clReleaseKernel(k->k);
  g_cl.clReleaseProgram(program->program);
  delete program;
}

kiln_status kernel_get(kiln_program_h program, const char* name, kiln_kernel_h* out) {
  if (!program || !name || !out)
    return set_error(KILN_ERR_INVALID_ARGUMENT, "kernel_get: NULL argument");
  std::lock_guard<std::mutex> lock(program->mu);
  for (const auto& k : program->kernels) {
    if (k->name == name) {
      *out = k.get();
      return KILN_OK;
    }
  }
  cl_int e = CL_SUCCESS;
  cl_kernel kernel = g_cl.clCreateKernel(program->program, name, &e);
  if (e == CL_INVALID_KERNEL_NAME)
    return set_error(KILN_ERR_NOT_FOUND, "kernel_get: no kernel '%s' in the program", name);
  if (e != CL_SUCCESS) return cl_fail(e, "clCreateKernel", name);
  const cl_device_id d = program->dev->id;
  size_t wg = 0, multiple = 0;
  cl_ulong local = 0;
  e = g_cl.clGetKernelWorkGroupInfo(kernel, d, CL_KERNEL_WORK_GROUP_SIZE, sizeof wg, &wg, nullptr);
  if (e == CL_SUCCESS)
    e = g_cl.clGetKernelWorkGroupInfo(kernel, d, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE,
                                      sizeof multiple, &multiple, nullptr);
  if (e == CL_SUCCESS)
    e = g_cl.clGetKernelWorkGroupInfo(kernel, d, CL_KERNEL_LOCAL_MEM_SIZE, sizeof local, &local,
                                      nullptr);
  if (e != CL_SUCCESS) {
    g_cl.clReleaseKernel(kernel);
    return cl_fail(e, "clGetKernelWorkGroupInfo", name);
  }
  // A driver that reports no local memory may not count it (PoCL 5): Kiln counts it then.
  bool counted = false;
  if (local == 0 || local_probe_forced()) {
    uint64_t mine = 0;
    const kiln_status st = probe_local_bytes(program->dev, program->program, name, &mine);
    if (st != KILN_OK) {
      g_cl.clReleaseKernel(kernel);
      return st;
    }
    if (mine > 0 || local_probe_forced()) {
      local = mine;
      counted = true;
    }
  }
  auto k = std::make_unique<kiln_kernel_s>();
  k->dev = program->dev;
  k->k = kernel;
  k->max_threads =
      static_cast<uint32_t>(std::min<size_t>(wg, program->dev->info.max_work_group_size));
  // A multiple of the SIMD width near 256 (the GPU default the core caps at anyway).
  const size_t m = multiple ? multiple : 1;
  k->preferred = static_cast<uint32_t>(std::max<size_t>(m, std::min<size_t>(256, wg) / m * m));
  k->local_bytes = local;
  k->local_counted = counted;
  k->name = name;
  *out = k.get();
  program->kernels.push_back(std::move(k));
  return KILN_OK;
}

kiln_status kernel_limits(kiln_kernel_h kernel, uint32_t* max_size, uint32_t* preferred) {
  if (!kernel) return set_error(KILN_ERR_INVALID_ARGUMENT, "kernel_limits: kernel is NULL");
  if (max_size) *max_size = kernel->max_threads;
  if (preferred) *preferred = kernel->preferred;
  return KILN_OK;
}

kiln_status launch(kiln_kernel_h kernel, kiln_queue_h queue, const kiln_launch_dims* dims,
                   const kiln_kernel_arg* args, uint32_t num_args) {
  if (!kernel || !queue || !dims) [[unlikely]]
    return bad_launch("NULL kernel, queue or dims");
  if (kernel->dev != queue->dev) [[unlikely]]
    return bad_launch("kernel and queue belong to different devices");
  if (num_args > kMaxArgs || (num_args && !args)) [[unlikely]]
    return bad_launch("%llu arguments (at most %llu, and args must not be NULL)", num_args,
                      kMaxArgs);
  const uint32_t nd = dims->dims;
  if (nd < 1 || nd > 3) [[unlikely]]
    return bad_launch("dims is %llu, must be 1, 2 or 3", nd);
  if (dims->dynamic_local_bytes) [[unlikely]]
    return bad_launch("dynamic local memory (%llu bytes) is not supported by the OpenCL backend",
                      dims->dynamic_local_bytes);
  const kiln_device_info& info = queue->dev->info;
  if (kernel->local_bytes > info.local_mem_bytes) [[unlikely]]
    return bad_launch(kernel->local_counted
                          ? "kernel uses %llu bytes of local memory (counted by Kiln), the "
                            "device has %llu (CL_DEVICE_LOCAL_MEM_SIZE)"
                          : "kernel uses %llu bytes of local memory (CL_KERNEL_LOCAL_MEM_SIZE), "
                            "the device has %llu (CL_DEVICE_LOCAL_MEM_SIZE)",
                      kernel->local_bytes, info.local_mem_bytes);
  size_t global[3] = {1, 1, 1}, local[3] = {1, 1, 1};
  uint64_t threads = 1;
  for (uint32_t i = 0; i < nd; ++i) {
    if (dims->groups[i] < 1 || dims->groups[i] > info.max_groups[i]) [[unlikely]]
      return bad_launch("groups[%llu] = %llu outside 1..%llu", i, dims->groups[i],
                        info.max_groups[i]);
    if (dims->local[i] < 1 || dims->local[i] > info.max_work_item_sizes[i]) [[unlikely]]
      return bad_launch("local[%llu] = %llu outside 1..%llu (CL_DEVICE_MAX_WORK_ITEM_SIZES)", i,
                        dims->local[i], info.max_work_item_sizes[i]);
    local[i] = dims->local[i];
    global[i] = static_cast<size_t>(dims->groups[i] * dims->local[i]);
    threads *= dims->local[i];
  }
  if (threads > kernel->max_threads) [[unlikely]]
    return bad_launch(
        "work-group of %llu items exceeds this kernel's limit of %llu "
        "(CL_KERNEL_WORK_GROUP_SIZE)",
        threads, kernel->max_threads);

  arm_exit_guard();
  std::lock_guard<std::mutex> lock(kernel->mu);
  cl_uint at = 0;
  for (uint32_t i = 0; i < num_args; ++i) {
    if (!args[i].value) [[unlikely]]
      return bad_launch("argument %llu has a NULL value", i);
    cl_int e;
    if (args[i].is_mem) {
      const auto* m = static_cast<const kiln_mem_ref*>(args[i].value);
      const cl_mem mem = static_cast<cl_mem>(m->base);
      const cl_ulong offset = m->offset;
      e = g_cl.clSetKernelArg(kernel->k, at++, sizeof mem, &mem);
      if (e == CL_SUCCESS) e = g_cl.clSetKernelArg(kernel->k, at++, sizeof offset, &offset);
    } else {
      e = g_cl.clSetKernelArg(kernel->k, at++, args[i].size, args[i].value);
    }
    if (e != CL_SUCCESS) [[unlikely]] {
      char what[64];
      std::snprintf(what, sizeof what, "argument %u of kernel %s", i, kernel->name.c_str());
      return cl_fail(e, "clSetKernelArg", what);
    }
  }
  cl_int e = g_cl.clEnqueueNDRangeKernel(queue->q, kernel->k, nd, nullptr, global, local, 0,
                                         nullptr, nullptr);
  if (e != CL_SUCCESS) [[unlikely]]
    return cl_fail(e, "clEnqueueNDRangeKernel", kernel->name.c_str());
  return KILN_OK;
}

}  // namespace kiln_opencl
