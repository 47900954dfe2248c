// Device reduce-by-key (reduce_by_key.hpp). A "part" is a contiguous chunk of elements: one
// work-item's (chunked path: no barriers, the CPU backend and PoCL) or one work-group's tile of
// 256 items x 16 elements (tiled path, GPUs: each item's state, then a scan of them over the
// group in local memory, so one state per tile).
//
//   rbk_part  each part's state: its run heads h, and the aggregate (count, one accumulator per
//             column) of its elements from its last head on (all of them when it has none);
//   rbk_up /  an exclusive scan of the states, in levels of scan_fan states per work-item, under
//   rbk_down  the segmented operator (h1, a1) . (h2, a2) = (h1 + h2, h2 ? a2 : a1 + a2): chunk
//             c gets the heads before it (its first output slot) and the aggregate of the run
//             it starts inside of (its carry); the top level writes the run count;
//   rbk_emit  each part walks its elements again from its carry, writing the key of each run
//             that starts in it and the results of each run that ends in it.
// A run's aggregate thus combines in an order fixed by n, the part size and the fan: the same
// float additions on every call. The kernel text is generated per key width and value columns
// (types and ops are compile-time); the key's kind (integer or float equality) is an argument.
#include "sort/reduce_by_key.hpp"

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

const std::string fn = "kiln reduce_by_key";

// Equality of keys as raw words: kind 2 (float): == (signed zeros equal) or both NaN.
constexpr const char* same_text = R"(
KILN_FUNC bool rbk_same(KEY_T a, KEY_T b, int32_t kind) {
  if (kind != 2) return a == b;
  const KEY_T mag = (KEY_T)~(KEY_T)((KEY_T)1 << (RBK_KBITS - 1));
  const KEY_T ma = (KEY_T)(a & mag), mb = (KEY_T)(b & mag);
  if (ma > (KEY_T)RBK_INF || mb > (KEY_T)RBK_INF) return ma > (KEY_T)RBK_INF && mb > (KEY_T)RBK_INF;
  return a == b || (ma == 0 && mb == 0);
}
// Field f of the chunk states (f * tot words on), as an array of T.
#define RBK_F(f, T) ((KILN_GLOBAL T*)(st + (uint64_t)(f) * tot))
)";

std::string name(scalar_type t) { return type_name(stored_type(t)); }

bool is_float(scalar_type t) { return t == scalar_type::f32 || t == scalar_type::f64; }

// The code of one column with an accumulator (every op but count).
struct column_code {
  std::string acc;  // accumulator type
  run_op op;
  scalar_type out;
  std::string start(const std::string& x) const { return cat("(", acc, ")(", x, ")"); }
  std::string comb(const std::string& a, const std::string& b) const {
    switch (op) {
      case run_op::min:
        return cat("((", b, ") < ", a, " || (", b, ") != (", b, ") ? (", b, ") : ", a, ")");
      case run_op::max:
        return cat("((", b, ") > ", a, " || (", b, ") != (", b, ") ? (", b, ") : ", a, ")");
      case run_op::first: return a;
      default: return cat("(", acc, ")(", a, " + (", b, "))");
    }
  }
  std::string store(const std::string& a, const std::string& cnt) const {
    if (op == run_op::mean) return cat("(", name(out), ")(", a, " / (double)", cnt, ")");
    if (out == scalar_type::boolean) return cat("(uint8_t)(", a, " != 0)");
    return cat("(", name(out), ")(", a, ")");
  }
};

std::vector<column_code> codes(const std::vector<run_value>& values) {
  std::vector<column_code> c;
  for (const run_value& v : values) {
    if (v.op == run_op::count) continue;
    const std::string acc = v.op == run_op::mean  ? "double"
                            : v.op == run_op::sum ? name(v.out_type)
                                                  : name(v.type);
    c.push_back({acc, v.op, v.out_type});
  }
  return c;
}

