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
#include "sort/words.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

const std::string fn = "kiln hash_group";

std::string name(scalar_type t) { return type_name(stored_type(t)); }

bool is_float(scalar_type t) { return t == scalar_type::f32 || t == scalar_type::f64; }
bool is_signed(scalar_type t) {
  return t == scalar_type::i8 || t == scalar_type::i16 || t == scalar_type::i32 ||
         t == scalar_type::i64;
}
bool is_integer(scalar_type t) { return !is_float(t) && !is_reduced_float(t); }  // bool too

// A float min/max: ordered through its bits (the input is bound as its word).
bool float_order(const run_value& v) {
  return (v.op == run_op::min || v.op == run_op::max) && is_float(v.type);
}
// A float min/max whose result type differs: its bits go through a temporary and hg_conv<j>.
bool needs_conv(const run_value& v) { return float_order(v) && v.out_type != v.type; }

constexpr const char* helpers = R"(
KILN_FUNC uint64_t hg_mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}
// NaNs below everything (min) or above (max), so that they propagate.
KILN_FUNC uint64_t hg_ord32(uint32_t b, int32_t is_max) {
  if ((b & 0x7FFFFFFFu) > 0x7F800000u) return is_max ? 0xFFFFFFFFull : 0ull;
  return (uint64_t)((b & 0x80000000u) ? (uint32_t)~b : (b | 0x80000000u));
}
KILN_FUNC uint64_t hg_ord64(uint64_t b, int32_t is_max) {
  if ((b & 0x7FFFFFFFFFFFFFFFull) > 0x7FF0000000000000ull) return is_max ? ~0ull : 0ull;
  return (b & 0x8000000000000000ull) ? ~b : (b | 0x8000000000000000ull);
}
KILN_FUNC uint32_t hg_bits32(uint64_t img) {
  const uint32_t o = (uint32_t)img;
  return (o & 0x80000000u) ? (o & 0x7FFFFFFFu) : (uint32_t)~o;
}
KILN_FUNC uint64_t hg_bits64(uint64_t o) {
  return (o & 0x8000000000000000ull) ? (o & 0x7FFFFFFFFFFFFFFFull) : ~o;
}
// The key's word, canonical for floats (kind 2).
KILN_FUNC uint64_t hg_canon(KEY_T k, int32_t kind) {
  if (kind == 2) {
    const KEY_T mag = (KEY_T)(k & (KEY_T)HG_MAG);
    if (mag > (KEY_T)HG_INF) return HG_NAN;
    if (mag == 0) return 0;
  }
  return (uint64_t)k;
}
)";

// Finds or claims key k's slot; HG_NONE when the table gives up (more than max_groups keys
// claimed, or a full probe sequence), after raising meta[1].
std::string find_text(bool wide) {
  return cat(
      "KILN_FUNC uint64_t hg_find(KILN_GLOBAL uint64_t* slots, uint64_t mask, uint64_t k, "
      "uint64_t max_groups, KILN_GLOBAL uint64_t* meta) {\n",
      wide ? "  if (k == HG_EMPTY) {\n"
             "    if (slots[mask + 1] == HG_EMPTY &&\n"
             "        kiln_atomic_cas(&slots[mask + 1], (uint64_t)HG_EMPTY, (uint64_t)0) == "
             "HG_EMPTY &&\n"
             "        kiln_atomic_add(&meta[0], (uint64_t)1) >= max_groups) {\n"
             "      kiln_atomic_or(&meta[1], (uint64_t)1);\n"
             "      return HG_NONE;\n"
             "    }\n"
             "    return mask + 1;\n"
             "  }\n"
             "  const uint64_t want = k;\n"
           : "  const uint64_t want = k | ((uint64_t)1 << 32);\n",
      "  uint64_t h = hg_mix(k) & mask;\n"
      "  for (uint64_t p = 0; p <= mask; ++p) {\n"
      "    const uint64_t cur = slots[h];\n"
      "    if (cur == want) return h;\n"
      "    if (cur == HG_EMPTY) {\n"
      "      const uint64_t old = kiln_atomic_cas(&slots[h], (uint64_t)HG_EMPTY, want);\n"
      "      if (old == HG_EMPTY) {\n"
      "        if (kiln_atomic_add(&meta[0], (uint64_t)1) >= max_groups) {\n"
      "          kiln_atomic_or(&meta[1], (uint64_t)1);\n"
      "          return HG_NONE;\n"
      "        }\n"
      "        return h;\n"
      "      }\n"
      "      if (old == want) return h;\n"
      "    }\n"
      "    h = (h + 1) & mask;\n"
      "  }\n"
      "  kiln_atomic_or(&meta[1], (uint64_t)1);\n"
      "  return HG_NONE;\n"
      "}\n");
}

