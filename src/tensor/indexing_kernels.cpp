// Kernel texts and launches for the indexing operations; see indexing_kernels.hpp. Sources are
// rendered per rank (the coordinates of an item decompose with the last dimension fastest) and
// cached by (kind, rank, element width or dtype, index dtype).
#include "tensor/indexing_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "codegen/expr_render.hpp"
#include "codegen/text.hpp"
#include "ir/hash.hpp"
#include "kiln/kernel.hpp"
#include "runtime/generated_kernels.hpp"
#include "sort/radix_sort.hpp"
#include "tensor/kernel_args.hpp"

namespace kiln::detail {
namespace {

using codegen::cat;
using codegen::num;

using kind = index_kernel_kind;

// The unsigned type of an element's width: copies move bits, whatever the dtype.
scalar_type bits_type(scalar_type t) {
  switch (size_of(t)) {
    case 1: return scalar_type::u8;
    case 2: return scalar_type::u16;
    case 4: return scalar_type::u32;
    default: return scalar_type::u64;
  }
}

// The coordinates c0..c<R-1> of item i over sizes n1..n<R-1> (the last fastest). 64-bit
// division is slow on GPUs (emulated), so below 2^32 items it runs in 32 bits.
std::string decompose(std::size_t rank) {
  std::string decl = "  int64_t c0", narrow = "    uint32_t r = (uint32_t)i;\n",
              wide = "    int64_t r = i;\n";
  for (std::size_t d = rank; d-- > 1;) {
    decl += cat(", c", num(d));
    narrow += cat("    c", num(d), " = (int64_t)(r % (uint32_t)n", num(d), "); r /= (uint32_t)n",
                  num(d), ";\n");
    wide += cat("    c", num(d), " = r % n", num(d), "; r /= n", num(d), ";\n");
  }
  return cat(decl, ";\n  if ((total >> 32) == 0) {\n", narrow, "    c0 = (int64_t)r;\n  } else {\n",
             wide, "    c0 = r;\n  }\n");
}

std::string params(const char* p, std::size_t from, std::size_t rank) {
  std::string s;
  for (std::size_t d = from; d < rank; ++d) s += cat(", int64_t ", p, num(d));
  return s;
}

std::string dot(const char* p, std::size_t rank) {
  std::string s = "0";
  for (std::size_t d = 0; d < rank; ++d) s += cat(" + c", num(d), " * ", p, num(d));
  return s;
}

std::string gather_source(std::size_t rank, scalar_type w, scalar_type it) {
  const std::string W = type_name(w), I = type_name(it);
  return cat("KILN_KERNEL void kt_index(KILN_GLOBAL ", W, "* KILN_RESTRICT out, KILN_GLOBAL const ",
             W, "* KILN_RESTRICT x, KILN_GLOBAL const ", I,
             "* KILN_RESTRICT idx, int64_t total, int64_t xsd, int64_t bound", params("n", 1, rank),
             params("xs", 0, rank), params("is", 0, rank),
             ") {\n  const int64_t i = (int64_t)kiln_global_id(0);\n  if (i >= total) return;\n",
             decompose(rank), "  const int64_t j = (int64_t)idx[", dot("is", rank),
             "];\n  out[i] = (j >= 0 && j < bound) ? x[", dot("xs", rank), " + j * xsd] : (", W,
             ")0;\n}\n");
}

constexpr const char* place_text = R"(
KILN_KERNEL void kt_index(KILN_GLOBAL T_* KILN_RESTRICT out, KILN_GLOBAL const T_* KILN_RESTRICT src,
                          int64_t total, int64_t m, int64_t row, int64_t off) {
  const int64_t i = (int64_t)kiln_global_id(0);
  if (i >= total) return;
  out[(i / m) * row + off + i % m] = src[i];
}
)";

std::string scatter_source(std::size_t rank, scalar_type t, scalar_type it) {
  const std::string T = type_name(t), I = type_name(it), V = codegen::value_type(t);
  std::string cd = cat("c", num(rank - 1)), inside = "1";
  for (std::size_t d = rank - 1; d-- > 0;) cd = cat("dim == ", num(d), " ? c", num(d), " : ", cd);
  for (std::size_t d = 0; d < rank; ++d) inside += cat(" && c", num(d), " < iz", num(d));
  return cat(
      "KILN_KERNEL void kt_index(KILN_GLOBAL ", T, "* KILN_RESTRICT out, KILN_GLOBAL const ", T,
      "* KILN_RESTRICT x, KILN_GLOBAL const ", I, "* KILN_RESTRICT idx, KILN_GLOBAL const ", T,
      "* KILN_RESTRICT src, int64_t total, int64_t use_x, int64_t dim, int64_t J, int64_t isd, "
      "int64_t ssd",
      params("n", 1, rank), params("xs", 0, rank), params("is", 0, rank), params("ss", 0, rank),
      params("iz", 0, rank),
      ") {\n  const int64_t i = (int64_t)kiln_global_id(0);\n  if (i >= total) return;\n",
      decompose(rank), "  ", V, " acc = use_x ? ",
      codegen::load_value(t, cat("x[", dot("xs", rank), "]")), " : (", V, ")0;\n",
      "  const int64_t cd = ", cd, ";\n  if (", inside,
      ") {\n    const int64_t io = ", dot("is", rank), ", so = ", dot("ss", rank),
      ";\n    for (int64_t j = 0; j < J; ++j)\n      if ((int64_t)idx[io + j * isd] == cd) acc += ",
      codegen::load_value(t, "src[so + j * ssd]"),
      ";\n  }\n  out[i] = ", codegen::store_value(t, "acc"), ";\n}\n");
}

// The accumulation's storage type (partial sums): float, or double for f64.
scalar_type accum_type(scalar_type t) { return t == scalar_type::f64 ? t : scalar_type::f32; }

// Each index as a sort key (outside [0, bound): the key bound, after every row) and its position.
std::string sort_keys_source(scalar_type k, scalar_type it, scalar_type pt) {
  const std::string K = type_name(k), I = type_name(it), P = type_name(pt);
  return cat("KILN_KERNEL void kt_index(KILN_GLOBAL ", K, "* KILN_RESTRICT keys, KILN_GLOBAL ", P,
             "* KILN_RESTRICT pos, KILN_GLOBAL const ", I,
             "* KILN_RESTRICT idx, int64_t n, int64_t stride, int64_t bound) {\n"
             "  const int64_t i = (int64_t)kiln_global_id(0);\n  if (i >= n) return;\n"
             "  const int64_t j = (int64_t)idx[i * stride];\n  keys[i] = (",
             K, ")((j >= 0 && j < bound) ? j : bound);\n  pos[i] = (", P, ")i;\n}\n");
}

// offs[v] = the first sorted position whose key is >= v, for v in [0, rows].
std::string run_offsets_source(scalar_type k) {
  return cat(
      "KILN_KERNEL void kt_index(KILN_GLOBAL int64_t* KILN_RESTRICT offs, KILN_GLOBAL const ",
      type_name(k),
      "* KILN_RESTRICT keys, int64_t n, int64_t rows) {\n"
      "  const int64_t v = (int64_t)kiln_global_id(0);\n  if (v > rows) return;\n"
      "  int64_t lo = 0, hi = n;\n  while (lo < hi) {\n"
      "    const int64_t mid = lo + (hi - lo) / 2;\n"
      "    if ((int64_t)keys[mid] < v) lo = mid + 1; else hi = mid;\n  }\n"
      "  offs[v] = lo;\n}\n");
}

// part[o, c, r] = the sum, in order, of g's rows at sorted positions [c S, c S + S) when they
// all hold one key (a chunk inside one run); other chunks are never read and not written.
std::string run_part_source(scalar_type t, scalar_type k, scalar_type pt) {
  const std::string T = type_name(t), A = type_name(accum_type(t));
  return cat("KILN_KERNEL void kt_index(KILN_GLOBAL ", A,
             "* KILN_RESTRICT part, KILN_GLOBAL const ", T, "* KILN_RESTRICT g, KILN_GLOBAL const ",
             type_name(k), "* KILN_RESTRICT keys, KILN_GLOBAL const ", type_name(pt),
             "* KILN_RESTRICT pos, int64_t total, int64_t n, int64_t inner, int64_t chunks, "
             "int64_t S) {\n  const int64_t i = (int64_t)kiln_global_id(0);\n"
             "  if (i >= total) return;\n  const int64_t r = i % inner, c = (i / inner) % chunks, "
             "o = i / (inner * chunks);\n  const int64_t k0 = c * S;\n"
             "  if (keys[k0] != keys[k0 + S - 1]) return;\n  ",
             A, " acc = (", A, ")0;\n  for (int64_t k = k0; k < k0 + S; ++k)\n    acc += ",
             codegen::load_value(t, "g[(o * n + (int64_t)pos[k]) * inner + r]"),
             ";\n  part[i] = acc;\n}\n");
}

// dx[o, v, r]: row v's run [offs[v], offs[v + 1]) summed in sorted (= position) order, its
// whole chunks through their partials.
std::string run_add_source(scalar_type t, scalar_type pt) {
  const std::string T = type_name(t), A = type_name(accum_type(t));
  const std::string term = codegen::load_value(t, "g[(o * n + (int64_t)pos[k]) * inner + r]");
  return cat(
      "KILN_KERNEL void kt_index(KILN_GLOBAL ", T, "* KILN_RESTRICT dx, KILN_GLOBAL const ", T,
      "* KILN_RESTRICT g, KILN_GLOBAL const int64_t* KILN_RESTRICT offs, KILN_GLOBAL const ",
      type_name(pt), "* KILN_RESTRICT pos, KILN_GLOBAL const ", A,
      "* KILN_RESTRICT part, int64_t total, int64_t rows, int64_t n, int64_t inner, int64_t "
      "chunks, int64_t S) {\n  const int64_t i = (int64_t)kiln_global_id(0);\n"
      "  if (i >= total) return;\n"
      "  int64_t r, v, o;\n  if ((total >> 32) == 0) {  /* 32-bit division: fast on GPUs */\n"
      "    const uint32_t q = (uint32_t)i / (uint32_t)inner, p = q / (uint32_t)rows;\n"
      "    r = (int64_t)((uint32_t)i - q * (uint32_t)inner);\n"
      "    v = (int64_t)(q - p * (uint32_t)rows);\n    o = (int64_t)p;\n  } else {\n"
      "    const int64_t q = i / inner;\n    r = i - q * inner;\n    o = q / rows;\n"
      "    v = q - o * rows;\n  }\n"
      "  const int64_t lo = offs[v], hi = offs[v + 1];\n  const int64_t c0 = (lo + S - 1) / S, "
      "c1 = hi / S;\n  ",
      A, " acc = (", A,
      ")0;\n  int64_t k = lo;\n  if (c1 > c0) {\n    for (; k < c0 * S; ++k) acc += ", term,
      ";\n    for (int64_t c = c0; c < c1; ++c) acc += part[(o * chunks + c) * inner + r];\n"
      "    k = c1 * S;\n  }\n  for (; k < hi; ++k) acc += ",
      term, ";\n  dx[i] = ", codegen::store_value(t, cat("(", codegen::value_type(t), ")acc")),
      ";\n}\n");
}

const char* name_of(kind k) {
  switch (k) {
    case kind::gather: return "gather";
    case kind::place: return "place";
    case kind::scatter: return "scatter_add";
    case kind::sort_keys: return "index_add sort keys";
    case kind::run_offsets: return "index_add run offsets";
    case kind::run_part: return "index_add chunk partials";
    case kind::run_add: return "index_add";
  }
  return "";
}

kernel index_kernel(const device& dev, kind k, std::size_t rank, scalar_type t, scalar_type it,
                    scalar_type pt = scalar_type::u32) {
  ir::hasher h;
  h.add("tensor index v3").add(std::uint64_t(k)).add(std::uint64_t{rank});
  h.add(std::uint64_t(t)).add(std::uint64_t(it)).add(std::uint64_t(pt));
  const generated_kernels g = get_generated(dev, "tensor_index", h.value(), [&] {
    return generated_program{
        index_source(k, rank, t, it, pt),
        {"kt_index"},
        std::string(name_of(k)) + " of " + type_name(t) + ", rank " + std::to_string(rank)};
  });
  if (g.compiled) stats_now().programs_compiled++;
  return g.kernels.at(0);
}

arg_binding mem(const tensor_impl& x, scalar_type as, bool is_const) {
  return tensor_mem(x, as, is_const);
}

void run(const kernel& k, const device& dev, std::int64_t total, std::vector<arg_binding>& a) {
  queue& q = dev.default_queue();
  launch(*k.impl(), *q.impl(), range(static_cast<std::uint64_t>(total)), nullptr, a.data(),
         a.size());
  stats_now().kernel_launches++;
}

}  // namespace

