// The radix sort's kernels in Kiln's portable kernel language. One text per key width (KEY_T:
// the key's bits as an unsigned word) and value width (VAL_T); the key's kind (unsigned, signed,
// float) and the direction are run-time arguments, so every key type of one width shares a
// program. Keys are moved as raw bits; rs_order maps them to an unsigned order on the fly.
//
// Tiled path (barriers): per 8-bit digit pass, rs_hist counts each tile's digits in local
// memory into hist[digit * tiles + tile]; rs_scan_up and rs_scan turn hist into exclusive
// offsets (reduce, scan of the sums, scan); rs_scatter sorts its tile by the digit in local
// memory, stably, by four 2-bit splits (a block scan of four 16-bit counters packed in one word
// each), then writes each key to its digit's offset plus its rank among the tile's keys of that
// digit.
// Chunked path (the CPU backend, no barriers): the same three steps with one work-item per
// contiguous chunk of keys, walked in order (stable by construction).
// Both: a pass whose digit is the same for every key writes nothing (the scatter sees it in
// the scanned counts); loc[] on the device says where each pass reads, and rs_final copies
// into the output when the last pass that moved keys left them elsewhere. No host wait.
#include <mutex>
#include <string>
#include <string_view>

#include "sort/radix_sort.hpp"

namespace kiln::detail {
namespace {

// kind: 0 unsigned (and bool), 1 signed, 2 IEEE float. NaN maps to the largest word in both
// directions; descending inverts every other key, so -0.0 and +0.0 stay distinct and in order.
constexpr const char* order_text = R"(
KILN_FUNC KEY_T rs_order(KEY_T k, int32_t kind, int32_t desc) {
  const KEY_T top = (KEY_T)((KEY_T)1 << (RS_KBITS - 1));
  KEY_T u = k;
  if (kind == 2) {
    if ((KEY_T)(k & (KEY_T)~top) > (KEY_T)RS_INF) return (KEY_T)~(KEY_T)0;
    u = (k & top) ? (KEY_T)~k : (KEY_T)(k | top);
  } else if (kind == 1) {
    u = (KEY_T)(k ^ top);
  }
  return desc ? (KEY_T)~u : u;
}
KILN_FUNC uint32_t rs_digit(KEY_T k, uint32_t shift, int32_t kind, int32_t desc) {
  return (uint32_t)((rs_order(k, kind, desc) >> shift) & (KEY_T)255);
}
// Whether every key has digit d, from the scanned counts (start of d at 0, of d + 1 at n).
KILN_FUNC bool rs_all_in(KILN_GLOBAL const uint64_t* hist, uint64_t parts, uint64_t n, uint32_t d) {
  return hist[d * parts] == 0 && (d == 255 ? n : hist[(d + 1) * parts]) == n;
}
// Where a pass's keys live: 0 the input, 1 the output, 2 the temporary (loc[pass] on the
// device: a pass whose digit is the same for every key moves nothing). Pointers by code:
#define RS_PICK(w, i, a, b) ((w) == 0 ? (i) : (w) == 1 ? (a) : (b))
// The copy into the output after the last pass, when the keys are elsewhere (passes skipped).
KILN_KERNEL void rs_final(KILN_GLOBAL const KEY_T* ki, KILN_GLOBAL KEY_T* ka,
                          KILN_GLOBAL const KEY_T* kb, KILN_GLOBAL const VAL_T* vi,
                          KILN_GLOBAL VAL_T* va, KILN_GLOBAL const VAL_T* vb, int32_t has_vals,
                          uint64_t n, KILN_GLOBAL const uint64_t* loc) {
  const uint64_t w = loc[0];
  if (w == 1) return;
  KILN_GLOBAL const KEY_T* ks = w == 0 ? ki : kb;
  KILN_GLOBAL const VAL_T* vs = w == 0 ? vi : vb;
  for (uint64_t i = kiln_global_id(0); i < n; i += kiln_global_size(0)) {
    ka[i] = ks[i];
    if (has_vals) va[i] = vs[i];
  }
}
)";

// Exclusive scan of the uint64_t x over the work-group in s[RS_B] (Hillis-Steele); every item
// gets its exclusive prefix and the total. Starts and ends with all of s free.
constexpr const char* block_scan_text = R"(
#define RS_BLOCK_SCAN(s, t, x, excl, total)                                   \
  s[t] = x;                                                                   \
  kiln_barrier();                                                             \
  for (uint32_t rs_o = 1; rs_o < RS_B; rs_o <<= 1) {                          \
    const uint64_t rs_y = t >= rs_o ? s[t - rs_o] : (uint64_t)0;              \
    kiln_barrier();                                                           \
    s[t] += rs_y;                                                             \
    kiln_barrier();                                                           \
  }                                                                           \
  excl = s[t] - x;                                                            \
  total = s[RS_B - 1];                                                        \
  kiln_barrier();
)";

