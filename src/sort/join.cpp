// Device equi-join (join.hpp). The build keys become unsigned order words (-0.0 folded onto
// +0.0, NaN the largest word) carrying their positions, radix-sorted (stable: equal keys keep
// position order); each probe row finds its run of equal words by binary search (jn_count);
// an exclusive scan of the run lengths gives each probe row's first output row; the host reads
// the total (the one wait); then one work-item per output row finds its probe row by binary
// search over those offsets and its build row in the sorted positions (jn_emit), so one key
// matching millions of rows spreads over as many work-items and writes stay coalesced. No
// barriers: every backend runs the same kernels.
#include "sort/join.hpp"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "kiln/error.hpp"
#include "kiln/kernel.hpp"
#include "sort/words.hpp"

namespace kiln::detail {
namespace {

const std::string fn = "kiln join";

constexpr const char* kernels_text = R"(
#define JN_TOP ((KEY_T)((KEY_T)1 << (JN_KBITS - 1)))
// kind: 0 unsigned (and bool), 1 signed, 2 IEEE float.
KILN_FUNC bool jn_nan(KEY_T k, int32_t kind) {
  return kind == 2 && (KEY_T)(k & (KEY_T)~JN_TOP) > (KEY_T)JN_INF;
}
// The key's ascending order as an unsigned word; equal keys (== on floats) give equal words:
// -0.0 is folded onto +0.0. NaN gives the largest word (the search never looks for it).
KILN_FUNC KEY_T jn_order(KEY_T k, int32_t kind) {
  if (kind == 2) {
    if (jn_nan(k, kind)) return (KEY_T)~(KEY_T)0;
    if (k == JN_TOP) k = 0;
    return (k & JN_TOP) ? (KEY_T)~k : (KEY_T)(k | JN_TOP);
  }
  return kind == 1 ? (KEY_T)(k ^ JN_TOP) : k;
}
KILN_FUNC uint64_t jn_sat_add(uint64_t a, uint64_t b) {
  const uint64_t s = a + b;
  return s < a ? ~(uint64_t)0 : s;
}

// The build side's order words and their positions, for the radix sort.
KILN_KERNEL void jn_prep(KILN_GLOBAL const KEY_T* keys, KILN_GLOBAL KEY_T* words,
                         KILN_GLOBAL PERM_T* pos, uint64_t n, int32_t kind) {
  for (uint64_t i = kiln_global_id(0); i < n; i += kiln_global_size(0)) {
    words[i] = jn_order(keys[i], kind);
    pos[i] = (PERM_T)i;
  }
}

// Per probe row: where its run of equal build words starts (first; UINT64_MAX for none) and
// how many output rows it has (counts; a left join gives an unmatched row one). counts[np] = 0,
// so that the scan leaves the total there.
KILN_KERNEL void jn_count(KILN_GLOBAL const KEY_T* probe, KILN_GLOBAL const KEY_T* sorted,
                          uint64_t nb, uint64_t np, int32_t kind, int32_t left,
                          KILN_GLOBAL uint64_t* first, KILN_GLOBAL uint64_t* counts) {
  for (uint64_t i = kiln_global_id(0); i < np; i += kiln_global_size(0)) {
    const KEY_T k = probe[i];
    uint64_t lo = 0, c = 0;
    if (!jn_nan(k, kind)) {
      const KEY_T w = jn_order(k, kind);
      uint64_t hi = nb;
      while (lo < hi) {
        const uint64_t mid = lo + (hi - lo) / 2;
        if (sorted[mid] < w) lo = mid + 1; else hi = mid;
      }
      uint64_t end = lo;
      hi = nb;
      while (end < hi) {
        const uint64_t mid = end + (hi - end) / 2;
        if (sorted[mid] <= w) end = mid + 1; else hi = mid;
      }
      c = end - lo;
    }
    first[i] = c ? lo : ~(uint64_t)0;
    counts[i] = c == 0 && left ? (uint64_t)1 : c;
  }
  if (kiln_global_id(0) == 0) counts[np] = 0;
}

// In-place exclusive scan of n 64-bit counts in chunks of `chunk` (one work-item per chunk,
// walked in order), sums saturating at UINT64_MAX: jn_scan_reduce sums each chunk, the sums
// are scanned the same way, jn_scan_apply scans each chunk from its carry.
KILN_KERNEL void jn_scan_reduce(KILN_GLOBAL const uint64_t* x, uint64_t n, uint64_t chunk,
                                uint64_t chunks, KILN_GLOBAL uint64_t* sums) {
  for (uint64_t c = kiln_global_id(0); c < chunks; c += kiln_global_size(0)) {
    const uint64_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;
    uint64_t s = 0;
    for (uint64_t j = lo; j < hi; ++j) s = jn_sat_add(s, x[j]);
    sums[c] = s;
  }
}
KILN_KERNEL void jn_scan_apply(KILN_GLOBAL uint64_t* x, uint64_t n, uint64_t chunk,
                               uint64_t chunks, KILN_GLOBAL const uint64_t* carry,
                               int32_t has_carry) {
  for (uint64_t c = kiln_global_id(0); c < chunks; c += kiln_global_size(0)) {
    const uint64_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;
    uint64_t run = has_carry ? carry[c] : (uint64_t)0;
    for (uint64_t j = lo; j < hi; ++j) {
      const uint64_t v = x[j];
      x[j] = run;
      run = jn_sat_add(run, v);
    }
  }
}

// One work-item per output row r: its probe row i is the last with offs[i] <= r (offs[0] = 0,
// offs[np] = total > r), its build row the (r - offs[i])-th of i's run.
KILN_KERNEL void jn_emit(KILN_GLOBAL const uint64_t* offs, KILN_GLOBAL const uint64_t* first,
                         KILN_GLOBAL const PERM_T* perm, uint64_t np, uint64_t total,
                         KILN_GLOBAL uint64_t* out_p, KILN_GLOBAL uint64_t* out_b) {
  for (uint64_t r = kiln_global_id(0); r < total; r += kiln_global_size(0)) {
    uint64_t lo = 0, hi = np;
    while (hi - lo > 1) {
      const uint64_t mid = lo + (hi - lo) / 2;
      if (offs[mid] <= r) lo = mid; else hi = mid;
    }
    const uint64_t f = first[lo];
    out_p[r] = lo;
    out_b[r] = f == ~(uint64_t)0 ? f : (uint64_t)perm[f + (r - offs[lo])];
  }
}

// A left join with an empty build side: every probe row once, unmatched.
KILN_KERNEL void jn_unmatched(KILN_GLOBAL uint64_t* out_p, KILN_GLOBAL uint64_t* out_b,
                              uint64_t n) {
  for (uint64_t i = kiln_global_id(0); i < n; i += kiln_global_size(0)) {
    out_p[i] = i;
    out_b[i] = ~(uint64_t)0;
  }
}
)";

// Grid-stride kernels launch at most this many work-items (within every device's group limit).
constexpr std::uint64_t max_items = std::uint64_t(1) << 24;

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

std::string instantiate(std::uint32_t kb, std::uint32_t pb) {
  std::string s = "#define JN_KBITS " + std::to_string(kb * 8) + "\n#define JN_INF " +
                  (kb == 4   ? "0x7F800000u"
                   : kb == 8 ? "0x7FF0000000000000ull"
                             : "0") +
                  "\n" + kernels_text;
  // The parser reads parameter types before any macro expands: spell the words out.
  replace_all(s, "KEY_T", word_name(kb));
  replace_all(s, "PERM_T", word_name(pb));
  return s;
}

// x must be memory of q's device holding n elements of `elem` bytes from its offset; with no
// memory, n must be 0.
void check_array(const queue_impl& q, const sort_operand& x, std::uint64_t n, std::uint32_t elem,
                 const char* name) {
  check_operand(fn, q, x, n, elem, name, true);
}

std::uint64_t room(const sort_operand& x) {
  const std::uint64_t have = x.mem ? x.mem->bytes / 8 : 0;
  return x.offset > have ? 0 : have - x.offset;
}

std::shared_ptr<memory_impl> fresh(queue_impl& q, std::uint64_t bytes) {
  return allocate_on(q, std::max<std::uint64_t>(bytes, 1));
}

range items(std::uint64_t n) { return range(std::clamp<std::uint64_t>(n, 1, max_items)); }

void check_rows(std::uint64_t rows) {
  if (rows <= join_max_rows) return;
  throw invalid_argument(fn + ": the join has " +
                         (rows == UINT64_MAX ? std::string("at least ") : std::string()) +
                         std::to_string(rows) + " output rows, more than the 2^40 (" +
                         std::to_string(join_max_rows) + ") it may produce");
}

// The outputs for `rows` rows: the caller's when both have room, else allocated exactly.
void place(queue_impl& q, const join_args& a, std::uint64_t rows, join_result& r) {
  r.count = rows;
  if (a.probe_out.mem && a.build_out.mem && room(a.probe_out) >= rows &&
      room(a.build_out) >= rows) {
    r.probe_index = a.probe_out.mem;
    r.probe_offset = a.probe_out.offset;
    r.build_index = a.build_out.mem;
    r.build_offset = a.build_out.offset;
    return;
  }
  r.probe_index = fresh(q, rows * 8);
  r.build_index = fresh(q, rows * 8);
}

// Exclusive scan of x[0, n) in place (see the kernels); the sums of the chunks recursively.
void scan(queue_impl& q, const program& prog, const std::shared_ptr<memory_impl>& x,
          std::uint64_t n, std::uint64_t chunk) {
  const std::uint64_t chunks = (n + chunk - 1) / chunk;
  std::shared_ptr<memory_impl> sums;
  if (chunks > 1) {
    sums = fresh(q, chunks * 8);
    arg_binding r[] = {array_arg({x, 0}, scalar_type::u64, true, n), bind_arg(n), bind_arg(chunk),
                       bind_arg(chunks), array_arg({sums, 0}, scalar_type::u64, false, chunks)};
    launch(*prog.get_kernel("jn_scan_reduce").impl(), q, items(chunks), nullptr, r, 5);
    scan(q, prog, sums, chunks, chunk);
  }
  const std::int32_t has_carry = sums ? 1 : 0;
  arg_binding s[] = {array_arg({x, 0}, scalar_type::u64, false, n),
                     bind_arg(n),
                     bind_arg(chunk),
                     bind_arg(chunks),
                     array_arg({sums ? sums : x, 0}, scalar_type::u64, true, sums ? chunks : 0),
                     bind_arg(has_carry)};
  launch(*prog.get_kernel("jn_scan_apply").impl(), q, items(chunks), nullptr, s, 6);
}

}  // namespace