std::string index_source(index_kernel_kind k, std::size_t rank, scalar_type t, scalar_type it,
                         scalar_type pt) {
  switch (k) {
    case kind::gather: return gather_source(rank, t, it);
    case kind::place: return codegen::with_element_type(place_text, type_name(t));
    case kind::scatter: return scatter_source(rank, t, it);
    case kind::sort_keys: return sort_keys_source(t, it, pt);
    case kind::run_offsets: return run_offsets_source(t);
    case kind::run_part: return run_part_source(t, it, pt);
    case kind::run_add: return run_add_source(t, pt);
  }
  return "";
}

void launch_gather(tensor_impl& out, const tensor_impl& x, const tensor_impl& idx, int dim,
                   const shape_t& x_strides, const shape_t& idx_strides, std::int64_t x_dim_stride,
                   std::int64_t bound) {
  const std::int64_t total = numel_of(out.shape);
  if (total == 0) return;
  const std::size_t rank = out.shape.size();
  const scalar_type w = bits_type(out.dtype);
  std::vector<arg_binding> a{mem(out, w, false), mem(x, w, true),        mem(idx, idx.dtype, true),
                             bind_arg(total),    bind_arg(x_dim_stride), bind_arg(bound)};
  for (std::size_t d = 1; d < rank; ++d) a.push_back(bind_arg(out.shape[d]));
  for (std::size_t d = 0; d < rank; ++d)
    a.push_back(bind_arg(int(d) == dim ? std::int64_t{0} : x_strides[d]));
  for (std::size_t d = 0; d < rank; ++d) a.push_back(bind_arg(idx_strides[d]));
  run(index_kernel(out.dev, kind::gather, rank, w, idx.dtype), out.dev, total, a);
}