constexpr const char* tiled_text = R"(
KILN_KERNEL void rs_hist(KILN_GLOBAL const KEY_T* ki, KILN_GLOBAL const KEY_T* ka,
                         KILN_GLOBAL const KEY_T* kb, KILN_GLOBAL const uint64_t* loc, uint64_t n,
                         uint32_t shift, int32_t kind, int32_t desc, KILN_GLOBAL uint64_t* hist,
                         uint64_t tiles) {
  KILN_LOCAL uint32_t h[256];
  KILN_GLOBAL const KEY_T* keys = RS_PICK(loc[0], ki, ka, kb);
  const uint32_t t = (uint32_t)kiln_local_id(0);
  const uint64_t tile = kiln_group_id(0);
  for (uint32_t d = t; d < 256; d += RS_B) h[d] = 0;
  kiln_barrier();
  const uint64_t base = tile * RS_TILE;
  for (uint32_t i = 0; i < RS_IT; ++i) {
    const uint64_t j = base + i * RS_B + t;
    if (j < n) kiln_atomic_add(&h[rs_digit(keys[j], shift, kind, desc)], 1u);
  }
  kiln_barrier();
  for (uint32_t d = t; d < 256; d += RS_B) hist[d * tiles + tile] = h[d];
}

// The exclusive scan of hist over (digit, tile), in rounds of RS_B * RS_SIT entries: rs_scan_up
// sums `rounds` consecutive rounds per work-group into sums[group]; rs_scan (one work-group,
// no carry) scans those sums in place; rs_scan (a work-group per `rounds` rounds, carry from
// sums) then writes the offsets. Rounds load and store striped (coalesced) through buf and
// scan blocked (item t: RS_SIT consecutive entries).
KILN_KERNEL void rs_scan_up(KILN_GLOBAL const uint64_t* hist, uint64_t count, uint64_t rounds,
                            KILN_GLOBAL uint64_t* sums) {
  KILN_LOCAL uint64_t s[RS_B];
  const uint32_t t = (uint32_t)kiln_local_id(0);
  const uint64_t g = kiln_group_id(0);
  const uint64_t lo = g * rounds * (RS_B * RS_SIT), hi = lo + rounds * (RS_B * RS_SIT);
  uint64_t sum = 0, excl, total;
  for (uint64_t j = lo + t; j < hi && j < count; j += RS_B) sum += hist[j];
  RS_BLOCK_SCAN(s, t, sum, excl, total)
  (void)excl;
  if (t == 0) sums[g] = total;
}

