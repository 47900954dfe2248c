// The kernel text of the device hash group-by (hash_group_text.hpp; the kernels are described in
// hash_group.cpp).
#include "sort/hash_group_text.hpp"

#include <string>
#include <vector>

#include "codegen/text.hpp"
#include "sort/words.hpp"

namespace kiln::detail::hash_group_text {
namespace {

using codegen::cat;
using codegen::num;

std::string name(scalar_type t) { return type_name(stored_type(t)); }

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

}  // namespace

std::string render(std::uint32_t kb, const std::vector<run_value>& values,
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
  // A run the work-group's or work-item's own table could not place: into the global table,
  // unless it has given up.
  auto to_global = [&] {
    return cat(
        "          if (!placed) {\n"
        "            slot = meta[1] != 0 ? HG_NONE : hg_find(slots, mask, last, max_groups, "
        "meta);\n"
        "            if (slot == HG_NONE) {\n"
        "              dead = true;  // given up: the result is not read\n"
        "            } else {\n",
        fold_into("a", "slot", "              "),
        "            }\n"
        "          }\n");
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
            "          }\n",
            to_global());
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
        "          }\n",
        to_global());
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

}  // namespace kiln::detail::hash_group_text