namespace {

// place: src into a slab of out.
void launch_slab(kind which, tensor_impl& out, const tensor_impl& src, std::int64_t total,
                 std::int64_t total_dim, std::int64_t n, std::int64_t offset, std::int64_t inner) {
  if (total == 0) return;
  const scalar_type w = bits_type(out.dtype);
  std::vector<arg_binding> a{
      mem(out, w, false),  mem(src, w, true),           bind_arg(total),
      bind_arg(n * inner), bind_arg(total_dim * inner), bind_arg(offset * inner)};
  run(index_kernel(out.dev, which, 0, w, w), out.dev, total, a);
}

}  // namespace

void launch_place(tensor_impl& out, const tensor_impl& src, std::int64_t outer,
                  std::int64_t total_dim, std::int64_t n, std::int64_t offset, std::int64_t inner) {
  launch_slab(kind::place, out, src, outer * n * inner, total_dim, n, offset, inner);
}

void launch_scatter(tensor_impl& out, const tensor_impl* x, const tensor_impl& idx,
                    const tensor_impl& src, int dim) {
  const std::int64_t total = numel_of(out.shape);
  if (total == 0) return;
  const std::size_t rank = out.shape.size();
  const auto ud = static_cast<std::size_t>(dim);
  const bool empty = numel_of(idx.shape) == 0;
  std::vector<arg_binding> a{mem(out, out.dtype, false),
                             mem(x ? *x : src, out.dtype, true),
                             mem(idx, idx.dtype, true),
                             mem(src, out.dtype, true),
                             bind_arg(total),
                             bind_arg(std::int64_t{x != nullptr}),
                             bind_arg(std::int64_t{dim}),
                             bind_arg(empty ? std::int64_t{0} : idx.shape[ud]),
                             bind_arg(idx.strides[ud]),
                             bind_arg(src.strides[ud])};
  for (std::size_t d = 1; d < rank; ++d) a.push_back(bind_arg(out.shape[d]));
  for (std::size_t d = 0; d < rank; ++d) a.push_back(bind_arg(x ? x->strides[d] : std::int64_t{0}));
  for (std::size_t d = 0; d < rank; ++d)
    a.push_back(bind_arg(d == ud ? std::int64_t{0} : idx.strides[d]));
  for (std::size_t d = 0; d < rank; ++d)
    a.push_back(bind_arg(d == ud ? std::int64_t{0} : src.strides[d]));
  for (std::size_t d = 0; d < rank; ++d)
    a.push_back(bind_arg(d == ud ? std::numeric_limits<std::int64_t>::max()
                                 : (empty ? std::int64_t{0} : idx.shape[d])));
  run(index_kernel(out.dev, kind::scatter, rank, out.dtype, idx.dtype), out.dev, total, a);
}