std::string instantiate(bool tiled, std::uint32_t kb, const std::vector<run_value>& values) {
  const std::vector<column_code> cols = codes(values);
  const std::size_t k = cols.size();
  std::string s = cat("#define RBK_KBITS ", num(kb * 8), "\n#define RBK_INF ",
                      kb == 4   ? "0x7F800000u"
                      : kb == 8 ? "0x7FF0000000000000ull"
                                : "0",
                      "\n", same_text);
  if (tiled) s += cat("#define RBK_B ", num(reduce_policy.tile_threads), "\n");
  // The text of f(j, column j, its accumulator's name) for every accumulated column.
  auto each = [&](auto&& f) {
    std::string out;
    for (std::size_t j = 0; j < k; ++j) out += f(j, cols[j], cat("a", num(j)));
    return out;
  };
  // Parameters: the inputs of the accumulated columns, the outputs of every column.
  std::string vin, vout;
  for (std::size_t j = 0, a = 0; j < values.size(); ++j) {
    vout += cat(", KILN_GLOBAL ", name(values[j].out_type), "* o", num(j));
    if (values[j].op != run_op::count)
      vin += cat(", KILN_GLOBAL const ", name(values[j].type), "* v", num(a++));
  }
  const std::string decl = each([](std::size_t, const column_code& c, const std::string& a) {
    return cat("  ", c.acc, " ", a, " = (", c.acc, ")0;\n");
  });
  auto start_at = [&](const std::string& i) {
    return each([&](std::size_t j, const column_code& c, const std::string& a) {
      return cat("      ", a, " = ", c.start(cat("v", num(j), "[", i, "]")), ";\n");
    });
  };
  auto add_at = [&](const std::string& i) {
    return each([&](std::size_t j, const column_code& c, const std::string& a) {
      return cat("      ", a, " = ", c.comb(a, c.start(cat("v", num(j), "[", i, "]"))), ";\n");
    });
  };
  // States: field 0 heads, 1 count, 2 + j column j's accumulator; p prefixes the names.
  auto load = [&](const std::string& p, const std::string& e) {
    return cat("  const uint64_t ", p, "h = RBK_F(0, uint64_t)[", e, "], ", p,
               "cnt = RBK_F(1, uint64_t)[", e, "];\n",
               each([&](std::size_t j, const column_code& c, const std::string& a) {
                 return cat("  const ", c.acc, " ", p, a, " = RBK_F(", num(2 + j), ", ", c.acc,
                            ")[", e, "];\n");
               }));
  };
  auto save = [&](const std::string& p, const std::string& e) {
    return cat("  RBK_F(0, uint64_t)[", e, "] = ", p, "h;\n  RBK_F(1, uint64_t)[", e, "] = ", p,
               "cnt;\n", each([&](std::size_t j, const column_code& c, const std::string& a) {
                 return cat("  RBK_F(", num(2 + j), ", ", c.acc, ")[", e, "] = ", p, a, ";\n");
               }));
  };
  // run = run . b (segmented).
  const std::string combine = cat("    if (bh) {\n      h += bh;\n      cnt = bcnt;\n",
                                  each([](std::size_t, const column_code&, const std::string& a) {
                                    return cat("      ", a, " = b", a, ";\n");
                                  }),
                                  "    } else {\n      cnt += bcnt;\n",
                                  each([](std::size_t, const column_code& c, const std::string& a) {
                                    return cat("      ", a, " = ", c.comb(a, cat("b", a)), ";\n");
                                  }),
                                  "    }\n");
  auto assign = [&](const std::string& p) {
    return cat("    h = ", p, "h;\n    cnt = ", p, "cnt;\n",
               each([&](std::size_t, const column_code&, const std::string& a) {
                 return cat("    ", a, " = ", p, a, ";\n");
               }));
  };
  std::string stores;
  for (std::size_t j = 0, a = 0; j < values.size(); ++j) {
    if (values[j].op == run_op::count) {
      stores += cat("  o", num(j), "[r] = cnt; \\\n");
    } else {
      stores += cat("  o", num(j), "[r] = ", cols[a].store(cat("a", num(a)), "cnt"), "; \\\n");
      ++a;
    }
  }
  s += cat("#define RBK_STORE \\\n", stores, "\n");

  // The state of elements [lo, hi) (hi > lo) into h, cnt, a<j>: heads, then the aggregate from
  // the last head on (from lo when none).
  const std::string chunk_state =
      cat("  {\n"
          "  KEY_T prev = keys[lo];\n"
          "  h = lo == 0 || !rbk_same(keys[lo - 1], prev, kind) ? 1 : 0;\n"
          "  cnt = 1;\n",
          start_at("lo"),
          "  for (uint64_t i = lo + 1; i < hi; ++i) {\n"
          "    const KEY_T key = keys[i];\n"
          "    if (rbk_same(prev, key, kind)) {\n"
          "      ++cnt;\n",
          add_at("i"),
          "    } else {\n"
          "      ++h;\n"
          "      cnt = 1;\n",
          start_at("i"),
          "    }\n"
          "    prev = key;\n"
          "  }\n"
          "  }\n");
  // Elements [lo, hi) (hi > lo) from the carry (ch heads before lo; ccnt, ca<j>: the run lo
  // continues, when lo is no head): the keys of the runs starting in them, the results of the
  // runs ending in them.
  const std::string emit_body =
      cat("  {\n"
          "  KEY_T prev = keys[lo];\n"
          "  uint64_t r = ch, cnt = 1;\n",
          decl,
          "  if (lo == 0 || !rbk_same(keys[lo - 1], prev, kind)) {\n"
          "    okeys[r] = prev;\n",
          start_at("lo"),
          "  } else {\n"
          "    r -= 1;\n"
          "    cnt = ccnt + 1;\n",
          each([&](std::size_t j, const column_code& col, const std::string& a) {
            return cat("    ", a, " = ", col.comb(cat("c", a), col.start(cat("v", num(j), "[lo]"))),
                       ";\n");
          }),
          "  }\n"
          "  for (uint64_t i = lo + 1; i < hi; ++i) {\n"
          "    const KEY_T key = keys[i];\n"
          "    if (rbk_same(prev, key, kind)) {\n"
          "      ++cnt;\n",
          add_at("i"),
          "    } else {\n"
          "      RBK_STORE\n"
          "      ++r;\n"
          "      okeys[r] = key;\n"
          "      cnt = 1;\n",
          start_at("i"),
          "    }\n"
          "    prev = key;\n"
          "  }\n"
          "  if (hi == n || !rbk_same(prev, keys[hi], kind)) {\n"
          "    RBK_STORE\n"
          "  }\n"
          "  }\n");
  const std::string part_params =
      cat("(KILN_GLOBAL const KEY_T* keys, uint64_t n, uint64_t chunk, int32_t kind", vin,
          ", KILN_GLOBAL uint64_t* st, uint64_t tot)");
  const std::string emit_params =
      cat("(KILN_GLOBAL const KEY_T* keys, uint64_t n, uint64_t chunk, int32_t kind", vin,
          ", KILN_GLOBAL const uint64_t* st, uint64_t tot, KILN_GLOBAL KEY_T* okeys", vout, ")");
  const std::string cdecl = each([](std::size_t, const column_code& c, const std::string& a) {
    return cat("  ", c.acc, " c", a, " = (", c.acc, ")0;\n");
  });

  if (!tiled) {
    s += cat("KILN_KERNEL void rbk_part", part_params,
             " {\n"
             "  const uint64_t c = kiln_global_id(0);\n"
             "  const uint64_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;\n"
             "  uint64_t h = 0, cnt = 0;\n",
             decl, chunk_state, save("", "c"), "}\n\n");
    // Chunk c from its exclusive state.
    s += cat("KILN_KERNEL void rbk_emit", emit_params,
             " {\n"
             "  const uint64_t c = kiln_global_id(0);\n"
             "  const uint64_t lo = c * chunk, hi = n - lo < chunk ? n : lo + chunk;\n"
             "  const uint64_t ch = RBK_F(0, const uint64_t)[c];\n"
             "  const uint64_t ccnt = RBK_F(1, const uint64_t)[c];\n",
             each([&](std::size_t j, const column_code& col, const std::string& a) {
               return cat("  const ", col.acc, " c", a, " = RBK_F(", num(2 + j), ", const ",
                          col.acc, ")[c];\n");
             }),
             emit_body, "}\n\n");
  } else {
    // Tiles of RBK_B items x `chunk` elements: each item's chunk state, then an inclusive
    // segmented scan of them over the work-group (Hillis-Steele in local memory, ping-pong
    // between two halves so that each step needs one barrier). Items past n (the last tile's)
    // take no part; the last live item holds the tile's state. The item's indices are
    // recomputed after each barrier.
    // PoCL 5 (CPU) runs a tile that has items past n wrongly: after the barrier loop, an item
    // past n passes `if (live)` (or `lo < n`, or a flag read from local memory) and reads
    // keys[lo]; adding an unrelated store hides it. Whole tiles run right, so the tests run
    // PoCL on whole tiles only; automatic takes the tiled kernels on GPUs only.
    const std::string locals =
        cat("  KILN_LOCAL uint64_t sh[2][RBK_B];\n  KILN_LOCAL uint64_t sc[2][RBK_B];\n",
            each([](std::size_t, const column_code& c, const std::string& a) {
              return cat("  KILN_LOCAL ", c.acc, " s", a, "[2][RBK_B];\n");
            }));
    // Declares the state prefixed p from half q, entry e.
    auto from_local = [&](const std::string& p, const std::string& q, const std::string& e) {
      return cat("    const uint64_t ", p, "h = sh[", q, "][", e, "], ", p, "cnt = sc[", q, "][", e,
                 "];\n", each([&](std::size_t, const column_code& c, const std::string& a) {
                   return cat("    const ", c.acc, " ", p, a, " = s", a, "[", q, "][", e, "];\n");
                 }));
    };
    // live: the item has elements (items: the tile's items that do).
    const std::string item =
        "  const uint32_t t = (uint32_t)kiln_local_id(0);\n"
        "  const uint64_t tile = kiln_group_id(0);\n"
        "  const uint64_t tile_lo = tile * RBK_B * chunk;\n"
        "  const uint64_t items = (n - tile_lo + chunk - 1) / chunk;\n"
        "  const bool live = t < items;\n"
        "  const uint64_t lo = tile_lo + t * chunk;\n"
        "  const uint64_t hi = !live ? lo : n - lo < chunk ? n : lo + chunk;\n";
    const std::string tile_scan = cat(
        "  {\n", item, "  uint64_t h = 0, cnt = 0;\n", decl, "  if (live) {\n", chunk_state,
        "  }\n"
        "  sh[0][t] = h;\n"
        "  sc[0][t] = cnt;\n",
        each([](std::size_t, const column_code&, const std::string& a) {
          return cat("  s", a, "[0][t] = ", a, ";\n");
        }),
        "  }\n"
        "  kiln_barrier();\n"
        "  for (uint32_t k = 0; k < RBK_LOG; ++k) {\n"
        "  {\n"
        "    const uint32_t o = 1u << k, q = k & 1u;\n",
        item, "    const uint32_t src = t >= o ? t - o : t;\n", from_local("", "q", "t"),
        from_local("l", "q", "src"),
        "    const bool step = live && t >= o, join = step && h == 0;\n"
        "    sh[q ^ 1][t] = step ? h + lh : h;\n"
        "    sc[q ^ 1][t] = join ? cnt + lcnt : cnt;\n",
        each([](std::size_t, const column_code& c, const std::string& a) {
          return cat("    s", a, "[q ^ 1][t] = join ? ", c.comb(cat("l", a), a), " : ", a, ";\n");
        }),
        "  }\n"
        "    kiln_barrier();\n"
        "  }\n",
        item);
    // The half holding the scan's result.
    const int steps = std::countr_zero(reduce_policy.tile_threads);
    s += cat("#define RBK_LOG ", num(steps), "\n#define RBK_Q ", num(steps % 2), "\n");
    s += cat("KILN_KERNEL void rbk_part", part_params, " {\n", locals, tile_scan,
             "  if (t == (items < RBK_B ? items - 1 : RBK_B - 1)) {\n",
             from_local("", "RBK_Q", "t"), save("", "tile"), "  }\n}\n\n");
    // Item t's carry: the tile's exclusive state, then items 0..t-1 of the tile.
    s += cat("KILN_KERNEL void rbk_emit", emit_params, " {\n", locals, tile_scan,
             "  if (live) {\n"
             "  uint64_t ch = 0, ccnt = 0;\n",
             cdecl,
             "  if (tile > 0) {\n"
             "    ch = RBK_F(0, const uint64_t)[tile];\n"
             "    ccnt = RBK_F(1, const uint64_t)[tile];\n",
             each([&](std::size_t j, const column_code& col, const std::string& a) {
               return cat("    c", a, " = RBK_F(", num(2 + j), ", const ", col.acc, ")[tile];\n");
             }),
             "  }\n"
             "  if (t > 0) {\n",
             from_local("e", "RBK_Q", "t - 1"),
             "    if (tile == 0 || eh) {\n"
             "      ch += eh;\n"
             "      ccnt = ecnt;\n",
             each([](std::size_t, const column_code&, const std::string& a) {
               return cat("      c", a, " = e", a, ";\n");
             }),
             "    } else {\n"
             "      ccnt += ecnt;\n",
             each([](std::size_t, const column_code& c, const std::string& a) {
               return cat("      c", a, " = ", c.comb(cat("c", a), cat("e", a)), ";\n");
             }),
             "    }\n"
             "  }\n",
             emit_body, "  }\n}\n\n");
  }

  // Work-item g folds states [in_at + g * fan, + fan) of in_n into out_at + g.
  s +=
      cat("KILN_KERNEL void rbk_up(KILN_GLOBAL uint64_t* st, uint64_t tot, uint64_t in_at, "
          "uint64_t in_n, uint64_t fan, uint64_t out_at) {\n"
          "  const uint64_t g = kiln_global_id(0);\n"
          "  const uint64_t lo = in_at + g * fan;\n"
          "  const uint64_t hi = in_n - g * fan < fan ? in_at + in_n : lo + fan;\n"
          "  uint64_t h = 0, cnt = 0;\n",
          decl, "  {\n", load("b", "lo"), assign("b"), "  }\n",
          "  for (uint64_t e = lo + 1; e < hi; ++e) {\n", load("b", "e"), combine, "  }\n",
          "  const uint64_t to = out_at + g;\n", save("", "to"), "}\n\n");

  // Work-item g replaces its states by their exclusive scan, from the carry at up_at + g (the
  // scanned level above; none for g == 0). top: one work-item; it writes the run count.
  s += cat(
      "KILN_KERNEL void rbk_down(KILN_GLOBAL uint64_t* st, uint64_t tot, uint64_t in_at, "
      "uint64_t in_n, uint64_t fan, uint64_t up_at, KILN_GLOBAL uint64_t* runs, int32_t top) {\n"
      "  const uint64_t g = kiln_global_id(0);\n"
      "  const uint64_t lo = in_at + g * fan;\n"
      "  const uint64_t hi = in_n - g * fan < fan ? in_at + in_n : lo + fan;\n"
      "  uint64_t h = 0, cnt = 0;\n",
      decl, "  bool have = g > 0;\n  if (have) {\n  const uint64_t u = up_at + g;\n",
      load("b", "u"), assign("b"), "  }\n", "  for (uint64_t e = lo; e < hi; ++e) {\n",
      load("b", "e"), save("", "e"), "  if (have) {\n", combine, "  } else {\n", assign("b"),
      "  }\n  have = true;\n  }\n  if (top) runs[0] = h;\n}\n\n");

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
  if (v.op == run_op::count) {
    if (v.out_type != scalar_type::u64)
      throw invalid_argument(what + ": a count is uint64_t, not " + type_name(v.out_type));
    return;
  }
  if (is_reduced_float(v.type))
    throw unsupported(what + ": values of type " + type_name(v.type) +
                      " are not supported (16-bit floats are storage types: reduce them as "
                      "float)");
  if (is_reduced_float(v.out_type))
    throw unsupported(what + ": results of type " + type_name(v.out_type) +
                      " are not supported (use float)");
  if (v.op == run_op::mean && !is_float(v.out_type))
    throw invalid_argument(what + ": a mean is float or double, not " + type_name(v.out_type));
  if ((v.op == run_op::sum || v.op == run_op::min || v.op == run_op::max) &&
      v.out_type == scalar_type::boolean)
    throw invalid_argument(what + ": the result must be a numeric type, not bool");
}

}  // namespace

