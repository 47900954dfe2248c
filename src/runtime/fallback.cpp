#include "kiln/fallback.hpp"

#include <atomic>

#include "runtime/resilience_log.hpp"

namespace kiln {

namespace {
thread_local const fallback* t_current = nullptr;
std::atomic<std::uint64_t> g_moves{0};
}  // namespace

fallback::fallback(std::initializer_list<device> chain) : fallback(std::vector<device>(chain)) {}

fallback::fallback(std::vector<device> chain) : chain_(std::move(chain)) {
  if (chain_.empty()) throw invalid_argument("kiln::fallback: the device chain is empty");
  for (std::size_t i = 0; i < chain_.size(); ++i) {
    if (!chain_[i].impl())
      throw invalid_argument("kiln::fallback: device " + std::to_string(i) +
                             " of the chain is empty");
    for (std::size_t j = 0; j < i; ++j)
      if (chain_[j] == chain_[i])
        throw invalid_argument("kiln::fallback: " + chain_[i].id() + " is in the chain twice");
  }
}

bool fallback::moves(const error& e) noexcept {
  switch (e.category()) {
    case error_category::compile_error:
    case error_category::out_of_memory:
    case error_category::backend_failure:
    case error_category::device_lost:
    case error_category::unsupported: return true;
    default: return false;
  }
}

const device* fallback::next(const device& dev) const noexcept {
  for (std::size_t i = 0; i + 1 < chain_.size(); ++i)
    if (chain_[i] == dev) return &chain_[i + 1];
  return nullptr;
}

void fallback::note_move(const std::string& what, const device& from, const device& to,
                         const error& why) {
  g_moves.fetch_add(1, std::memory_order_relaxed);
  detail::log_fallback(what, from.id(), to.id(),
                       std::string(to_string(why.category())) + ": " + why.what());
}

std::uint64_t fallback::moves_made() noexcept { return g_moves.load(std::memory_order_relaxed); }

fallback_scope::fallback_scope(const fallback& chain) : previous_(t_current), chain_(chain) {
  t_current = &chain_;
}

fallback_scope::~fallback_scope() { t_current = previous_; }

const fallback* fallback_scope::current() noexcept { return t_current; }

}  // namespace kiln