KILN_KERNEL void rs_scan(KILN_GLOBAL uint64_t* hist, uint64_t count, uint64_t rounds,
                         KILN_GLOBAL const uint64_t* sums, int32_t has_carry) {
  KILN_LOCAL uint64_t s[RS_B];
  KILN_LOCAL uint64_t buf[RS_B * RS_SIT];
  const uint32_t t = (uint32_t)kiln_local_id(0);
  const uint64_t g = kiln_group_id(0);
  uint64_t carry = has_carry ? sums[g] : (uint64_t)0;
  const uint64_t lo = g * rounds * (RS_B * RS_SIT), hi = lo + rounds * (RS_B * RS_SIT);
  for (uint64_t base = lo; base < hi && base < count; base += RS_B * RS_SIT) {
    for (uint32_t i = 0; i < RS_SIT; ++i) {
      const uint64_t j = base + i * RS_B + t;
      buf[i * RS_B + t] = j < count ? hist[j] : (uint64_t)0;
    }
    kiln_barrier();
    uint64_t sum = 0, excl, total;
    for (uint32_t i = 0; i < RS_SIT; ++i) sum += buf[t * RS_SIT + i];
    RS_BLOCK_SCAN(s, t, sum, excl, total)
    uint64_t run = carry + excl;
    for (uint32_t i = 0; i < RS_SIT; ++i) {
      const uint64_t v = buf[t * RS_SIT + i];
      buf[t * RS_SIT + i] = run;
      run += v;
    }
    kiln_barrier();
    for (uint32_t i = 0; i < RS_SIT; ++i) {
      const uint64_t j = base + i * RS_B + t;
      if (j < count) hist[j] = buf[i * RS_B + t];
    }
    carry += total;
    kiln_barrier();
  }
}

// plan: where this pass writes (1 or 2) unless its source is there already (then the other).
KILN_KERNEL void rs_scatter(KILN_GLOBAL const KEY_T* ki, KILN_GLOBAL KEY_T* ka,
                            KILN_GLOBAL KEY_T* kb, KILN_GLOBAL const VAL_T* vi,
                            KILN_GLOBAL VAL_T* va, KILN_GLOBAL VAL_T* vb, int32_t has_vals,
                            uint64_t n, uint32_t shift, int32_t kind, int32_t desc,
                            KILN_GLOBAL const uint64_t* hist, uint64_t tiles,
                            KILN_GLOBAL uint64_t* loc, uint32_t plan) {
  KILN_LOCAL KEY_T sk[RS_TILE];
  KILN_LOCAL VAL_T sv[RS_TILE];
  KILN_LOCAL uint64_t s[RS_B];
  KILN_LOCAL uint32_t dstart[256];
  KILN_LOCAL uint64_t goff[256];
  KILN_LOCAL uint32_t same;
  const uint32_t t = (uint32_t)kiln_local_id(0);
  const uint64_t tile = kiln_group_id(0);
  const uint64_t w = loc[0], to = w == plan ? 3 - plan : plan;
  if (t == 0) same = 0;
  kiln_barrier();
  for (uint32_t d = t; d < 256; d += RS_B)
    if (rs_all_in(hist, tiles, n, d)) same = 1;
  kiln_barrier();
  if (tile == 0 && t == 0) loc[1] = same ? w : to;
  if (same) return;  // every group and item alike
  KILN_GLOBAL const KEY_T* kin = RS_PICK(w, ki, (KILN_GLOBAL const KEY_T*)ka, kb);
  KILN_GLOBAL const VAL_T* vin = RS_PICK(w, vi, (KILN_GLOBAL const VAL_T*)va, vb);
  KILN_GLOBAL KEY_T* kout = to == 1 ? ka : kb;
  KILN_GLOBAL VAL_T* vout = to == 1 ? va : vb;
  const uint64_t base = tile * RS_TILE;
  const uint32_t cnt = (uint32_t)(n - base < (uint64_t)RS_TILE ? n - base : (uint64_t)RS_TILE);
  for (uint32_t i = 0; i < RS_IT; ++i) {
    const uint32_t p = i * RS_B + t;
    if (p < cnt) {
      sk[p] = kin[base + p];
      if (has_vals) sv[p] = vin[base + p];
    }
  }
  for (uint32_t d = t; d < 256; d += RS_B) goff[d] = hist[d * tiles + tile];
  kiln_barrier();
  // Four stable 2-bit splits sort the tile by the digit. Item t holds positions t*RS_IT + i
  // (in order); positions >= cnt hold no key and always take bucket 3, so they stay last.
  for (uint32_t b = 0; b < 8; b += 2) {
    KEY_T k[RS_IT];
    VAL_T v[RS_IT];
    uint32_t c[RS_IT];
    uint64_t mine = 0, excl, total;
    for (uint32_t i = 0; i < RS_IT; ++i) {
      const uint32_t p = t * RS_IT + i;
      k[i] = sk[p];
      if (has_vals) v[i] = sv[p];
      c[i] = p < cnt ? (rs_digit(k[i], shift, kind, desc) >> b) & 3u : 3u;
      mine += (uint64_t)1 << (16 * c[i]);
    }
    RS_BLOCK_SCAN(s, t, mine, excl, total)
    const uint32_t t0 = (uint32_t)(total & 0xFFFF), t1 = (uint32_t)((total >> 16) & 0xFFFF);
    const uint32_t t2 = (uint32_t)((total >> 32) & 0xFFFF);
    uint64_t run = excl;
    for (uint32_t i = 0; i < RS_IT; ++i) {
      const uint32_t start = c[i] == 0 ? 0 : c[i] == 1 ? t0 : c[i] == 2 ? t0 + t1 : t0 + t1 + t2;
      const uint32_t q = start + (uint32_t)((run >> (16 * c[i])) & 0xFFFF);
      run += (uint64_t)1 << (16 * c[i]);
      sk[q] = k[i];
      if (has_vals) sv[q] = v[i];
    }
    kiln_barrier();
  }
  // Where each digit's run starts in the sorted tile.
  for (uint32_t i = 0; i < RS_IT; ++i) {
    const uint32_t p = i * RS_B + t;
    if (p < cnt) {
      const uint32_t d = rs_digit(sk[p], shift, kind, desc);
      if (p == 0 || rs_digit(sk[p - 1], shift, kind, desc) != d) dstart[d] = p;
    }
  }
  kiln_barrier();
  for (uint32_t i = 0; i < RS_IT; ++i) {
    const uint32_t p = i * RS_B + t;
    if (p < cnt) {
      const uint32_t d = rs_digit(sk[p], shift, kind, desc);
      const uint64_t dst = goff[d] + (p - dstart[d]);
      kout[dst] = sk[p];
      if (has_vals) vout[dst] = sv[p];
    }
  }
}
)";

