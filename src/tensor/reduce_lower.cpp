// Lowering a reduction with its prologue and epilogue to IR, coalescing its iteration space,
// and choosing its strategy (reduce_kernel.hpp).
#include <bit>
#include <limits>
#include <unordered_map>

#include "ir/hash.hpp"
#include "ir/layout.hpp"
#include "tensor/promote.hpp"
#include "tensor/reduce_kernel.hpp"

namespace kiln::detail {
namespace {}  // namespace

shape_t strides_over(const tensor_impl& t, const shape_t& over) {
  shape_t s(over.size(), 0);
  const std::size_t lead = over.size() - t.shape.size();
  for (std::size_t k = lead; k < over.size(); ++k)
    s[k] = t.shape[k - lead] == 1 ? 0 : t.strides[k - lead];
  return s;
}

namespace {

struct lowering {
  reduce_lowered& out;
  const tensor_impl& red;
  shape_t xs;  // the reduced tensor's shape
  std::uint32_t mask;
  bool keepdim;
  std::vector<shape_t> strides;  // per input, over xs's dims
  std::unordered_map<const tensor_impl*, ir::node_id> seen[2];

  ir::node_id add(const ir::node& n, bool epi) {
    out.in_epilogue.push_back(epi);
    return out.g.add(n);
  }

  // An epilogue leaf's strides over xs: kept dims from the output's dims, reduced dims 0.
  shape_t epilogue_strides(const tensor_impl& t) const {
    const shape_t o = strides_over(t, red.shape);
    shape_t s(xs.size(), 0);
    std::size_t j = 0;
    for (std::size_t d = 0; d < xs.size(); ++d) {
      const bool reduced = mask >> d & 1u;
      if (keepdim)
        s[d] = reduced ? 0 : o[d];
      else if (!reduced)
        s[d] = o[j++];
    }
    return s;
  }

  ir::node_id visit(const tensor_impl& t, bool epi) {
    if (auto it = seen[epi].find(&t); it != seen[epi].end()) return it->second;
    ir::node_id id = -1;
    if (t.kind == tensor_kind::stored) {
      const auto slot = static_cast<std::int32_t>(out.g.inputs.size());
      out.g.inputs.push_back({t.dtype, {}});
      out.leaves.push_back(&t);
      strides.push_back(epi ? epilogue_strides(t) : strides_over(t, xs));
      id = add({ir::op::load, t.dtype, {-1, -1, -1}, slot}, epi);
    } else if (t.kind == tensor_kind::scalar) {
      out.g.captures.push_back(t.value);
      id = add({ir::op::capture,
                t.dtype,
                {-1, -1, -1},
                static_cast<std::int32_t>(out.g.captures.size() - 1)},
               epi);
    } else if (&t == &red) {
      const ir::node_id x = visit(*t.args.at(0), false);
      id = add({t.o, t.dtype, {x, -1, -1}, static_cast<std::int32_t>(t.axes)}, false);
      out.red = id;
    } else {
      if (ir::info(t.o).cls == ir::op_class::reduce)
        throw std::logic_error("kiln::tensor: a nested reduction was not evaluated first");
      ir::node n{t.o, t.dtype, {-1, -1, -1}, 0};
      for (std::size_t k = 0; k < t.args.size(); ++k) n.operands[k] = visit(*t.args[k], epi);
      id = add(n, epi);
    }
    seen[epi].emplace(&t, id);
    return id;
  }
};

struct dim {
  std::int64_t n;
  bool reduced;
  std::size_t at;  // index into xs
};

}  // namespace

std::int64_t reduce_lowered::outputs() const { return numel_of(kept); }
std::int64_t reduce_lowered::rows() const { return numel_of(reduced); }

void lay_out(reduce_lowered& l, const shape_t& xs, std::uint32_t mask,
             const std::vector<shape_t>& strides) {
  // Coalesce: drop size-1 dims; merge neighbours of one kind that every input walks as one.
  std::vector<dim> dims;
  for (std::size_t d = 0; d < xs.size(); ++d)
    if (xs[d] != 1) dims.push_back({xs[d], bool(mask >> d & 1u), d});
  std::vector<shape_t> st(strides.size());
  std::vector<dim> merged;
  for (const dim& d : dims) {
    bool joins = !merged.empty() && merged.back().reduced == d.reduced;
    for (std::size_t k = 0; joins && k < st.size(); ++k)
      joins = st[k].back() == strides[k][d.at] * d.n;
    if (joins) {
      merged.back().n *= d.n;
      for (std::size_t k = 0; k < st.size(); ++k) st[k].back() = strides[k][d.at];
    } else {
      merged.push_back(d);
      for (std::size_t k = 0; k < st.size(); ++k) st[k].push_back(strides[k][d.at]);
    }
  }
  l.inner_reduced = merged.empty() || merged.back().reduced;
  std::vector<std::size_t> order;  // kept dims first, then reduced ones
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t i = 0; i < merged.size(); ++i)
      if (merged[i].reduced == bool(pass)) {
        order.push_back(i);
        (pass ? l.reduced : l.kept).push_back(merged[i].n);
      }
  for (std::size_t k = 0; k < st.size(); ++k) {
    ir::layout& L = l.g.inputs[k].l;
    L.rank = static_cast<std::uint8_t>(order.size());
    for (std::size_t j = 0; j < order.size(); ++j) {
      L.dims[j] = merged[order[j]].n;
      L.strides[j] = st[k][order[j]];
    }
  }
}

