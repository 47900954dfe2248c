// Devices: every device of every loaded backend, their properties, and the choice of one.
//
//   for (const kiln::device& d : kiln::device::all())
//     std::cout << d.id() << ": " << d.info().name << "\n";
//   kiln::device gpu = kiln::device::get("cuda:0");  // or "cpu", "cuda" (first CUDA device)
//   kiln::device dev = kiln::device::best();         // KILN_DEVICE if set, else the best one
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

namespace detail {
struct device_impl;
}
class queue;

enum class device_type { cpu, gpu, accelerator };

enum class feature : std::uint32_t {
  barrier = 1u << 0,      // kiln_barrier() and KILN_LOCAL memory
  atomics = 1u << 1,      // 32- and 64-bit integer atomics
  fp64 = 1u << 2,         // double arithmetic
  cooperative = 1u << 3,  // cooperative (grid-wide sync) launch
  mapped_host = 1u << 4,  // kernels can read pinned host memory
  unified_address = 1u << 5,
  float_atomics = 1u << 6,  // kiln_atomic_add on float and double
  warp32 = 1u << 7,         // generated kernels may use 32-lane warp shuffles and ballots
};

struct device_info {
  std::string name, backend, arch, vendor, driver_version;
  device_type type = device_type::cpu;
  std::uint64_t global_mem_bytes = 0, max_alloc_bytes = 0, local_mem_bytes = 0;
  std::uint32_t compute_units = 0, simd_width = 0, max_work_group_size = 0, clock_mhz = 0;
  std::uint32_t max_work_item_sizes[3] = {0, 0, 0};
  std::uint64_t max_groups[3] = {0, 0, 0};
  std::uint32_t compute_major = 0, compute_minor = 0;  // CUDA compute capability
  std::uint32_t features = 0;
};

// A backend Kiln knows of, and whether it could be used here.
struct backend_status {
  std::string name;     // "cpu", "cuda", "opencl"
  bool loaded = false;  // plugin found and initialised
  std::string detail;   // why not, or what works ("NVRTC only: compile-only")
  std::string path;     // plugin file, empty for built-in backends
  int device_count = 0;
  std::vector<std::string> extensions;  // extension tables it offers, "name/version"
};

class device {
 public:
  static std::vector<device> all();
  // KILN_DEVICE if set, else the device expected to be fastest (GPUs first).
  static device best();
  // "cpu", "cuda", "cuda:1": throws kiln::not_found naming the known devices.
  static device get(std::string_view spec);
  // The host's own device: Kiln's built-in CPU backend (staging, host-side work).
  static device host();

  const device_info& info() const;
  std::string id() const;  // "cuda:0"
  const std::string& backend() const;
  int index() const;  // within its backend
  bool supports(feature f) const;
  // The queue synchronous operations on this device use.
  queue& default_queue() const;
  // Blocks until every queue of this device is idle.
  void synchronize() const;
  // Device memory Kiln's allocations hold now and at most since the last reset_peak_memory
  // (PyTorch's memory_allocated / max_memory_allocated). Memory is counted from allocation to
  // release of its last handle.
  struct memory_usage_t {
    std::uint64_t in_use = 0, peak = 0;
  };
  memory_usage_t memory_usage() const;
  void reset_peak_memory() const;  // peak = in use now

  // Whether the device failed for this process (a trapped CUDA kernel, an illegal address).
  // Every call on a lost device and its objects throws kiln::device_lost until reset().
  bool lost() const;
  // Makes a lost device usable again in this process (CUDA: primary-context reset). Every
  // buffer, queue, event, program and kernel of the device made before stays invalid and
  // throws kiln::device_lost when used; make new ones. Throws kiln::unsupported where the
  // backend cannot reset (OpenCL). Call it with no other thread using the device.
  void reset() const;

  bool operator==(const device& o) const noexcept { return impl_ == o.impl_; }

  explicit device(std::shared_ptr<detail::device_impl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::device_impl>& impl() const noexcept { return impl_; }

 private:
  std::shared_ptr<detail::device_impl> impl_;
};

std::vector<backend_status> backends();

// Whether a reads and writes b's memory directly (CUDA peer access, enabled by this call when
// the hardware allows; a device with itself: true). queue::copy between buffers of two devices
// works either way: peer to peer and asynchronous when this is true, else staged through
// pinned host memory and complete on return.
bool peer_access(const device& a, const device& b);

// Memory of a device as Kiln and the driver see it (kiln::memory_stats).
struct memory_statistics {
  std::uint64_t in_use = 0;  // bytes Kiln's live allocations hold (device::memory_usage)
  std::uint64_t peak = 0;    // most in use since the last reset_peak_memory
  std::uint64_t cached = 0;  // held by a pool for reuse, not in use (CUDA's, the CPU's)
  std::uint64_t free = 0;    // free device memory; UINT64_MAX where the driver cannot say
  std::uint64_t total = 0;   // device memory
};
memory_statistics memory_stats(const device& dev);

}  // namespace kiln
