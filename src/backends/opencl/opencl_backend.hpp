// Internal declarations shared by the OpenCL plugin's translation units.
//
// Devices of every platform are listed together ("opencl:0", "opencl:1", ...). A device gets
// its own context when first opened. Memory is a cl_mem per allocation; buffer views travel
// to kernels as (cl_mem, byte offset) pairs, which the OpenCL dialect's kernel prologue adds
// back together. Queues are in-order with profiling on; recording a kiln event enqueues a
// marker, whose end time is the event's time stamp.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend_abi.h"
#include "driver_api.hpp"

struct kiln_device_s {
  int index = 0;
  cl_platform_id platform = nullptr;
  cl_device_id id = nullptr;
  kiln_device_info info{};
  std::string platform_name;
  bool nvidia = false;          // NVIDIA's driver: inline PTX for the device-wide fence
  bool exact_div_sqrt = false;  // -cl-fp32-correctly-rounded-divide-sqrt is available
  // Valid while refs > 0 (guarded by State::mu).
  int refs = 0;
  cl_context ctx = nullptr;
  cl_command_queue internal = nullptr;  // for NULL-queue frees and waits
  // Kiln's own fill kernels (NVIDIA: see memory.cpp), built on first use.
  std::mutex fill_mu;
  cl_program fill_program = nullptr;
  cl_kernel fill_kernels[4] = {};  // 1, 2, 4 and 8-byte patterns
  // Non-blocking reads into host memory still queued: [lo, hi) and their events (memory.cpp).
  struct host_read {
    uintptr_t lo, hi;
    cl_event ev;
  };
  std::mutex reads_mu;
  std::vector<host_read> host_reads;
};

struct kiln_queue_s {
  kiln_device_s* dev;
  cl_command_queue q;
};

struct kiln_event_s {
  kiln_device_s* dev;
  cl_event ev = nullptr;  // the marker of the latest record; null: never recorded
};

struct kiln_kernel_s {
  kiln_device_s* dev;
  cl_kernel k;
  std::mutex mu;  // clSetKernelArg + enqueue must not interleave between threads
  uint32_t max_threads;
  uint32_t preferred;
  uint64_t local_bytes;        // CL_KERNEL_LOCAL_MEM_SIZE, or Kiln's count (local_probe.cpp)
  bool local_counted = false;  // local_bytes came from Kiln's probe, not the driver
  std::string name;
};

struct kiln_program_s {
  kiln_device_s* dev;
  cl_program program;
  std::mutex mu;
  std::vector<std::unique_ptr<kiln_kernel_s>> kernels;
};

namespace kiln_opencl {

struct State {
  std::mutex mu;
  bool initialized = false;
  kiln_status init_status = KILN_ERR_UNSUPPORTED;
  std::string availability = "not initialised";
  std::string compiler_id;  // every platform's name and version
  std::vector<std::unique_ptr<kiln_device_s>> devices;
  std::vector<kiln_queue_s*> queues;  // live queues, finished at exit (see device.cpp)
  bool at_exit_registered = false;
};

State& state();

kiln_status init();
void shutdown();
// Makes this thread's end finish every queue when it is the main thread's, i.e. exit()
// (device.cpp): called by each thread that enqueues work.
void arm_exit_guard() noexcept;
const char* availability() noexcept;
kiln_status compiler_id(char* out, size_t out_size);
int device_count();
kiln_status device_info(int index, kiln_device_info* out);
kiln_status device_open(int index, kiln_device_h* out);
void device_close(kiln_device_h dev);

kiln_status mem_alloc(kiln_device_h dev, uint64_t bytes, kiln_queue_h queue, void** out);
// Releases the events of the device's queued host reads (memory.cpp), at close.
void forget_host_reads(kiln_device_s* d) noexcept;
void mem_free(kiln_device_h dev, void* mem, kiln_queue_h queue);
kiln_status host_alloc(kiln_device_h dev, uint64_t bytes, void** out);
void host_free(kiln_device_h dev, void* ptr);
kiln_status mem_address(kiln_device_h dev, kiln_mem_ref mem, void** out);
kiln_status copy_h2d(kiln_queue_h queue, kiln_mem_ref dst, const void* src, uint64_t bytes);
kiln_status copy_d2h(kiln_queue_h queue, void* dst, kiln_mem_ref src, uint64_t bytes);
kiln_status copy_d2d(kiln_queue_h queue, kiln_mem_ref dst, kiln_mem_ref src, uint64_t bytes);
kiln_status fill(kiln_queue_h queue, kiln_mem_ref dst, const void* pattern, uint32_t pattern_size,
                 uint64_t count);

kiln_status queue_create(kiln_device_h dev, kiln_queue_h* out);
void queue_destroy(kiln_queue_h queue);
kiln_status queue_finish(kiln_queue_h queue);
kiln_status queue_native(kiln_queue_h queue, void** out);
kiln_status queue_idle(kiln_queue_h queue);
kiln_status queue_wait_event(kiln_queue_h queue, kiln_event_h event);
kiln_status event_create(kiln_device_h dev, kiln_event_h* out);
void event_destroy(kiln_event_h event);
kiln_status event_record(kiln_event_h event, kiln_queue_h queue);
kiln_status event_wait(kiln_event_h event);
kiln_status event_query(kiln_event_h event);
kiln_status event_elapsed_ms(kiln_event_h start, kiln_event_h end, float* out_ms);

kiln_status compile(kiln_device_h dev, const char* arch, const char* source, const char* options,
                    kiln_blob* out, const char** log);
void free_blob(kiln_blob blob);
kiln_status program_load(kiln_device_h dev, const void* data, uint64_t size, kiln_program_h* out);
void program_unload(kiln_program_h program);
kiln_status kernel_get(kiln_program_h program, const char* name, kiln_kernel_h* out);
// local_probe.cpp: source plus one probe kernel per kernel with __local arrays (empty when
// none); the probe's count for kernel `name` (0 without a probe); the KILN_OPENCL_LOCAL_PROBE
// test hook.
std::string with_local_probes(const std::string& source);
kiln_status probe_local_bytes(kiln_device_s* dev, cl_program program, const std::string& name,
                              uint64_t* out);
bool local_probe_forced();
kiln_status kernel_limits(kiln_kernel_h kernel, uint32_t* max_size, uint32_t* preferred);
kiln_status launch(kiln_kernel_h kernel, kiln_queue_h queue, const kiln_launch_dims* dims,
                   const kiln_kernel_arg* args, uint32_t num_args);

}  // namespace kiln_opencl
