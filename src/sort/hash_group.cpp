// Device hash group-by (hash_group.hpp).
//
//   hg_insert   each work-item walks its rows (CPU devices: one contiguous chunk; GPUs: a
//               grid-stride loop), canonicalises the key (floats: -0.0 -> +0.0, every NaN -> one
//               NaN, so that bitwise equality is the grouping), finds or claims its slot by
//               linear probing, and folds the rows of a run of equal keys locally, flushing
//               each run with one atomic per column (integer add in 64 bits; min/max on the
//               value's order-preserving integer image; first: atomic min of the position);
//   hg_insert_local  (GPUs) the same, but each work-group folds its runs into a table in local
//               memory first and adds it to the global table at its end (one global atomic per
//               column per key per work-group, not per run);
//   hg_compact  the occupied slots -> (key, slot) pairs, in any order;
//   (radix sort of those pairs by key: the order is fixed by the distinct keys alone)
//   hg_emit     each group's key and aggregates, gathered from its slot.
// A slot is claimed and published in one compare-and-swap: keys of up to 32 bits as
// (1 << 32 | key bits) in a 64-bit word (0: empty); 64-bit keys as themselves, with all ones
// as "empty" and a dedicated slot (the last) for the key equal to it. No work-item waits on
// another's write (the CPU backend runs a work-group's items one after another).
// Only order-independent aggregates are accepted, so results are deterministic.
#include "sort/hash_group.hpp"

#include <algorithm>
#include <bit>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "codegen/text.hpp"
#include "kiln/buffer.hpp"
#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "sort/hash_group_text.hpp"
#include "sort/words.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;
using hash_group_text::float_order;
using hash_group_text::is_integer;
using hash_group_text::needs_conv;

const std::string fn = "kiln hash_group";

void check_array(const queue_impl& q, const sort_operand& x, std::uint64_t n, std::uint64_t elem,
                 const std::string& what) {
  check_operand(fn, q, x, n, elem, what);
}

void check_value(const run_value& v, std::size_t j) {
  const std::string col = fn + ": value column " + std::to_string(j);
  if (v.op > run_op::first)
    throw invalid_argument(col + ": unknown op " + std::to_string(int(v.op)));
  const std::string what = col + " (" + run_op_name(v.op) + ")";
  if (v.op != run_op::count && (is_reduced_float(v.type) || is_reduced_float(v.out_type)))
    throw unsupported(what + ": 16-bit float values and results are not supported (use float)");
  if (v.op == run_op::count && v.out_type != scalar_type::u64)
    throw invalid_argument(what + ": a count is uint64_t, not " + type_name(v.out_type));
  if ((v.op == run_op::min || v.op == run_op::max) && v.out_type == scalar_type::boolean)
    throw invalid_argument(what + ": the result must be a numeric type, not bool");
  if (!hash_group_exact(v))
    throw invalid_argument(what + " of " + type_name(v.type) + " into " + type_name(v.out_type) +
                           " is not exact in any row order (float sums and means are not): "
                           "group it by sorting (reduce_by_key)");
}

// How `count` elements spread over work-items: item g takes chunks of span, stride apart.
struct spread {
  std::uint64_t items = 1, span = 1, stride = 1;
};

spread spread_of(const device_info& info, bool cpu, std::uint64_t count) {
  const hash_group_policy& p = hash_policy;
  const std::uint64_t units = std::max<std::uint32_t>(info.compute_units, 1);
  spread s;
  if (cpu) {
    const std::uint64_t parts = std::clamp<std::uint64_t>(
        (count + p.cpu_chunk_elems - 1) / p.cpu_chunk_elems, 1, units * p.cpu_chunks_per_unit);
    s.span = std::max<std::uint64_t>((count + parts - 1) / parts, 1);
    s.items = parts;
    s.stride = s.span * parts;
  } else {
    const std::uint64_t most = units * p.gpu_items_per_unit;
    const std::uint64_t g = p.gpu_group;
    s.items = std::min((std::max<std::uint64_t>(count, 1) + g - 1) / g * g, (most + g - 1) / g * g);
    s.span = 1;
    s.stride = s.items;
  }
  return s;
}

}  // namespace