std::int64_t index_add_chunk(std::int64_t n) {
  return std::max<std::int64_t>(16, static_cast<std::int64_t>(std::ceil(std::sqrt(double(n)))));
}

namespace {

arg_binding sorted_mem(const sort_operand& s, scalar_type t) {
  arg_binding b;
  b.is_mem = true;
  b.mem = s.mem.get();
  b.byte_offset = s.offset * size_of(t);
  b.type = t;
  b.is_const = true;
  return b;
}

}  // namespace

scalar_type index_key_type(std::int64_t rows) {
  if (rows <= 0xff) return scalar_type::u8;
  if (rows <= 0xffff) return scalar_type::u16;
  if (rows <= 0xffffffffll) return scalar_type::u32;
  return scalar_type::u64;
}

scalar_type index_position_type(std::int64_t n) {
  return n > 0xffffffffll ? scalar_type::u64 : scalar_type::u32;
}

void launch_sort_keys(tensor_impl& keys, tensor_impl& pos, const tensor_impl& idx,
                      std::int64_t idx_stride, std::int64_t n, std::int64_t rows) {
  if (n == 0) return;
  std::vector<arg_binding> a{mem(keys, keys.dtype, false), mem(pos, pos.dtype, false),
                             mem(idx, idx.dtype, true),    bind_arg(n),
                             bind_arg(idx_stride),         bind_arg(rows)};
  run(index_kernel(keys.dev, kind::sort_keys, 0, keys.dtype, idx.dtype, pos.dtype), keys.dev, n, a);
}

