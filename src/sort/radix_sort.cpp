// Device radix sort (radix_sort.hpp): checks the call, then enqueues one histogram, scan and
// scatter launch per 8-bit digit, ping-ponging between the output and a temporary so that the
// last pass lands in the output. Temporaries are freed in the queue's order (no host wait).
#include "sort/radix_sort.hpp"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "runtime/log.hpp"
#include "sort/cub_radix_sort.hpp"
#include "sort/words.hpp"

namespace kiln::detail {
namespace {

const std::string fn = "kiln radix_sort";

void check_array(const queue_impl& q, const sort_operand& x, std::uint64_t n, std::uint32_t elem,
                 const char* name) {
  check_operand(fn, q, x, n, elem, name);
}

bool overlap(const sort_operand& a, std::uint32_t ea, const sort_operand& b, std::uint32_t eb,
             std::uint64_t n) {
  if (!a.mem || a.mem != b.mem || n == 0) return false;  // an output still to allocate: none
  const std::uint64_t a0 = a.offset * ea, b0 = b.offset * eb;
  return a0 < b0 + n * eb && b0 < a0 + n * ea;
}

template <class T>
arg_binding scalar(T v) {
  return bind_arg(v);
}

// Set when NVRTC refused CUB's headers once: automatic sorts stop trying.
std::atomic<bool> cub_refused{false};

sort_operand fresh(queue_impl& q, std::uint64_t bytes) {
  return {allocate_on(q, std::max<std::uint64_t>(bytes, 8)), 0};
}

}  // namespace

radix_sorted radix_sort(queue& q, const radix_sort_args& a) {
  if (!q.impl()) throw_empty_handle(fn.c_str(), "queue");
  queue_impl& qi = *q.impl();
  if (a.key_type == scalar_type::f16 || a.key_type == scalar_type::bf16)
    throw unsupported(fn + ": keys of type " + type_name(a.key_type) +
                      " are not supported (16-bit floats are storage types: sort them as float)");
  if (a.value_bytes != 0 && a.value_bytes != 4 && a.value_bytes != 8)
    throw invalid_argument(fn + ": values must be 4 or 8 bytes (0: keys only), not " +
                           std::to_string(a.value_bytes));
  const auto kb = static_cast<std::uint32_t>(size_of(a.key_type));
  const std::uint32_t vb = a.value_bytes;
  const std::uint64_t n = a.n;
  if (n > UINT64_MAX / 16)
    throw invalid_argument(fn + ": n " + std::to_string(n) + " is too large");

  radix_sorted r{a.keys_out, a.values_out};
  if (n == 0 && !a.keys_in.mem) {  // nothing to read: outputs as asked
    if (!r.keys.mem) r.keys = fresh(qi, 0);
    if (vb && !r.values.mem) r.values = fresh(qi, 0);
    return r;
  }
  check_array(qi, a.keys_in, n, kb, "keys_in");
  if (r.keys.mem) check_array(qi, r.keys, n, kb, "keys_out");
  if (vb) {
    check_array(qi, a.values_in, n, vb, "values_in");
    if (r.values.mem) check_array(qi, r.values, n, vb, "values_out");
  }
  if (overlap(r.keys, kb, a.keys_in, kb, n) ||
      (vb &&
       (overlap(r.values, vb, a.values_in, vb, n) || overlap(r.keys, kb, a.values_in, vb, n) ||
        overlap(r.values, vb, a.keys_in, kb, n) || overlap(r.keys, kb, r.values, vb, n))))
    throw invalid_argument(fn +
                           ": the outputs overlap the inputs or each other (the sort is "
                           "out of place)");
  if (!r.keys.mem) r.keys = fresh(qi, n * kb);
  if (vb && !r.values.mem) r.values = fresh(qi, n * vb);
  if (n == 0) return r;

  const device& dev = q.get_device();
  if (a.path == radix_path::cub || a.path == radix_path::automatic) {
    const std::string why = cub_sort_unavailable(dev);
    if (a.path == radix_path::cub && !why.empty())
      throw unsupported(fn + ": CUB's radix sort cannot run on " + dev.id() + ": " + why);
    if (why.empty() && (a.path == radix_path::cub || !cub_refused.load())) {
      try {
        cub_radix_sort(q, a, kb, vb, r);
        return r;
      } catch (const compile_error& e) {
        // Headers NVRTC cannot compile (another CCCL): the portable kernels from now on.
        if (a.path == radix_path::cub) throw;
        if (!cub_refused.exchange(true))
          logf(log_level::warn,
               "radix sort: NVRTC refused CUB's headers ({}); Kiln's own "
               "kernels sort from now on",
               e.what());
      }
    }
  }
  const radix_sort_policy& p = radix_policy;
  // The tiled kernels need barriers, work-groups of p.threads and the scatter's local memory.
  const device_info& info = dev.info();
  const std::uint64_t local_bytes =
      p.tile() * (kb + (vb ? vb : 4)) + std::uint64_t(p.threads) * 8 + 256 * (4 + 8);
  std::string lacks;
  if (!dev.supports(feature::barrier))
    lacks = "kiln::feature::barrier";
  else if (info.max_work_group_size && info.max_work_group_size < p.threads)
    lacks = "work-groups of " + std::to_string(p.threads) + " items";
  else if (info.local_mem_bytes && info.local_mem_bytes < local_bytes)
    lacks = std::to_string(local_bytes) + " bytes of local memory";
  if (a.path == radix_path::tiled && !lacks.empty())
    throw unsupported(fn + ": the tiled kernels need " + lacks + ", which " + dev.id() + " lacks");
  const bool tiled =
      a.path == radix_path::tiled ||
      (a.path == radix_path::automatic && lacks.empty() && info.type != device_type::cpu);
  const program prog =
      program::compile(dev, radix_sort_source(tiled, kb, vb ? vb : 4), {}, check_mode::off);
  const kernel k_hist = prog.get_kernel(tiled ? "rs_hist" : "rs_chist");
  const kernel k_scan = prog.get_kernel(tiled ? "rs_scan" : "rs_cscan");
  const kernel k_scan_up = prog.get_kernel(tiled ? "rs_scan_up" : "rs_cscan");
  const kernel k_scatter = prog.get_kernel(tiled ? "rs_scatter" : "rs_cscatter");
  const kernel k_final = prog.get_kernel("rs_final");

  // Tiles (one work-group each) or chunks (one work-item each).
  std::uint64_t parts = 0, chunk = 0;
  if (tiled) {
    parts = (n + p.tile() - 1) / p.tile();
    const std::uint64_t max_groups = dev.info().max_groups[0];
    if (max_groups && parts > max_groups)
      throw invalid_argument(fn + ": " + std::to_string(n) + " keys need " + std::to_string(parts) +
                             " work-groups; " + dev.id() + " runs " + std::to_string(max_groups));
  } else {
    const std::uint64_t units = std::max<std::uint32_t>(dev.info().compute_units, 1);
    parts = std::clamp<std::uint64_t>((n + p.cpu_chunk_elems - 1) / p.cpu_chunk_elems, 1,
                                      units * p.cpu_chunks_per_unit);
    chunk = (n + parts - 1) / parts;
    parts = (n + chunk - 1) / chunk;
  }
  // The (digit, part) counts, then (tiled) the sums of the scan's work-groups.
  const std::uint64_t count = 256 * parts, round = std::uint64_t(p.threads) * p.scan_items;
  const std::uint64_t total_rounds = (count + round - 1) / round;
  const std::uint64_t rounds = (total_rounds + p.scan_groups - 1) / p.scan_groups;
  const std::uint64_t scan_groups = (total_rounds + rounds - 1) / rounds;
  // hist: the counts, the scan's sums (tiled), then loc[passes + 1]: where each pass reads
  // (0 input, 1 output, 2 temporary), written by the scatter before it, loc[0] = 0 here.
  const std::uint32_t passes = kb;
  const std::uint64_t loc_at = count + (tiled ? scan_groups : 0);
  const sort_operand hist = fresh(qi, (loc_at + passes + 1) * 8);
  const sort_operand sums{hist.mem, count};
  const std::uint32_t zero = 0;
  fill(qi, *hist.mem, loc_at * 8, &zero, sizeof zero, 2);
  // Keys only, or one pass: unused parameters get the histogram, never read.
  const sort_operand tmp_k = passes > 1 ? fresh(qi, n * kb) : hist;
  const sort_operand tmp_v = passes > 1 && vb ? fresh(qi, n * vb) : hist;
  const sort_operand val_i = vb ? a.values_in : hist, val_o = vb ? r.values : hist;
  const std::uint64_t vn = vb ? n : 0, tn = passes > 1 ? n : 0;
  const std::int32_t kind = order_kind(a.key_type), desc = a.descending ? 1 : 0;
  const std::int32_t has_vals = vb ? 1 : 0;
  const std::uint32_t vw = vb ? vb : 4;

  const local_size group(p.threads);
  const local_size one(1);
  const range* const loc_size = tiled ? &group : &one;
  const range grid(tiled ? parts * p.threads : parts);
  for (std::uint32_t pass = 0; pass < passes; ++pass) {
    // Planned: the passes alternate between the output and the temporary, ending in the output.
    const std::uint32_t plan = (passes - 1 - pass) % 2 == 0 ? 1 : 2;
    const std::uint32_t shift = pass * 8;
    const sort_operand loc{hist.mem, loc_at + pass};
    std::vector<arg_binding> h = {array_arg(a.keys_in, word_type(kb), true, n),
                                  array_arg(r.keys, word_type(kb), true, n),
                                  array_arg(tmp_k, word_type(kb), true, tn),
                                  array_arg(loc, scalar_type::u64, true, 1),
                                  scalar(n),
                                  scalar(shift),
                                  scalar(kind),
                                  scalar(desc),
                                  array_arg(hist, scalar_type::u64, false, count),
                                  scalar(parts)};
    if (!tiled) h.push_back(scalar(chunk));
    launch(*k_hist.impl(), qi, grid, loc_size, h.data(), h.size());
    if (tiled) {
      arg_binding up[] = {array_arg(hist, scalar_type::u64, true, count), scalar(count),
                          scalar(rounds), array_arg(sums, scalar_type::u64, false, scan_groups)};
      launch(*k_scan_up.impl(), qi, range(scan_groups * p.threads), &group, up, 4);
      arg_binding top[] = {array_arg(sums, scalar_type::u64, false, scan_groups),
                           scalar(scan_groups), scalar((scan_groups + round - 1) / round),
                           array_arg(sums, scalar_type::u64, true, 0), scalar(std::int32_t(0))};
      launch(*k_scan.impl(), qi, range(p.threads), &group, top, 5);
      arg_binding down[] = {array_arg(hist, scalar_type::u64, false, count), scalar(count),
                            scalar(rounds), array_arg(sums, scalar_type::u64, true, scan_groups),
                            scalar(std::int32_t(1))};
      launch(*k_scan.impl(), qi, range(scan_groups * p.threads), &group, down, 5);
    } else {
      arg_binding s[] = {array_arg(hist, scalar_type::u64, false, count), scalar(count)};
      launch(*k_scan.impl(), qi, range(1), &one, s, 2);
    }
    std::vector<arg_binding> w = {array_arg(a.keys_in, word_type(kb), true, n),
                                  array_arg(r.keys, word_type(kb), false, n),
                                  array_arg(tmp_k, word_type(kb), false, tn),
                                  array_arg(val_i, word_type(vw), true, vn),
                                  array_arg(val_o, word_type(vw), false, vn),
                                  array_arg(tmp_v, word_type(vw), false, vb ? tn : 0),
                                  scalar(has_vals),
                                  scalar(n),
                                  scalar(shift),
                                  scalar(kind),
                                  scalar(desc),
                                  array_arg(hist, scalar_type::u64, true, count),
                                  scalar(parts)};
    if (!tiled) w.push_back(scalar(chunk));
    w.push_back(array_arg(loc, scalar_type::u64, false, 2));
    w.push_back(scalar(plan));
    launch(*k_scatter.impl(), qi, grid, loc_size, w.data(), w.size());
  }
  // Skipped passes may have left the keys in the input or the temporary.
  std::vector<arg_binding> f = {
      array_arg(a.keys_in, word_type(kb), true, n),
      array_arg(r.keys, word_type(kb), false, n),
      array_arg(tmp_k, word_type(kb), true, tn),
      array_arg(val_i, word_type(vw), true, vn),
      array_arg(val_o, word_type(vw), false, vn),
      array_arg(tmp_v, word_type(vw), true, vb ? tn : 0),
      scalar(has_vals),
      scalar(n),
      array_arg(sort_operand{hist.mem, loc_at + passes}, scalar_type::u64, true, 1)};
  // Grid-stride copy; in the tiled program whole work-groups (the launch counts it as one that
  // uses barriers).
  const std::uint64_t copiers = tiled ? std::min<std::uint64_t>(parts, 4096) * p.threads : parts;
  launch(*k_final.impl(), qi, range(copiers), loc_size, f.data(), f.size());
  return r;
}

}  // namespace kiln::detail