bool hash_group_exact(const run_value& v) {
  switch (v.op) {
    case run_op::count: return v.out_type == scalar_type::u64;
    case run_op::sum:
      return is_integer(v.type) && is_integer(v.out_type) && v.out_type != scalar_type::boolean;
    case run_op::min:
    case run_op::max:
    case run_op::first:
      return !is_reduced_float(v.type) && !is_reduced_float(v.out_type) &&
             (v.op == run_op::first || v.out_type != scalar_type::boolean);
    default: return false;
  }
}

std::string hash_group_source(std::uint32_t key_bytes, const std::vector<run_value>& values,
                              std::uint32_t local_slots) {
  std::string sig = cat(num(key_bytes), "/", num(local_slots));
  sig += run_values_signature(values);
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(sig);
  if (it == cache.end())
    it = cache.emplace(sig, hash_group_text::render(key_bytes, values, local_slots)).first;
  return it->second;
}

hash_group_result hash_group(queue& q, const hash_group_args& a) {
  if (!q.impl()) throw_empty_handle(fn.c_str(), "queue");
  queue_impl& qi = *q.impl();
  if (is_reduced_float(a.key_type))
    throw unsupported(fn + ": keys of type " + type_name(a.key_type) +
                      " are not supported (16-bit floats are storage types: group them as "
                      "float)");
  for (std::size_t j = 0; j < a.values.size(); ++j) check_value(a.values[j], j);
  const auto kb = static_cast<std::uint32_t>(size_of(a.key_type));
  const std::uint64_t n = a.n;
  if (n > UINT64_MAX / 16)
    throw invalid_argument(fn + ": n " + std::to_string(n) + " is too large");
  const std::uint64_t max_groups = a.max_groups ? a.max_groups : hash_policy.default_max_groups;
  if (max_groups > (std::uint64_t(1) << 30))
    throw invalid_argument(fn + ": max_groups " + std::to_string(max_groups) +
                           " is above 2^30 (a group's slot is a 32-bit index)");
  if (n || a.keys.mem) check_array(qi, a.keys, n, kb, "keys");
  for (std::size_t j = 0; j < a.values.size(); ++j) {
    const run_value& v = a.values[j];
    if (v.op != run_op::count && (n || v.in.mem))
      check_array(qi, v.in, n, size_of(v.type), cat("value column ", num(j)));
  }

  hash_group_result r;
  auto outputs = [&](std::uint64_t groups) {
    r.done = true;
    r.groups.runs = groups;
    r.groups.keys = allocate_on(qi, std::max<std::uint64_t>(groups * kb, 1));
    for (const run_value& v : a.values)
      r.groups.values.push_back(
          allocate_on(qi, std::max<std::uint64_t>(groups * size_of(v.out_type), 1)));
  };
  if (n == 0) {
    outputs(0);
    return r;
  }

  const device& dev = q.get_device();
  const device_info& info = dev.info();
  const bool cpu = info.type == device_type::cpu;
  // Distinct keys are at most n, and 2^8 (2^16) of 1-byte (2-byte) keys: a table for no more.
  const std::uint64_t most = std::min({max_groups, n, kb < 4 ? std::uint64_t(1) << (8 * kb) : n});
  const std::uint64_t cap = std::bit_ceil(std::max<std::uint64_t>(hash_policy.slack * most, 2));
  const std::uint64_t slots_n = cap + 1;  // the last: 64-bit keys equal to "empty"
  const std::uint64_t k = a.values.size();
  const std::int32_t kind = order_kind(a.key_type);
  const scalar_type kt = word_type(kb);

  // meta: [0] keys claimed, [1] gave up, [2] saw -0.0, [3] first NaN key's row, [4] compacted.
  const sort_operand meta{allocate_on(qi, 5 * 8), 0};
  const sort_operand slots{allocate_on(qi, slots_n * 8), 0};
  std::vector<sort_operand> acc;
  const std::uint64_t zero = 0, ones = ~std::uint64_t(0);
  fill(qi, *meta.mem, 0, &zero, 8, 5);
  fill(qi, *meta.mem, 3 * 8, &ones, 8, 1);
  const std::uint64_t empty = kb == 8 ? ones : zero;
  fill(qi, *slots.mem, 0, &empty, 8, slots_n);
  for (const run_value& v : a.values) {
    acc.push_back({allocate_on(qi, slots_n * 8), 0});
    const bool high = v.op == run_op::min || v.op == run_op::first;
    fill(qi, *acc.back().mem, 0, high ? &ones : &zero, 8, slots_n);
  }

  // The tiled path: the largest local table of (1 + columns) words per entry that fits.
  const hash_group_policy& p = hash_policy;
  const std::uint64_t entry = 8 * (2 + k);  // key, global slot, accumulators
  // Room is left for the kernel's other local variables: NVIDIA's OpenCL refused a table that
  // filled its 48 KiB exactly (49160 bytes with them).
  const std::uint64_t budget =
      std::min<std::uint64_t>(p.local_bytes,
                              info.local_mem_bytes ? info.local_mem_bytes : p.local_bytes) -
      p.local_reserve;
  const std::uint32_t local_slots = static_cast<std::uint32_t>(
      std::bit_floor(std::min<std::uint64_t>(p.local_slots_max, budget / entry)));
  std::string lacks;
  if (k == 0)
    lacks = "aggregates (keys only)";
  else if (!dev.supports(feature::barrier))
    lacks = "kiln::feature::barrier";
  else if (info.max_work_group_size && info.max_work_group_size < p.gpu_group)
    lacks = cat("work-groups of ", num(p.gpu_group), " items");
  else if (local_slots < p.gpu_group || local_slots * entry > budget)
    lacks = cat("a local table of ", num(p.gpu_group), " entries of ", num(entry), " bytes");
  if (a.path == radix_path::tiled && !lacks.empty())
    throw unsupported(fn + ": the tiled kernel needs " + lacks + ", which " + dev.id() + " lacks");
  const bool tiled =
      a.path == radix_path::tiled || (a.path == radix_path::automatic && lacks.empty() && !cpu);
  // CPU devices: per-work-item tables in scratch memory (few work-items), unless told chunked.
  const bool priv = !tiled && cpu && k > 0 && a.path == radix_path::automatic;
  const program prog = program::compile(
      dev, hash_group_source(kb, a.values, tiled ? local_slots : 0), {}, check_mode::off);
  const local_size one(1), group(hash_policy.gpu_group);
  const range* loc = cpu ? &one : &group;
  auto inputs = [&](std::vector<arg_binding>& b, std::uint64_t rows) {
    for (const run_value& v : a.values)
      if (v.op != run_op::count)
        b.push_back(array_arg(
            v.in, float_order(v) ? word_type(size_of(v.type)) : stored_type(v.type), true, rows));
  };
  auto accs = [&](std::vector<arg_binding>& b, bool is_const) {
    for (const sort_operand& x : acc)
      b.push_back(array_arg(x, scalar_type::u64, is_const, slots_n));
  };
  {
    spread sp = spread_of(info, cpu, n);
    if (tiled) {  // whole work-groups, a grid-stride loop
      const std::uint64_t units = std::max<std::uint32_t>(info.compute_units, 1);
      const std::uint64_t groups_n = std::min<std::uint64_t>((n + p.gpu_group - 1) / p.gpu_group,
                                                             units * p.local_groups_per_unit);
      sp = {groups_n * p.gpu_group, 1, groups_n * p.gpu_group};
    }
    std::vector<arg_binding> b = {array_arg(a.keys, kt, true, n),
                                  bind_arg(n),
                                  bind_arg(sp.span),
                                  bind_arg(sp.stride),
                                  bind_arg(kind),
                                  array_arg(slots, scalar_type::u64, false, slots_n),
                                  bind_arg(cap - 1),
                                  bind_arg(max_groups),
                                  array_arg(meta, scalar_type::u64, false, 5)};
    inputs(b, n);
    accs(b, false);
    sort_operand scratch;
    if (priv) {
      scratch = {allocate_on(qi, sp.items * p.cpu_private_slots * (2 + k) * 8), 0};
      b.push_back(
          array_arg(scratch, scalar_type::u64, false, sp.items * p.cpu_private_slots * (2 + k)));
    }
    launch(*prog.get_kernel(tiled  ? "hg_insert_local"
                            : priv ? "hg_insert_private"
                                   : "hg_insert")
                .impl(),
           qi, range(sp.items), tiled ? &group : loc, b.data(), b.size());
  }
  // The one host wait: the group count sizes the rest, or the table gave up.
  std::uint64_t m[2] = {0, 0};
  copy_d2h(qi, m, *meta.mem, 0, sizeof m);
  q.finish();
  if (m[1] != 0 || m[0] > max_groups) return r;  // done == false
  const std::uint64_t groups = m[0];

  const sort_operand ck{allocate_on(qi, std::max<std::uint64_t>(groups * kb, 8)), 0};
  const sort_operand cs{allocate_on(qi, std::max<std::uint64_t>(groups * 4, 8)), 0};
  {
    const spread sp = spread_of(info, cpu, slots_n);
    arg_binding b[] = {array_arg(slots, scalar_type::u64, true, slots_n),
                       bind_arg(slots_n),
                       bind_arg(sp.span),
                       bind_arg(sp.stride),
                       array_arg(meta, scalar_type::u64, false, 5),
                       array_arg(ck, kt, false, groups),
                       array_arg(cs, scalar_type::u32, false, groups)};
    launch(*prog.get_kernel("hg_compact").impl(), qi, range(sp.items), loc, b, std::size(b));
  }
  radix_sort_args sa;
  sa.key_type = a.key_type;
  sa.n = groups;
  sa.keys_in = ck;
  sa.value_bytes = 4;
  sa.values_in = cs;
  const radix_sorted sorted = radix_sort(q, sa);

  outputs(groups);
  std::vector<sort_operand> temps(k);
  {
    const spread sp = spread_of(info, cpu, groups);
    std::vector<arg_binding> b = {array_arg(a.keys, kt, true, n),
                                  array_arg(sorted.keys, kt, true, groups),
                                  array_arg(sorted.values, scalar_type::u32, true, groups),
                                  bind_arg(groups),
                                  bind_arg(sp.span),
                                  bind_arg(sp.stride),
                                  bind_arg(kind),
                                  array_arg(meta, scalar_type::u64, true, 5),
                                  array_arg({r.groups.keys, 0}, kt, false, groups)};
    inputs(b, n);
    accs(b, true);
    for (std::size_t j = 0; j < k; ++j) {
      const run_value& v = a.values[j];
      if (needs_conv(v)) {
        temps[j] = {allocate_on(qi, groups * size_of(v.type)), 0};
        b.push_back(array_arg(temps[j], word_type(size_of(v.type)), false, groups));
      } else {
        b.push_back(array_arg({r.groups.values[j], 0},
                              float_order(v) ? word_type(size_of(v.type)) : stored_type(v.out_type),
                              false, groups));
      }
    }
    launch(*prog.get_kernel("hg_emit").impl(), qi, range(sp.items), loc, b.data(), b.size());
    for (std::size_t j = 0; j < k; ++j) {
      if (!temps[j].mem) continue;
      const run_value& v = a.values[j];
      arg_binding c[] = {array_arg(temps[j], v.type, true, groups), bind_arg(groups),
                         bind_arg(sp.span), bind_arg(sp.stride),
                         array_arg({r.groups.values[j], 0}, v.out_type, false, groups)};
      launch(*prog.get_kernel(cat("hg_conv", num(j))).impl(), qi, range(sp.items), loc, c,
             std::size(c));
    }
  }
  return r;
}

}  // namespace kiln::detail
