// The join barrier of kiln::query (join_step.hpp), on the device primitive join_keys: the pairs'
// row numbers, then one gather per component (kj_gather*: UINT64_MAX, a left join's "no match",
// gives zero) and kj_matched for a left join's flag.
#include "query/join_step.hpp"

#include <algorithm>
#include <string>

#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "runtime/runtime.hpp"
#include "sort/join.hpp"
#include "sort/words.hpp"

namespace kiln::detail::q {
namespace {

const std::string& gather_source() {
  static const std::string s = [] {
    std::string t = R"(
KILN_KERNEL void kj_matched(KILN_GLOBAL bool* out, KILN_GLOBAL const uint64_t* idx, uint64_t n) {
  const uint64_t i = kiln_global_id(0);
  if (i < n) out[i] = idx[i] != (uint64_t)0xffffffffffffffffull;
}
)";
    for (const char* w : {"uint8_t", "uint16_t", "uint32_t", "uint64_t"})
      t += std::string("KILN_KERNEL void kj_gather_") + w + "(KILN_GLOBAL " + w +
           "* out, KILN_GLOBAL const " + w +
           "* in, KILN_GLOBAL const uint64_t* idx, uint64_t n) {\n"
           "  const uint64_t i = kiln_global_id(0);\n"
           "  if (i >= n) return;\n"
           "  const uint64_t j = idx[i];\n"
           "  out[i] = j == (uint64_t)0xffffffffffffffffull ? (" +
           w + ")0 : in[j];\n}\n";
    return t;
  }();
  return s;
}

}  // namespace

void join_collected(queue& q, collect_result& r, const std::vector<scalar_type>& types,
                    const query_desc& other_query, bool left) {
  query_desc other = other_query;  // a copy: running a query stages its host inputs into it
  const std::vector<scalar_type> other_types = other.types;
  if (other_types.at(0) != types.at(0))
    throw dtype_error(std::string("kiln::join: the keys differ in type (") + type_name(types[0]) +
                      " and " + type_name(other_types[0]) + ")");
  collect_result o = collect(other);
  if (!(o.dev == q.get_device()))
    throw invalid_argument("kiln::join: the other query ran on " + o.dev.id() + ", this one on " +
                           q.get_device().id() + "; move one side first");
  q.wait(o.dev.default_queue().record());  // its results are written on its default queue

  join_args a;
  a.key_type = types[0];
  a.build_n = o.count;
  a.build_keys = {o.outputs[0], 0};
  a.probe_n = r.count;
  a.probe_keys = {r.outputs[0], 0};
  a.kind = left ? join_kind::left : join_kind::inner;
  const join_result p = join_keys(q, a);
  const std::uint64_t n = p.count;

  queue_impl& qi = *q.impl();
  const program prog = program::compile(q.get_device(), gather_source(), {}, check_mode::off);
  const range grid(std::max<std::uint64_t>(n, 1));
  std::vector<std::shared_ptr<memory_impl>> outs;
  const auto gather = [&](const std::shared_ptr<memory_impl>& in, scalar_type t,
                          const std::shared_ptr<memory_impl>& idx, std::uint64_t idx_offset) {
    const std::uint64_t eb = size_of(t);
    auto out = allocate_on(qi, std::max<std::uint64_t>(n * eb, 1));
    if (n) {
      arg_binding args[] = {array_arg({out, 0}, word_type(eb), false, n),
                            array_arg({in, 0}, word_type(eb), true, in->bytes / eb),
                            array_arg({idx, 0}, scalar_type::u64, true, idx_offset + n),
                            bind_arg(n)};
      launch(*prog.get_kernel(std::string("kj_gather_") + word_name(eb)).impl(), qi, grid, nullptr,
             args, 4);
    }
    outs.push_back(std::move(out));
  };
  if (p.probe_offset || p.build_offset)
    throw std::logic_error("kiln::join: join_keys wrote at an offset it was not asked for");
  for (std::size_t k = 1; k < types.size(); ++k) gather(r.outputs[k], types[k], p.probe_index, 0);
  for (std::size_t k = 1; k < other_types.size(); ++k)
    gather(o.outputs[k], other_types[k], p.build_index, 0);
  if (left) {
    auto out = allocate_on(qi, std::max<std::uint64_t>(n, 1));
    if (n) {
      arg_binding args[] = {array_arg({out, 0}, scalar_type::boolean, false, n),
                            array_arg({p.build_index, 0}, scalar_type::u64, true, n), bind_arg(n)};
      launch(*prog.get_kernel("kj_matched").impl(), qi, grid, nullptr, args, 3);
    }
    outs.push_back(std::move(out));
  }
  r.outputs = std::move(outs);
  r.count = n;
}

}  // namespace kiln::detail::q
