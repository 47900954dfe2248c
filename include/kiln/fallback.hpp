// kiln::fallback: a chain of devices. Work that fails on one device for a reason another
// device may not share (a compile failure, a launch failure, out of device memory, device
// loss, an unsupported feature) runs again on the next device of the chain. Each move is
// logged once, at warn, with its reason. Without a fallback, errors propagate as always.
//
//   kiln::fallback chain{kiln::device::get("cuda:0"), kiln::device::get("cpu")};
//
//   // Queries: a scope on this thread moves any query whose data is on a chain device.
//   {
//     kiln::fallback_scope scope(chain);
//     float s = x | kiln::transform(_1 * 2.f) | kiln::sum();  // x's data copied over if needed
//   }
//
//   // Your own kernels, opting in: the work is a function of the device it runs on.
//   std::vector<float> y = chain.run([&](const kiln::device& dev) {
//     kiln::buffer<float> in(dev, host_x), out(dev, host_x.size());
//     kiln::program::compile(dev, source).get_kernel("k").launch(dev.default_queue(),
//                                                                 kiln::range(n), out, in);
//     return out.to_vector();
//   });
//
// Errors of the caller (kiln::invalid_argument and its subclasses) never move: they would
// fail everywhere. When the last device fails too, its error propagates.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/error.hpp"

namespace kiln {

class fallback {
 public:
  fallback(std::initializer_list<device> chain);
  explicit fallback(std::vector<device> chain);

  const std::vector<device>& devices() const noexcept { return chain_; }
  // Whether an error of this kind moves work to the next device.
  static bool moves(const error& e) noexcept;
  // The device after `dev` in the chain, or null when `dev` is last or not in the chain.
  const device* next(const device& dev) const noexcept;

  // Runs work(device) on each device of the chain in turn until one succeeds.
  template <class F>
  auto run(F&& work, const std::string& what = "work") const
      -> std::invoke_result_t<F&, const device&> {
    for (std::size_t i = 0;; ++i) {
      try {
        return work(chain_[i]);
      } catch (const error& e) {
        if (!moves(e) || i + 1 == chain_.size()) throw;
        note_move(what, chain_[i], chain_[i + 1], e);
      }
    }
  }

  // Logs a move (once per call) and counts it (moves_made).
  static void note_move(const std::string& what, const device& from, const device& to,
                        const error& why);
  // Moves made by every fallback of the process so far.
  static std::uint64_t moves_made() noexcept;

 private:
  std::vector<device> chain_;
};

// Makes `chain` the fallback for queries run on this thread while the scope lives. Scopes
// nest; the innermost wins.
class fallback_scope {
 public:
  explicit fallback_scope(const fallback& chain);
  ~fallback_scope();
  fallback_scope(const fallback_scope&) = delete;
  fallback_scope& operator=(const fallback_scope&) = delete;
  // The innermost live scope's chain on this thread, or null.
  static const fallback* current() noexcept;

 private:
  const fallback* previous_;
  fallback chain_;
};

}  // namespace kiln