// Row i's contribution to column j, as the 64-bit accumulator word.
std::string start(const run_value& v, std::size_t j, const std::string& i) {
  const std::string x = cat("v", num(j), "[", i, "]");
  switch (v.op) {
    case run_op::count: return "(uint64_t)1";
    case run_op::first: return i;
    case run_op::sum:
      return is_signed(v.out_type) ? cat("(uint64_t)(int64_t)(", name(v.out_type), ")", x)
                                   : cat("(uint64_t)(", name(v.out_type), ")", x);
    default: {
      const std::string is_max = v.op == run_op::max ? "1" : "0";
      if (float_order(v))
        return cat(v.type == scalar_type::f32 ? "hg_ord32(" : "hg_ord64(", x, ", ", is_max, ")");
      return is_signed(v.type) ? cat("((uint64_t)(int64_t)", x, " ^ 0x8000000000000000ull)")
                               : cat("(uint64_t)", x);
    }
  }
}

std::string comb(const run_value& v, const std::string& a, const std::string& x) {
  switch (v.op) {
    case run_op::first: return a;  // rows arrive in increasing position within a work-item
    case run_op::min: return cat("(", x, " < ", a, " ? ", x, " : ", a, ")");
    case run_op::max: return cat("(", x, " > ", a, " ? ", x, " : ", a, ")");
    default: return cat("(", a, " + ", x, ")");
  }
}

std::string flush_op(const run_value& v) {
  switch (v.op) {
    case run_op::min:
    case run_op::first: return "kiln_atomic_min";
    case run_op::max: return "kiln_atomic_max";
    default: return "kiln_atomic_add";
  }
}

// Group i's result of column j from its accumulator word a<j>[s].
std::string result(const run_value& v, std::size_t j) {
  const std::string a = cat("a", num(j), "[s]");
  const std::string out = name(v.out_type);
  switch (v.op) {
    case run_op::count: return a;
    case run_op::sum:
      return is_signed(v.out_type) ? cat("(", out, ")(int64_t)", a) : cat("(", out, ")", a);
    case run_op::first: {
      const std::string x = cat("v", num(j), "[", a, "]");
      return v.out_type == scalar_type::boolean ? cat("(uint8_t)(", x, " != 0)")
                                                : cat("(", out, ")", x);
    }
    default:
      if (float_order(v))
        return cat(v.type == scalar_type::f32 ? "hg_bits32(" : "hg_bits64(", a, ")");
      if (is_signed(v.type))
        return cat("(", out, ")(", name(v.type), ")(int64_t)(", a, " ^ 0x8000000000000000ull)");
      return cat("(", out, ")(", name(v.type), ")", a);
  }
}