void launch_index_add(tensor_impl& dx, const tensor_impl& g, const tensor_impl& keys,
                      const tensor_impl& pos, std::int64_t outer, std::int64_t rows, std::int64_t n,
                      std::int64_t inner) {
  const std::int64_t total = outer * rows * inner;
  if (total == 0) return;
  const device& dev = dx.dev;
  const scalar_type kt = keys.dtype, pt = pos.dtype;
  sort_operand sk{keys.mem, std::uint64_t(keys.offset)}, sp{pos.mem, std::uint64_t(pos.offset)};
  if (n > 1) {
    radix_sort_args s;
    s.key_type = kt;
    s.n = std::uint64_t(n);
    s.keys_in = sk;
    s.value_bytes = std::uint32_t(size_of(pt));
    s.values_in = sp;
    const radix_sorted r = radix_sort(dev.default_queue(), s);  // the tensors' queue: no wait
    sk = r.keys;
    sp = r.values;
  }
  auto offs = allocate_tensor(dev, {rows + 1}, scalar_type::i64);
  {
    std::vector<arg_binding> a{mem(*offs, scalar_type::i64, false), sorted_mem(sk, kt), bind_arg(n),
                               bind_arg(rows)};
    run(index_kernel(dev, kind::run_offsets, 0, kt, kt), dev, rows + 1, a);
  }
  const std::int64_t S = index_add_chunk(n), chunks = n / S;
  const scalar_type at = accum_type(dx.dtype);
  auto part = allocate_tensor(dev, {std::max<std::int64_t>(outer * chunks * inner, 1)}, at);
  if (chunks > 0) {
    std::vector<arg_binding> a{mem(*part, at, false),
                               mem(g, g.dtype, true),
                               sorted_mem(sk, kt),
                               sorted_mem(sp, pt),
                               bind_arg(outer * chunks * inner),
                               bind_arg(n),
                               bind_arg(inner),
                               bind_arg(chunks),
                               bind_arg(S)};
    run(index_kernel(dev, kind::run_part, 0, dx.dtype, kt, pt), dev, outer * chunks * inner, a);
  }
  std::vector<arg_binding> a{mem(dx, dx.dtype, false),
                             mem(g, g.dtype, true),
                             mem(*offs, scalar_type::i64, true),
                             sorted_mem(sp, pt),
                             mem(*part, at, true),
                             bind_arg(total),
                             bind_arg(rows),
                             bind_arg(n),
                             bind_arg(inner),
                             bind_arg(chunks),
                             bind_arg(S)};
  run(index_kernel(dev, kind::run_add, 0, dx.dtype, pt, pt), dev, total, a);
}

}  // namespace kiln::detail