const std::string& join_source(std::uint32_t key_bytes, std::uint32_t perm_bytes) {
  static std::string cache[4][2];
  static std::once_flag once[4][2];
  const int k = key_bytes == 1 ? 0 : key_bytes == 2 ? 1 : key_bytes == 4 ? 2 : 3;
  const int p = perm_bytes == 8 ? 1 : 0;
  std::call_once(once[k][p], [&] { cache[k][p] = instantiate(1u << k, p ? 8 : 4); });
  return cache[k][p];
}

join_result join_keys(queue& q, const join_args& a) {
  if (!q.impl()) throw_empty_handle(fn.c_str(), "queue");
  queue_impl& qi = *q.impl();
  if (a.key_type == scalar_type::f16 || a.key_type == scalar_type::bf16)
    throw unsupported(fn + ": keys of type " + type_name(a.key_type) +
                      " are not supported (16-bit floats are storage types: join them as float)");
  if (a.kind != join_kind::inner && a.kind != join_kind::left)
    throw invalid_argument(fn + ": kind " + std::to_string(static_cast<int>(a.kind)) +
                           " is neither inner nor left");
  const std::uint64_t nb = a.build_n, np = a.probe_n;
  if (nb > UINT64_MAX / 16 || np > UINT64_MAX / 16)
    throw invalid_argument(fn + ": build_n " + std::to_string(nb) + " or probe_n " +
                           std::to_string(np) + " is too large");
  const auto kb = static_cast<std::uint32_t>(size_of(a.key_type));
  check_array(qi, a.build_keys, nb, kb, "build_keys");
  check_array(qi, a.probe_keys, np, kb, "probe_keys");
  check_array(qi, a.probe_out, 0, 8, "probe_out");
  check_array(qi, a.build_out, 0, 8, "build_out");
  if (a.probe_out.mem && a.probe_out.mem == a.build_out.mem)
    throw invalid_argument(fn +
                           ": probe_out and build_out are one allocation (they would "
                           "overlap)");
  const bool left = a.kind == join_kind::left;
  const std::int32_t kind = order_kind(a.key_type);

  join_result r;
  // Counts known without the device: no wait.
  if (np == 0 || (nb == 0 && !left)) {
    place(qi, a, 0, r);
    return r;
  }
  const std::uint32_t pb = nb > 0xFFFFFFFFull ? 8 : 4;
  const device& dev = q.get_device();
  const program prog = program::compile(dev, join_source(kb, pb), {}, check_mode::off);
  if (nb == 0) {
    check_rows(np);
    place(qi, a, np, r);
    arg_binding u[] = {array_arg({r.probe_index, r.probe_offset}, scalar_type::u64, false, np),
                       array_arg({r.build_index, r.build_offset}, scalar_type::u64, false, np),
                       bind_arg(np)};
    launch(*prog.get_kernel("jn_unmatched").impl(), qi, items(np), nullptr, u, 3);
    return r;
  }

  // The build side sorted by order word, carrying positions.
  radix_sorted sorted;
  {
    const auto words = fresh(qi, nb * kb), pos = fresh(qi, nb * pb);
    arg_binding p[] = {array_arg({a.build_keys.mem, a.build_keys.offset}, word_type(kb), true, nb),
                       array_arg({words, 0}, word_type(kb), false, nb),
                       array_arg({pos, 0}, word_type(pb), false, nb), bind_arg(nb), bind_arg(kind)};
    launch(*prog.get_kernel("jn_prep").impl(), qi, items(nb), nullptr, p, 5);
    radix_sort_args s;
    s.key_type = word_type(kb);
    s.n = nb;
    s.keys_in = {words, 0};
    s.value_bytes = pb;
    s.values_in = {pos, 0};
    sorted = radix_sort(q, s);
  }

  // Each probe row's run, then its first output row (offs[np]: the total).
  const auto first = fresh(qi, np * 8), offs = fresh(qi, (np + 1) * 8);
  {
    const std::int32_t is_left = left ? 1 : 0;
    arg_binding c[] = {array_arg({a.probe_keys.mem, a.probe_keys.offset}, word_type(kb), true, np),
                       array_arg({sorted.keys.mem, sorted.keys.offset}, word_type(kb), true, nb),
                       bind_arg(nb),
                       bind_arg(np),
                       bind_arg(kind),
                       bind_arg(is_left),
                       array_arg({first, 0}, scalar_type::u64, false, np),
                       array_arg({offs, 0}, scalar_type::u64, false, np + 1)};
    launch(*prog.get_kernel("jn_count").impl(), qi, items(np), nullptr, c, 8);
  }
  // Long serial chunks on CPU devices (few cores), short ones for a GPU's many work-items.
  scan(qi, prog, offs, np + 1, dev.info().type == device_type::cpu ? 8192 : 256);

  // The one host wait: the row count sizes the outputs.
  std::uint64_t total = 0;
  copy_d2h(qi, &total, *offs, np * 8, 8);
  q.finish();
  check_rows(total);
  place(qi, a, total, r);
  if (total == 0) return r;
  arg_binding e[] = {array_arg({offs, 0}, scalar_type::u64, true, np + 1),
                     array_arg({first, 0}, scalar_type::u64, true, np),
                     array_arg({sorted.values.mem, sorted.values.offset}, word_type(pb), true, nb),
                     bind_arg(np),
                     bind_arg(total),
                     array_arg({r.probe_index, r.probe_offset}, scalar_type::u64, false, total),
                     array_arg({r.build_index, r.build_offset}, scalar_type::u64, false, total)};
  launch(*prog.get_kernel("jn_emit").impl(), qi, items(total), nullptr, e, 7);
  return r;
}

}  // namespace kiln::detail