std::string instantiate(std::uint32_t kb, const std::vector<run_value>& values,
                        std::uint32_t local_slots) {
  const bool wide = kb == 8;
  std::string s = cat("#define HG_MAG ",
                      kb == 4   ? "0x7FFFFFFFu"
                      : kb == 8 ? "0x7FFFFFFFFFFFFFFFull"
                                : "0",
                      "\n#define HG_INF ",
                      kb == 4   ? "0x7F800000u"
                      : kb == 8 ? "0x7FF0000000000000ull"
                                : "0",
                      "\n#define HG_NAN ",
                      kb == 4   ? "0x7FC00000ull"
                      : kb == 8 ? "0x7FF8000000000000ull"
                                : "1ull",
                      "\n#define HG_SIGN ",
                      kb == 4   ? "0x80000000u"
                      : kb == 8 ? "0x8000000000000000ull"
                                : "0",
                      "\n#define HG_EMPTY ", wide ? "0xFFFFFFFFFFFFFFFFull" : "0ull",
                      "\n#define HG_NONE 0xFFFFFFFFFFFFFFFFull\n#define HG_LPROBE 8\n", helpers,
                      find_text(wide));
  const std::size_t k = values.size();
  auto each = [&](auto&& f) {
    std::string out;
    for (std::size_t j = 0; j < k; ++j) out += f(values[j], j);
    return out;
  };
  // Inputs (count has none; float min/max read bits), accumulators, outputs.
  const std::string vin = each([](const run_value& v, std::size_t j) -> std::string {
    if (v.op == run_op::count) return "";
    return cat(", KILN_GLOBAL const ", float_order(v) ? word_name(size_of(v.type)) : name(v.type),
               "* v", num(j));
  });
  auto accs = [&](bool is_const) {
    return each([&](const run_value&, std::size_t j) {
      return cat(", KILN_GLOBAL ", is_const ? "const " : "", "uint64_t* a", num(j));
    });
  };
  const std::string vout = each([](const run_value& v, std::size_t j) {
    return cat(", KILN_GLOBAL ", float_order(v) ? word_name(size_of(v.type)) : name(v.out_type),
               "* o", num(j));
  });
  // Rows [base, end) of item g: chunks of span, stride apart.
  auto rows = [](const std::string& var, const std::string& n, const std::string& body) {
    return cat(
        "  const uint64_t g = kiln_global_id(0);\n"
        "  for (uint64_t base = g * span; base < ",
        n,
        "; base += stride) {\n"
        "    const uint64_t end = ",
        n, " - base < span ? ", n,
        " : base + span;\n"
        "    for (uint64_t ",
        var, " = base; ", var, " < end; ++", var, ") {\n", body, "    }\n  }\n");
  };
  // The run's accumulators r<j> into accumulator array `to`<j> at `at` with `how`.
  auto fold_into = [&](const std::string& to, const std::string& at, const std::string& indent) {
    return each([&](const run_value& v, std::size_t j) {
      return cat(indent, flush_op(v), "(&", to, num(j), "[", at, "], r", num(j), ");\n");
    });
  };
  // Row i: canonical key, float key notes, then the run it continues or starts (flushing the
  // one before with `flush`; `give_up` when the table gives up).
  auto row = [&](const std::string& flush, const std::string& give_up) {
    return cat(
        "      const KEY_T raw = keys[i];\n"
        "      const uint64_t k = hg_canon(raw, kind);\n"
        "      if (kind == 2) {\n"
        "        if (k == HG_NAN) {\n"
        "          if (!saw_nan) kiln_atomic_min(&meta[3], i);\n"
        "          saw_nan = true;\n"
        "        } else if (k == 0 && raw != 0) {\n"
        "          if (!saw_neg) kiln_atomic_or(&meta[2], (uint64_t)1);\n"
        "          saw_neg = true;\n"
        "        }\n"
        "      }\n"
        "      if (have && k == last) {\n",
        each([](const run_value& v, std::size_t j) {
          const std::string r = cat("r", num(j));
          return cat("        ", r, " = ", comb(v, r, start(v, j, "i")), ";\n");
        }),
        "      } else {\n"
        "        if (have) {\n",
        flush, "        }\n",
        give_up.empty()
            ? ""
            : cat("        slot = meta[1] != 0 ? HG_NONE : hg_find(slots, mask, k, max_groups, "
                  "meta);\n"
                  "        if (slot == HG_NONE) ",
                  give_up, "  // given up: the result is not read\n"),
        "        last = k;\n"
        "        have = true;\n",
        each([](const run_value& v, std::size_t j) {
          return cat("        r", num(j), " = ", start(v, j, "i"), ";\n");
        }),
        "      }\n");
  };
  const std::string insert_params = cat(
      "(KILN_GLOBAL const KEY_T* keys, uint64_t n, uint64_t span, uint64_t stride, int32_t kind, "
      "KILN_GLOBAL uint64_t* slots, uint64_t mask, uint64_t max_groups, KILN_GLOBAL uint64_t* meta",
      vin, accs(false), ")");
  const std::string run_state = cat(
      "  uint64_t last = 0, slot = HG_NONE;\n"
      "  bool have = false, saw_nan = false, saw_neg = false;\n",
      each([](const run_value&, std::size_t j) { return cat("  uint64_t r", num(j), " = 0;\n"); }));
  const std::string global_flush = fold_into("a", "slot", "          ");
  s += cat("KILN_KERNEL void hg_insert", insert_params, " {\n", run_state,
           rows("i", "n", row(global_flush, "return;")), "  if (have) {\n", global_flush,
           "  }\n}\n\n");

  // GPUs: each work-group folds its runs into a table of HG_LS keys in local memory (claimed
  // as the global table's are; no global access per row), then adds each entry to its slot in
  // the global table. The item that claims an entry finds its global slot at once (lslot):
  // finding it after the barrier instead lost every claim on PoCL 5 (CPU), as with the PoCL
  // fault reduce_by_key.cpp describes. A run whose key finds no local entry within HG_LPROBE probes
  // (and a 64-bit key equal to "empty") goes to the global table at once. Rows: a grid-stride loop
  // (span 1); every item reaches both barriers.
  if (local_slots && !values.empty()) {
    const std::string lword = wide ? "last" : "(last | ((uint64_t)1 << 32))";
    const std::string local_flush =
        cat("          const uint64_t lw = ", lword,
            ";\n"
            "          bool placed = false;\n"
            "          uint64_t h = hg_mix(last) & (HG_LS - 1);\n"
            "          for (uint32_t p = 0; p < HG_LPROBE && !placed && lw != HG_EMPTY; ++p) {\n"
            "            uint64_t cur = lkey[h];\n"
            "            if (cur == HG_EMPTY) {\n"
            "              cur = kiln_atomic_cas(&lkey[h], (uint64_t)HG_EMPTY, lw);\n"
            "              if (cur == HG_EMPTY) {  // claimed: its global slot, for the end\n"
            "                cur = lw;\n"
            "                lslot[h] = meta[1] != 0 ? HG_NONE : hg_find(slots, mask, last, "
            "max_groups, meta);\n"
            "                if (lslot[h] == HG_NONE) dead = true;\n"
            "              }\n"
            "            }\n"
            "            if (cur == lw) {\n",
            fold_into("la", "h", "              "),
            "              placed = true;\n"
            "            }\n"
            "            h = (h + 1) & (HG_LS - 1);\n"
            "          }\n"
            "          if (!placed) {\n"
            "            slot = meta[1] != 0 ? HG_NONE : hg_find(slots, mask, last, max_groups, "
            "meta);\n"
            "            if (slot == HG_NONE) {\n"
            "              dead = true;  // given up: the result is not read\n"
            "            } else {\n",
            fold_into("a", "slot", "              "),
            "            }\n"
            "          }\n");
    s += cat("#define HG_LS ", num(local_slots), "\n#define HG_B ", num(hash_policy.gpu_group),
             "\n", "KILN_KERNEL void hg_insert_local", insert_params, " {\n",
             "  KILN_LOCAL uint64_t lkey[HG_LS];\n  KILN_LOCAL uint64_t lslot[HG_LS];\n",
             each([](const run_value&, std::size_t j) {
               return cat("  KILN_LOCAL uint64_t la", num(j), "[HG_LS];\n");
             }),
             "  const uint32_t t = (uint32_t)kiln_local_id(0);\n"
             "  for (uint32_t e = t; e < HG_LS; e += HG_B) {\n"
             "    lkey[e] = HG_EMPTY;\n    lslot[e] = HG_NONE;\n",
             each([](const run_value& v, std::size_t j) {
               const bool high = v.op == run_op::min || v.op == run_op::first;
               return cat("    la", num(j), "[e] = ", high ? "~0ull" : "0ull", ";\n");
             }),
             "  }\n"
             "  kiln_barrier();\n"
             "  {\n",
             run_state,
             "  bool dead = false;\n"
             "  for (uint64_t i = kiln_global_id(0); i < n && !dead; i += stride) {\n",
             row(local_flush, ""),
             "  }\n"
             "  if (have && !dead) {\n",
             local_flush,
             "  }\n"
             "  }\n"
             "  kiln_barrier();\n"
             "  for (uint32_t e = t; e < HG_LS; e += HG_B) {\n"
             "    const uint64_t slot = lslot[e];\n"
             "    if (lkey[e] != HG_EMPTY && slot != HG_NONE) {\n",
             each([](const run_value& v, std::size_t j) {
               return cat("      ", flush_op(v), "(&a", num(j), "[slot], la", num(j), "[e]);\n");
             }),
             "    }\n"
             "  }\n}\n\n");
  }

  // CPU devices: each work-item (a contiguous chunk) folds its runs into a private table of
  // HG_PS keys in scratch memory (plain stores: no other item touches it), each entry's global
  // slot found when it is claimed, then adds its table to the global one. A run whose key finds
  // no private entry within HG_LPROBE probes goes to the global table at once.
  if (!values.empty()) {
    const std::string lword = wide ? "last" : "(last | ((uint64_t)1 << 32))";
    auto fold_plain = [&](const std::string& indent) {
      return each([&](const run_value& v, std::size_t j) {
        const std::string acc = cat("pa", num(j), "[h]"), r = cat("r", num(j));
        const std::string f = v.op == run_op::max
                                  ? cat("(", r, " > ", acc, " ? ", r, " : ", acc, ")")
                              : v.op == run_op::min || v.op == run_op::first
                                  ? cat("(", r, " < ", acc, " ? ", r, " : ", acc, ")")
                                  : cat("(", acc, " + ", r, ")");
        return cat(indent, acc, " = ", f, ";\n");
      });
    };
    const std::string priv_flush = cat(
        "          const uint64_t lw = ", lword,
        ";\n"
        "          bool placed = false;\n"
        "          uint64_t h = hg_mix(last) & (HG_PS - 1);\n"
        "          for (uint32_t p = 0; p < HG_LPROBE && !placed && lw != HG_EMPTY; ++p) {\n"
        "            const uint64_t cur = pkey[h];\n"
        "            if (cur == HG_EMPTY) {\n"
        "              pkey[h] = lw;\n"
        "              pslot[h] = meta[1] != 0 ? HG_NONE : hg_find(slots, mask, last, max_groups, "
        "meta);\n"
        "              if (pslot[h] == HG_NONE) dead = true;\n",
        each([](const run_value&, std::size_t j) {
          return cat("              pa", num(j), "[h] = r", num(j), ";\n");
        }),
        "              placed = true;\n"
        "            } else if (cur == lw) {\n",
        fold_plain("              "),
        "              placed = true;\n"
        "            }\n"
        "            h = (h + 1) & (HG_PS - 1);\n"
        "          }\n"
        "          if (!placed) {\n"
        "            slot = meta[1] != 0 ? HG_NONE : hg_find(slots, mask, last, max_groups, "
        "meta);\n"
        "            if (slot == HG_NONE) {\n"
        "              dead = true;  // given up: the result is not read\n"
        "            } else {\n",
        fold_into("a", "slot", "              "),
        "            }\n"
        "          }\n");
    s += cat(
        "#define HG_PS ", num(hash_policy.cpu_private_slots), "\n#define HG_PW ", num(2 + k),
        "\nKILN_KERNEL void hg_insert_private", insert_params.substr(0, insert_params.size() - 1),
        ", KILN_GLOBAL uint64_t* scr) {\n"
        "  const uint64_t g = kiln_global_id(0);\n"
        "  KILN_GLOBAL uint64_t* pkey = scr + g * HG_PS * HG_PW;\n"
        "  KILN_GLOBAL uint64_t* pslot = pkey + HG_PS;\n",
        each([](const run_value&, std::size_t j) {
          return cat("  KILN_GLOBAL uint64_t* pa", num(j), " = pkey + ", num(2 + j), " * HG_PS;\n");
        }),
        "  for (uint32_t e = 0; e < HG_PS; ++e) pkey[e] = HG_EMPTY;\n", run_state,
        "  bool dead = false;\n"
        "  for (uint64_t base = g * span; base < n && !dead; base += stride) {\n"
        "    const uint64_t end = n - base < span ? n : base + span;\n"
        "    for (uint64_t i = base; i < end && !dead; ++i) {\n",
        row(priv_flush, ""),
        "    }\n"
        "  }\n"
        "  if (have && !dead) {\n",
        priv_flush,
        "  }\n"
        "  for (uint32_t e = 0; e < HG_PS; ++e) {\n"
        "    if (pkey[e] == HG_EMPTY || pslot[e] == HG_NONE) continue;\n"
        "    const uint64_t slot = pslot[e];\n",
        each([](const run_value& v, std::size_t j) {
          return cat("    ", flush_op(v), "(&a", num(j), "[slot], pa", num(j), "[e]);\n");
        }),
        "  }\n}\n\n");
  }

  // Slot ids fit 32 bits (max_groups <= 2^30).
  s +=
      cat("KILN_KERNEL void hg_compact(KILN_GLOBAL const uint64_t* slots, uint64_t slots_n, "
          "uint64_t span, uint64_t stride, KILN_GLOBAL uint64_t* meta, KILN_GLOBAL KEY_T* ck, "
          "KILN_GLOBAL uint32_t* cs) {\n",
          rows("e", "slots_n",
               cat("      const uint64_t w = slots[e];\n"
                   "      if (w == HG_EMPTY) continue;\n"
                   "      const uint64_t at = kiln_atomic_add(&meta[4], (uint64_t)1);\n",
                   wide ? "      ck[at] = e + 1 == slots_n ? (KEY_T)HG_EMPTY : (KEY_T)w;\n"
                        : "      ck[at] = (KEY_T)(w & 0xFFFFFFFFull);\n",
                   "      cs[at] = (uint32_t)e;\n")),
          "}\n\n");

  s += cat(
      "KILN_KERNEL void hg_emit(KILN_GLOBAL const KEY_T* keys, KILN_GLOBAL const KEY_T* sk, "
      "KILN_GLOBAL const uint32_t* ss, uint64_t groups, uint64_t span, uint64_t stride, "
      "int32_t kind, KILN_GLOBAL const uint64_t* meta, KILN_GLOBAL KEY_T* okeys",
      vin, accs(true), vout, ") {\n",
      rows("i", "groups",
           cat("      const uint64_t s = ss[i];\n"
               "      KEY_T key = sk[i];\n"
               "      if (kind == 2) {\n"
               "        if (key == (KEY_T)HG_NAN) key = keys[meta[3]];  // the first NaN's bits\n"
               "        else if (key == 0 && meta[2] != 0) key = (KEY_T)HG_SIGN;  // -0.0 first\n"
               "      }\n"
               "      okeys[i] = key;\n",
               each([](const run_value& v, std::size_t j) {
                 return cat("      o", num(j), "[i] = ", result(v, j), ";\n");
               }))),
      "}\n\n");

  for (std::size_t j = 0; j < k; ++j)
    if (needs_conv(values[j]))
      s += cat("KILN_KERNEL void hg_conv", num(j), "(KILN_GLOBAL const ", name(values[j].type),
               "* t, uint64_t groups, uint64_t span, uint64_t stride, KILN_GLOBAL ",
               name(values[j].out_type), "* o) {\n",
               rows("i", "groups", cat("      o[i] = (", name(values[j].out_type), ")t[i];\n")),
               "}\n\n");

  // The parser reads parameter types before any macro expands: spell the word out.
  for (std::size_t at = s.find("KEY_T"); at != std::string::npos; at = s.find("KEY_T", at))
    s.replace(at, 5, word_name(kb));
  return s;
}

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
  if (it == cache.end()) it = cache.emplace(sig, instantiate(key_bytes, values, local_slots)).first;
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
