// Kiln's compiler threads: the compiles of a backend whose table has
// KILN_BACKEND_COMPILE_ANY_THREAD (CUDA's NVRTC) run on one of a few long-lived threads while the
// calling thread waits.
// Why: in-process compilers free most of what they allocate, but glibc keeps the freed pages in
// the arena of the thread that allocated them. Compiles from many application threads (128 in
// stress_test) left hundreds of MiB resident in as many arenas (cuda:0: +333 MiB over a phase
// with the heap flat); on a fixed set of threads the same arenas are reused. It also bounds how
// many compiles run at once (each holds tens of MiB) to the number of cores, at most 8.
//
//   std::vector<std::byte> bytes = kiln::detail::on_compiler_thread([&] { return compile(); });
#pragma once

#include <functional>
#include <optional>
#include <utility>

namespace kiln::detail {

// Runs job on a compiler thread and waits for it; rethrows what it throws. Called on a compiler
// thread it runs inline.
void run_on_compiler_thread(const std::function<void()>& job);

// The compiler threads started so far (grown on demand, up to compiler_thread_limit()).
unsigned compiler_threads_started();
unsigned compiler_thread_limit();

template <class F>
auto on_compiler_thread(F&& f) {
  std::optional<decltype(f())> result;
  run_on_compiler_thread([&] { result.emplace(f()); });
  return std::move(*result);
}

}  // namespace kiln::detail