std::string reduce_by_key_source(bool tiled, std::uint32_t key_bytes,
                                 const std::vector<run_value>& values) {
  // One text per signature (path, key width, then per column op, input and result types).
  std::string sig = cat(tiled ? "t" : "c", num(key_bytes));
  sig += run_values_signature(values);
  static std::mutex mu;
  static std::map<std::string, std::string> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(sig);
  if (it == cache.end()) it = cache.emplace(sig, instantiate(tiled, key_bytes, values)).first;
  return it->second;
}

reduce_by_key_result reduce_by_key(queue& q, const reduce_by_key_args& a) {
  if (!q.impl()) throw_empty_handle(fn.c_str(), "queue");
  queue_impl& qi = *q.impl();
  if (is_reduced_float(a.key_type))
    throw unsupported(fn + ": keys of type " + type_name(a.key_type) +
                      " are not supported (16-bit floats are storage types: reduce them as "
                      "float)");
  for (std::size_t j = 0; j < a.values.size(); ++j) check_value(a.values[j], j);
  const auto kb = static_cast<std::uint32_t>(size_of(a.key_type));
  const std::uint64_t n = a.n;
  if (n > UINT64_MAX / 16)
    throw invalid_argument(fn + ": n " + std::to_string(n) + " is too large");
  if (n || a.keys.mem) check_array(qi, a.keys, n, kb, "keys");
  for (std::size_t j = 0; j < a.values.size(); ++j) {
    const run_value& v = a.values[j];
    if (v.op != run_op::count && (n || v.in.mem))
      check_array(qi, v.in, n, size_of(v.type), cat("value column ", num(j)));
  }

  reduce_by_key_result r;
  auto outputs = [&](std::uint64_t runs) {
    r.runs = runs;
    r.keys = allocate_on(qi, std::max<std::uint64_t>(runs * kb, 1));
    for (const run_value& v : a.values)
      r.values.push_back(allocate_on(qi, std::max<std::uint64_t>(runs * size_of(v.out_type), 1)));
  };
  if (n == 0) {
    outputs(0);
    return r;
  }

  const device& dev = q.get_device();
  const device_info& info = dev.info();
  const reduce_by_key_policy& p = reduce_policy;
  const bool cpu = info.type == device_type::cpu;
  std::vector<run_value> cols;  // the accumulated columns (count needs no input)
  for (const run_value& v : a.values)
    if (v.op != run_op::count) cols.push_back(v);
  const std::uint64_t fields = 2 + cols.size();
  // The tiled kernels need barriers, work-groups of tile_threads and their scan's local memory
  // (two halves of 8-byte words per field), at most 48 KiB: CUDA's limit for static shared
  // memory (ten accumulated columns).
  const std::uint64_t local_bytes = 2 * std::uint64_t(p.tile_threads) * 8 * fields;
  std::string lacks;
  if (!dev.supports(feature::barrier))
    lacks = "kiln::feature::barrier";
  else if (info.max_work_group_size && info.max_work_group_size < p.tile_threads)
    lacks = cat("work-groups of ", num(p.tile_threads), " items");
  else if ((info.local_mem_bytes && info.local_mem_bytes < local_bytes) || local_bytes > 49152)
    lacks = cat(num(local_bytes), " bytes of local memory (", num(cols.size()),
                " accumulated columns)");
  if (a.path == radix_path::tiled && !lacks.empty())
    throw unsupported(fn + ": the tiled kernels need " + lacks + ", which " + dev.id() + " lacks");
  const bool tiled =
      a.path == radix_path::tiled || (a.path == radix_path::automatic && lacks.empty() && !cpu);
  std::uint64_t chunk = a.chunk;
  if (!chunk) {
    if (tiled) {
      chunk = p.tile_items;
    } else if (cpu) {
      const std::uint64_t units = std::max<std::uint32_t>(info.compute_units, 1);
      const std::uint64_t parts = std::clamp<std::uint64_t>(
          (n + p.cpu_chunk_elems - 1) / p.cpu_chunk_elems, 1, units * p.cpu_chunks_per_unit);
      chunk = (n + parts - 1) / parts;
    } else {
      chunk = p.gpu_chunk_elems;
    }
  }
  // Chunks (one work-item each) or tiles (one work-group each): one state each.
  const std::uint64_t span = tiled ? chunk * p.tile_threads : chunk;
  const std::uint64_t parts = (n + span - 1) / span;
  const std::uint64_t fan = std::max<std::uint64_t>(a.scan_fan ? a.scan_fan : p.scan_fan, 2);
  // Levels of the state scan: parts, then one state per fan of the level below, up to the one
  // a single work-item scans.
  std::vector<std::uint64_t> count = {parts}, at = {0};
  while (count.back() > fan) {
    at.push_back(at.back() + count.back());
    count.push_back((count.back() + fan - 1) / fan);
  }
  const std::uint64_t tot = at.back() + count.back();

  // States (fields x tot words), then the run count.
  const sort_operand st{allocate_on(qi, (fields * tot + 1) * 8), 0};
  const sort_operand runs_at{st.mem, fields * tot};

  const program prog =
      program::compile(dev, reduce_by_key_source(tiled, kb, a.values), {}, check_mode::off);
  const local_size one(1), group(p.tile_threads);
  const range* loc = cpu ? &one : nullptr;
  const range* part_loc = tiled ? &group : loc;
  const range part_range(tiled ? parts * p.tile_threads : parts);
  const std::int32_t kind = order_kind(a.key_type);
  const scalar_type kt = word_type(kb);
  auto inputs = [&](std::vector<arg_binding>& b) {
    b.push_back(array_arg(a.keys, kt, true, n));
    b.push_back(bind_arg(n));
    b.push_back(bind_arg(chunk));
    b.push_back(bind_arg(kind));
    for (const run_value& v : cols) b.push_back(array_arg(v.in, stored_type(v.type), true, n));
  };
  {
    std::vector<arg_binding> b;
    inputs(b);
    b.push_back(array_arg(st, scalar_type::u64, false, fields * tot));
    b.push_back(bind_arg(tot));
    launch(*prog.get_kernel("rbk_part").impl(), qi, part_range, part_loc, b.data(), b.size());
  }
  // The scan's kernels run in work-groups of one: the program's tiled kernels use barriers, so
  // a launch of it must give whole work-groups, and these ranges are small and arbitrary.
  const kernel k_up = prog.get_kernel("rbk_up"), k_down = prog.get_kernel("rbk_down");
  for (std::size_t l = 0; l + 1 < count.size(); ++l) {
    arg_binding b[] = {array_arg(st, scalar_type::u64, false, fields * tot),
                       bind_arg(tot),
                       bind_arg(at[l]),
                       bind_arg(count[l]),
                       bind_arg(fan),
                       bind_arg(at[l + 1])};
    launch(*k_up.impl(), qi, range(count[l + 1]), &one, b, std::size(b));
  }
  for (std::size_t l = count.size(); l-- > 0;) {
    const bool top = l + 1 == count.size();
    arg_binding b[] = {array_arg(st, scalar_type::u64, false, fields * tot),
                       bind_arg(tot),
                       bind_arg(at[l]),
                       bind_arg(count[l]),
                       bind_arg(fan),
                       bind_arg(top ? std::uint64_t(0) : at[l + 1]),
                       array_arg(runs_at, scalar_type::u64, false, 1),
                       bind_arg(std::int32_t(top))};
    launch(*k_down.impl(), qi, range(top ? 1 : count[l + 1]), &one, b, std::size(b));
  }
  // The one host wait: the run count sizes the outputs.
  std::uint64_t runs = 0;
  copy_d2h(qi, &runs, *st.mem, runs_at.offset * 8, 8);
  q.finish();
  outputs(runs);

  std::vector<arg_binding> b;
  inputs(b);
  b.push_back(array_arg(st, scalar_type::u64, true, fields * tot));
  b.push_back(bind_arg(tot));
  b.push_back(array_arg({r.keys, 0}, kt, false, runs));
  for (std::size_t j = 0; j < a.values.size(); ++j)
    b.push_back(array_arg({r.values[j], 0}, stored_type(a.values[j].out_type), false, runs));
  launch(*prog.get_kernel("rbk_emit").impl(), qi, part_range, part_loc, b.data(), b.size());
  return r;
}

std::string run_values_signature(const std::vector<run_value>& values) {
  std::string sig;
  for (const run_value& v : values)
    sig += cat(",", num(int(v.op)), ":", v.op == run_op::count ? "-" : num(int(v.type)), ":",
               num(int(v.out_type)));
  return sig;
}

const char* run_op_name(run_op op) {
  switch (op) {
    case run_op::sum: return "sum";
    case run_op::min: return "min";
    case run_op::max: return "max";
    case run_op::count: return "count";
    case run_op::mean: return "mean";
    case run_op::first: return "first";
  }
  return "?";
}

}  // namespace kiln::detail