constexpr const char* chunked_text = R"(
KILN_KERNEL void rs_chist(KILN_GLOBAL const KEY_T* ki, KILN_GLOBAL const KEY_T* ka,
                          KILN_GLOBAL const KEY_T* kb, KILN_GLOBAL const uint64_t* loc, uint64_t n,
                          uint32_t shift, int32_t kind, int32_t desc, KILN_GLOBAL uint64_t* hist,
                          uint64_t chunks, uint64_t chunk) {
  const uint64_t c = kiln_global_id(0);
  KILN_GLOBAL const KEY_T* keys = RS_PICK(loc[0], ki, ka, kb);
  uint64_t h[256];
  for (uint32_t d = 0; d < 256; ++d) h[d] = 0;
  const uint64_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;
  for (uint64_t i = lo; i < hi; ++i) ++h[rs_digit(keys[i], shift, kind, desc)];
  for (uint32_t d = 0; d < 256; ++d) hist[d * chunks + c] = h[d];
}

KILN_KERNEL void rs_cscan(KILN_GLOBAL uint64_t* hist, uint64_t count) {
  uint64_t run = 0;
  for (uint64_t j = 0; j < count; ++j) {
    const uint64_t v = hist[j];
    hist[j] = run;
    run += v;
  }
}

KILN_KERNEL void rs_cscatter(KILN_GLOBAL const KEY_T* ki, KILN_GLOBAL KEY_T* ka,
                             KILN_GLOBAL KEY_T* kb, KILN_GLOBAL const VAL_T* vi,
                             KILN_GLOBAL VAL_T* va, KILN_GLOBAL VAL_T* vb, int32_t has_vals,
                             uint64_t n, uint32_t shift, int32_t kind, int32_t desc,
                             KILN_GLOBAL const uint64_t* hist, uint64_t chunks, uint64_t chunk,
                             KILN_GLOBAL uint64_t* loc, uint32_t plan) {
  const uint64_t c = kiln_global_id(0);
  const uint64_t w = loc[0], to = w == plan ? 3 - plan : plan;
  bool same = false;
  for (uint32_t d = 0; d < 256; ++d) same = same || rs_all_in(hist, chunks, n, d);
  if (c == 0) loc[1] = same ? w : to;
  if (same) return;
  KILN_GLOBAL const KEY_T* kin = RS_PICK(w, ki, (KILN_GLOBAL const KEY_T*)ka, kb);
  KILN_GLOBAL const VAL_T* vin = RS_PICK(w, vi, (KILN_GLOBAL const VAL_T*)va, vb);
  KILN_GLOBAL KEY_T* kout = to == 1 ? ka : kb;
  KILN_GLOBAL VAL_T* vout = to == 1 ? va : vb;
  uint64_t off[256];
  for (uint32_t d = 0; d < 256; ++d) off[d] = hist[d * chunks + c];
  const uint64_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;
  if (has_vals) {
    for (uint64_t i = lo; i < hi; ++i) {
      const KEY_T k = kin[i];
      const uint64_t dst = off[rs_digit(k, shift, kind, desc)]++;
      kout[dst] = k;
      vout[dst] = vin[i];
    }
  } else {
    for (uint64_t i = lo; i < hi; ++i) {
      const KEY_T k = kin[i];
      kout[off[rs_digit(k, shift, kind, desc)]++] = k;
    }
  }
}
)";

