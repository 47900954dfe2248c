// The sort barrier of kiln::query (sort_step.hpp). One carried component of 4 or 8 bytes rides
// in the radix sort as its value; otherwise the sort carries a permutation (the positions,
// written by kq_iota) and each component is gathered through it (kq_gather).
#include "query/sort_step.hpp"

#include <algorithm>
#include <string>

#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "runtime/runtime.hpp"
#include "sort/radix_sort.hpp"
#include "sort/words.hpp"

namespace kiln::detail::q {
namespace {

// Positions and gathers by element width (1, 2, 4, 8 bytes): elements move bitwise.
std::string permute_source() {
  std::string s = R"(
KILN_KERNEL void kq_iota32(KILN_GLOBAL uint32_t* out, uint64_t n) {
  const uint64_t i = kiln_global_id(0);
  if (i < n) out[i] = (uint32_t)i;
}
KILN_KERNEL void kq_iota64(KILN_GLOBAL uint64_t* out, uint64_t n) {
  const uint64_t i = kiln_global_id(0);
  if (i < n) out[i] = i;
}
)";
  for (std::uint64_t bytes : {1, 2, 4, 8})
    for (const char* p : {"uint32_t", "uint64_t"}) {
      const char* t = word_name(bytes);
      s += "KILN_KERNEL void kq_gather" + std::to_string(bytes) + (p[4] == '3' ? "_32" : "_64") +
           "(KILN_GLOBAL " + t + "* out, KILN_GLOBAL const " + t + "* in, KILN_GLOBAL const " + p +
           "* perm, uint64_t n) {\n  const uint64_t i = kiln_global_id(0);\n  if (i < n) out[i] = "
           "in[perm[i]];\n}\n";
    }
  return s;
}

}  // namespace

void sort_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                    bool descending) {
  const std::uint64_t n = r.count;
  if (n <= 1 || r.outputs.empty()) return;  // already in order
  queue_impl& qi = *q.impl();
  radix_sort_args a;
  a.key_type = types[0];
  a.n = n;
  a.keys_in = {r.outputs[0], 0};
  a.descending = descending;
  const std::size_t carried = types.size() - 1;
  if (carried == 0 || (carried == 1 && (size_of(types[1]) == 4 || size_of(types[1]) == 8))) {
    if (carried) {
      a.value_bytes = static_cast<std::uint32_t>(size_of(types[1]));
      a.values_in = {r.outputs[1], 0};
    }
    const radix_sorted s = radix_sort(q, a);
    r.outputs[0] = s.keys.mem;
    if (carried) r.outputs[1] = s.values.mem;
    return;
  }
  // Several components (or one of 1 or 2 bytes): sort the positions, then gather each.
  const bool wide = n > 0xffffffffull;
  const scalar_type pt = wide ? scalar_type::u64 : scalar_type::u32;
  const program prog = program::compile(q.get_device(), permute_source(), {}, check_mode::off);
  const range grid(n);
  auto perm_in = allocate_on(qi, n * size_of(pt));
  {
    arg_binding args[] = {array_arg({perm_in, 0}, pt, false, n), bind_arg(n)};
    launch(*prog.get_kernel(wide ? "kq_iota64" : "kq_iota32").impl(), qi, grid, nullptr, args, 2);
  }
  a.value_bytes = static_cast<std::uint32_t>(size_of(pt));
  a.values_in = {perm_in, 0};
  const radix_sorted s = radix_sort(q, a);
  r.outputs[0] = s.keys.mem;
  for (std::size_t k = 1; k < types.size(); ++k) {
    const std::uint64_t eb = size_of(types[k]);
    const scalar_type wt = word_type(eb);
    auto out = allocate_on(qi, std::max<std::uint64_t>(n * eb, 1));
    arg_binding args[] = {array_arg({out, 0}, wt, false, n),
                          array_arg({r.outputs[k], 0}, wt, true, n),
                          array_arg({s.values.mem, 0}, pt, true, n), bind_arg(n)};
    const std::string name = "kq_gather" + std::to_string(eb) + (wide ? "_64" : "_32");
    launch(*prog.get_kernel(name).impl(), qi, grid, nullptr, args, 4);
    r.outputs[k] = out;
  }
}

}  // namespace kiln::detail::q