reduce_lowered lower_reduce(const tensor_impl& root, const tensor_impl& red) {
  reduce_lowered l;
  l.out_shape = root.shape;
  const tensor_impl& x = *red.args.at(0);
  lowering w{l, red, x.shape, red.axes, red.shape.size() == x.shape.size(), {}, {}};
  l.g.roots.push_back(w.visit(root, root.kind == tensor_kind::op && &root != &red));

  lay_out(l, x.shape, red.axes, w.strides);
  return l;
}

reduce_plan plan_reduce(const reduce_lowered& l, const device& dev) {
  using P = reduce_policy;
  reduce_plan p;
  const std::int64_t outs = l.outputs(), rows = l.rows();
  const bool barrier = dev.supports(feature::barrier);
  const std::int64_t units = std::max<std::int64_t>(dev.info().compute_units, 1);
  if (barrier && l.inner_reduced && rows >= P::group_min_rows) p.strategy = reduce_strategy::group;
  const bool group = p.strategy == reduce_strategy::group;
  const std::int64_t want = group     ? units * P::gpu_groups_per_unit
                            : barrier ? units * P::gpu_items_per_unit
                                      : units * P::cpu_items_per_unit;
  const std::int64_t per = group     ? P::split_group_elems
                           : barrier ? P::gpu_split_item_elems
                                     : P::split_item_elems;
  if (outs > 0 && outs < want && rows >= 2 * per) {
    p.chunks = std::min((want + outs - 1) / outs, rows / per);
    p.chunk_len = (rows + p.chunks - 1) / p.chunks;
    p.chunks = (rows + p.chunk_len - 1) / p.chunk_len;
  }
  if (p.chunks < 2) p = {p.strategy, 1, 0};
  if (p.chunks > 1 && barrier && !group)
    while (p.fold_lanes < P::max_fold_lanes &&
           std::int64_t(p.fold_lanes) * 2 * P::fold_parts_per_lane <= p.chunks)
      p.fold_lanes *= 2;
  if (p.strategy == reduce_strategy::group) {
    // Enough lanes that each folds about elems_per_lane elements: short rows share a group.
    const std::int64_t per_work = p.chunks > 1 ? p.chunk_len : rows;
    p.lanes = P::min_lanes;
    while (p.lanes < P::group && p.lanes * 2 * P::elems_per_lane <= per_work) p.lanes *= 2;
    if (p.chunks > 1) p.fold_lanes = p.lanes;
  }
  return p;
}

std::uint64_t reduce_key(const reduce_lowered& l, const reduce_plan& p) {
  ir::hasher h;
  h.add("tensor reduce v1").add(l.kept.size()).add(l.reduced.size());
  h.add(static_cast<std::uint64_t>(p.strategy)).add(std::uint64_t{p.chunks > 1});
  h.add(std::uint64_t{reduce_policy::group}).add(std::uint64_t{p.lanes});
  h.add(std::uint64_t{p.fold_lanes});
  for (std::uint8_t e : l.in_epilogue) h.add(std::uint64_t{e});
  for (const ir::input& in : l.g.inputs) h.add_input(in);
  h.add_nodes(l.g);
  return h.value();
}

ir::capture reduce_init(ir::op o, scalar_type t) {
  t = compute_type(t);  // f16 and bf16 accumulate in float
  const bool high = o == ir::op::reduce_min || o == ir::op::argmin;
  if (o == ir::op::reduce_sum) return {t, 0};
  auto bits = [](auto v) {
    std::uint64_t b = 0;
    std::memcpy(&b, &v, sizeof v);
    return b;
  };
  auto pick = [&]<class T>(T) -> std::uint64_t {
    using L = std::numeric_limits<T>;
    if constexpr (std::is_floating_point_v<T>)
      return bits(high ? L::infinity() : -L::infinity());
    else
      return bits(high ? L::max() : L::lowest());
  };
  switch (t) {
    case scalar_type::boolean: return {t, high ? 1u : 0u};
    case scalar_type::i8: return {t, pick(std::int8_t{})};
    case scalar_type::i16: return {t, pick(std::int16_t{})};
    case scalar_type::i32: return {t, pick(std::int32_t{})};
    case scalar_type::i64: return {t, pick(std::int64_t{})};
    case scalar_type::u8: return {t, pick(std::uint8_t{})};
    case scalar_type::u16: return {t, pick(std::uint16_t{})};
    case scalar_type::u32: return {t, pick(std::uint32_t{})};
    case scalar_type::u64: return {t, pick(std::uint64_t{})};
    case scalar_type::f32: return {t, pick(float{})};
    case scalar_type::f64: return {t, pick(double{})};
    case scalar_type::f16:
    case scalar_type::bf16: break;  // accumulated in float: compute_type(t)
  }
  return {t, 0};
}

}  // namespace kiln::detail
