// Host side of a ring kernel: the shared memory it set up, the launched kernel, and the host
// ends of the first and last queues.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kiln/buffer.hpp"
#include "kiln/kernel.hpp"
#include "kiln/queue.hpp"
#include "kiln/ring.hpp"
#include "ring/ring_source.hpp"

namespace kiln::ring_detail {

#define KILN_RING_TEXT(...) __VA_ARGS__
using std::uint64_t;
#include "ring/ring_protocol.inc"
#undef KILN_RING_TEXT

using steady = std::chrono::steady_clock;

// Page-locked host memory the device reads and writes (mapped; unified addresses).
struct mapped_block {
  device dev{nullptr};
  void* ptr = nullptr;
  std::uint64_t bytes = 0;
  mapped_block() = default;
  mapped_block(const device& d, std::uint64_t n);
  ~mapped_block();
  mapped_block(const mapped_block&) = delete;
  mapped_block& operator=(const mapped_block&) = delete;
};

}  // namespace kiln::ring_detail

namespace kiln::detail {

struct ring_impl : std::enable_shared_from_this<ring_impl> {
  device dev{nullptr};
  bool gpu = false;
  ring_options opts;
  std::uint64_t slots = 0, mask = 0, capacity = 0, start = 0;
  std::uint64_t in_bytes = 0, out_bytes = 0;  // slot sizes of the host's two queues
  std::size_t in_size = 0, out_size = 0;      // message sizes
  std::uint32_t total_units = 0;
  std::vector<std::uint32_t> stage_units;

  std::unique_ptr<ring_detail::mapped_block> control_mem, in_mem, out_mem, records_mem;
  std::vector<buffer<std::uint8_t>> device_mem;  // claims and live count, middle queues, state
  std::uint64_t state_bytes = 0;
  buffer<std::uint8_t>* state = nullptr;
  std::vector<queue> queues;  // one on CUDA; one per unit on the CPU
  std::vector<event> ended;   // recorded after each launch
  std::unique_ptr<program> prog;

  ring_detail::kiln_ring_control* control() const {
    return static_cast<ring_detail::kiln_ring_control*>(control_mem->ptr);
  }
  unsigned char* in_slot(std::uint64_t p) const {
    return static_cast<unsigned char*>(in_mem->ptr) + (p & mask) * in_bytes;
  }
  unsigned char* out_slot(std::uint64_t p) const {
    return static_cast<unsigned char*>(out_mem->ptr) + (p & mask) * out_bytes;
  }
  ring_detail::kiln_ring_unit_record* records() const {
    return static_cast<ring_detail::kiln_ring_unit_record*>(records_mem->ptr);
  }

  // Producers (send_mu) and the receiver (recv_mu); sent/received are read by both sides.
  std::mutex send_mu, recv_mu, state_mu;
  std::atomic<std::uint64_t> sent{0}, received{0};          // positions: start + count
  std::unique_ptr<std::atomic<std::uint64_t>[]> send_time;  // ns, per slot
  std::array<std::atomic<std::uint64_t>, 40> latency{};
  std::atomic<std::uint64_t> handler_faults{0}, dropped{0};

  std::atomic<ring_state> st{ring_state::launched};
  std::string fault;  // under state_mu
  std::vector<std::uint64_t> fault_ids;
  std::atomic<bool> terminated{false};  // kernel ended (terminate or fault)
  std::atomic<bool> abandoned{false};   // a CPU handler hung: its thread still runs our code
  std::uint64_t last_processed = 0;     // progress watch (state_mu)
  ring_detail::steady::time_point last_progress = ring_detail::steady::now();

  std::thread callback_thread;
  std::atomic<bool> callback_stop{false};
  std::function<void(std::uint64_t, std::int32_t, const void*)> callback;

  std::uint64_t processed_total() const;
  // Throws ring_fault when faulted; detects traps, exits and hangs (deadline on progress).
  void check_health();
  [[noreturn]] void raise_fault(const std::string& why);
  std::vector<std::uint64_t> unanswered() const;
  bool kernel_ended();
  void stop_callback();
};

}  // namespace kiln::detail