const char* word(std::uint32_t bytes) {
  return bytes == 1 ? "uint8_t" : bytes == 2 ? "uint16_t" : bytes == 4 ? "uint32_t" : "uint64_t";
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

std::string instantiate(bool tiled, std::uint32_t kb, std::uint32_t vb) {
  const radix_sort_policy& p = radix_policy;
  std::string s = "#define RS_KBITS " + std::to_string(kb * 8) + "\n#define RS_INF " +
                  (kb == 4   ? "0x7F800000u"
                   : kb == 8 ? "0x7FF0000000000000ull"
                             : "0") +
                  "\n";
  if (tiled)
    s += "#define RS_B " + std::to_string(p.threads) + "\n#define RS_IT " +
         std::to_string(p.items) + "\n#define RS_TILE " + std::to_string(p.tile()) +
         "\n#define RS_SIT " + std::to_string(p.scan_items) + "\n" + block_scan_text;
  s += order_text;
  s += tiled ? tiled_text : chunked_text;
  // The parser reads parameter types before any macro expands: spell the words out.
  replace_all(s, "KEY_T", word(kb));
  replace_all(s, "VAL_T", word(vb));
  return s;
}

}  // namespace

const std::string& radix_sort_source(bool tiled, std::uint32_t key_bytes,
                                     std::uint32_t value_bytes) {
  static_assert(radix_policy.tile() <= 65535, "rank counters are 16 bits");
  static std::string cache[2][4][2];
  static std::once_flag once[2][4][2];
  const int k = key_bytes == 1 ? 0 : key_bytes == 2 ? 1 : key_bytes == 4 ? 2 : 3;
  const int v = value_bytes == 8 ? 1 : 0;
  std::call_once(once[tiled][k][v],
                 [&] { cache[tiled][k][v] = instantiate(tiled, key_bytes, v ? 8 : 4); });
  return cache[tiled][k][v];
}

}  // namespace kiln::detail
