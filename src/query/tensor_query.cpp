// Run-time queries over tensors (kiln/query/tensor_query.hpp): stage expressions are lazy
// tensors, lowered node for node into the query's IR graph, the way tensor/kernel.cpp lowers
// them for the elementwise kernel, except that leaves are the element's values.
#include "kiln/query/tensor_query.hpp"

#include <string>

#include "kiln/error.hpp"
#include "tensor/promote.hpp"
#include "tensor/tensor_impl.hpp"

namespace kiln::detail::q {
namespace {

constexpr bool queryable(scalar_type t) { return !is_reduced_float(t); }

// Lowers one stage's expression; gives up (-1) on anything a query cannot evaluate.
struct stage_lowering {
  ir::graph& g;
  const std::unordered_map<const tensor_impl*, int>& leaves;
  const tensor_impl* index;
  std::uint64_t n;
  bool uses_index = false;
  std::unordered_map<const tensor_impl*, ir::node_id> seen{};

  ir::node_id visit(const tensor_impl& t) {
    if (auto it = seen.find(&t); it != seen.end()) return it->second;
    if (!queryable(t.dtype)) return -1;
    ir::node_id id = -1;
    if (auto leaf = leaves.find(&t); leaf != leaves.end()) {
      id = g.add(ir::op::component, t.dtype, {}, leaf->second);
    } else if (&t == index) {
      uses_index = true;
      id = g.add(ir::op::index, scalar_type::i64);
    } else if (t.kind == tensor_kind::scalar) {
      g.captures.push_back(t.value);
      id = g.add(ir::op::capture, t.dtype, {}, static_cast<std::int32_t>(g.captures.size() - 1));
    } else if (t.kind == tensor_kind::op) {
      // A node of the element's shape (operands broadcast: scalars, or the same length).
      if (t.shape.size() != 1 || static_cast<std::uint64_t>(t.shape[0]) != n) return -1;
      const ir::op_class cls = ir::info(t.o).cls;
      if (cls == ir::op_class::reduce || cls == ir::op_class::leaf) return -1;
      ir::node node{t.o, t.dtype, {-1, -1, -1}, 0};
      for (std::size_t k = 0; k < t.args.size(); ++k) {
        const tensor_impl& a = *t.args[k];
        if (a.kind != tensor_kind::scalar && a.shape != t.shape) return -1;
        if ((node.operands[k] = visit(a)) < 0) return -1;
      }
      id = g.add(node);
    } else {
      return -1;  // stored memory that is not a component of the element
    }
    seen.emplace(&t, id);
    return id;
  }
};

}  // namespace

tensor_query::tensor_query(const std::vector<tensor>& inputs) {
  if (inputs.empty()) throw invalid_argument("kiln::query: needs at least one input");
  if (inputs.size() > 8) throw invalid_argument("kiln::zip: takes 1 to 8 inputs");
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    bind_input(inputs, k);
    const int var = d_.new_var();
    d_.vars.push_back(var);
    d_.types.push_back(d_.inputs.back().type);
    leaves_[inputs[k].impl().get()] = var;
    components_.push_back(inputs[k]);
  }
}

void tensor_query::bind_input(const std::vector<tensor>& inputs, std::size_t k) {
  const tensor_impl& in = impl_of(inputs[k], "kiln::query");
  if (in.shape.size() != 1)
    throw shape_error("kiln::query: inputs must be 1-D (input " + std::to_string(k) + " has " +
                      std::to_string(in.shape.size()) + " dimensions)");
  if (!queryable(in.dtype))
    throw unsupported(std::string("kiln::query: ") + type_name(in.dtype) +
                      " elements are not supported yet; convert them to float first");
  const device& dev = inputs[k].get_device();
  const auto len = static_cast<std::uint64_t>(in.shape[0]);
  if (k == 0) {
    d_.dev = dev;
    d_.n = len;
  } else if (len != d_.n) {
    throw invalid_argument("kiln::zip: inputs differ in length (" + std::to_string(d_.n) + " and " +
                           std::to_string(len) + " elements)");
  } else if (!(dev == d_.dev)) {
    throw invalid_argument("kiln::zip: inputs live on different devices (" + d_.dev.id() + " and " +
                           dev.id() + ")");
  }
  // The leaf stays the caller's tensor (stage expressions refer to it); the data read is its
  // contiguous form, the same tensor when it already is.
  const tensor data = contiguous_of(inputs[k]);
  const tensor_impl& s = *data.impl();
  d_.inputs.push_back(input{s.mem, static_cast<std::uint64_t>(s.offset), nullptr, false, s.dtype});
  keep_.push_back(inputs[k]);
  keep_.push_back(data);
}

tensor_query tensor_query::unbound() const {
  for (const stage& s : d_.stages)
    if (s.other) throw invalid_argument("kiln::query: a join's query cannot be kept unbound");
  tensor_query u(prepared{}, false);
  u.d_ = d_;
  for (input& in : u.d_.inputs) in.mem = nullptr;  // the types stay: over() checks them
  return u;
}

std::optional<tensor_query> tensor_query::over(const std::vector<tensor>& inputs) const {
  if (inputs.size() != d_.inputs.size()) return std::nullopt;
  for (const stage& s : d_.stages)
    if (s.other) return std::nullopt;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    const tensor_impl& in = impl_of(inputs[k], "kiln::query");
    if (in.dtype != d_.inputs[k].type || !(inputs[k].get_device() == d_.dev)) return std::nullopt;
  }
  tensor_query b(prepared{}, true);
  b.d_.graph = d_.graph;
  b.d_.stages = d_.stages;
  b.d_.vars = d_.vars;
  b.d_.types = d_.types;
  b.d_.next_var = d_.next_var;
  for (std::size_t k = 0; k < inputs.size(); ++k) b.bind_input(inputs, k);
  return b;
}

const tensor& tensor_query::index() const {
  // A stride-0 view of one uninitialised element: a stored [n] leaf (so that casts of it stay
  // nodes over it, unlike a scalar's) that costs neither memory nor a fill. Never read. Made
  // on first use: a device allocation is a pool call (on CUDA it was most of what a run-time
  // query cost beyond a C++ one), and most queries have no _i.
  if (!index_.impl())
    index_ = tensor(allocate_tensor(d_.dev, {1}, scalar_type::i64))
                 .expand({static_cast<std::int64_t>(d_.n)});
  return index_;
}

ir::node_id tensor_query::lower_expr(const tensor& expr, const char* what, bool to_bool,
                                     bool* uses_index) {
  const tensor_impl& root = impl_of(expr, what);
  if (!(expr.get_device() == d_.dev)) return -1;
  // A scalar result (a constant map) has no element shape; the caller broadcasts it itself.
  if (root.shape.size() != 1 || static_cast<std::uint64_t>(root.shape[0]) != d_.n) return -1;
  const std::size_t nodes = d_.graph.nodes.size(), caps = d_.graph.captures.size();
  stage_lowering w{d_.graph, leaves_, index_.impl().get(), d_.n};
  ir::node_id x = w.visit(root);
  if (x >= 0 && to_bool && root.dtype != scalar_type::boolean)
    x = d_.graph.add(ir::op::cast, scalar_type::boolean, {x});
  if (x < 0) {  // undo: the graph is append-only, so truncating restores it
    d_.graph.nodes.resize(nodes);
    d_.graph.captures.resize(caps);
    return -1;
  }
  d_.graph.roots.push_back(x);
  *uses_index |= w.uses_index;
  return x;
}

bool tensor_query::lower_stage(const tensor& expr, stage_kind kind, bool descending) {
  require_stages("a stage");
  const bool is_map = kind == stage_kind::map;
  bool uses_index = false;
  const ir::node_id x = lower_expr(expr,
                                   is_map                       ? "kiln::query map"
                                   : kind == stage_kind::filter ? "kiln::query filter"
                                                                : "kiln::query order_by",
                                   kind == stage_kind::filter, &uses_index);
  if (x < 0) return false;
  const tensor_impl& root = *expr.impl();
  const bool defines = kind != stage_kind::filter;
  stage s =
      make_stage(kind, defines ? d_.new_var() : -1, x, defines ? root.dtype : scalar_type::boolean);
  s.uses_index = uses_index;
  s.descending = descending;
  if (is_map) {
    // Later stages see only the new value: the previous element's leaves are gone.
    leaves_.clear();
    leaves_[&root] = s.var;
    keep_.push_back(expr);
    d_.vars = {s.var};
    d_.types = {s.type};
    components_ = {expr};
  }
  d_.stages.push_back(std::move(s));
  return true;
}

namespace {
scalar_type aggregate_type(aggregate_kind k, scalar_type t) {
  switch (k) {
    case aggregate_kind::count: return scalar_type::u64;
    case aggregate_kind::sum:
      if (is_floating(t)) return t;
      return is_unsigned(t) && t != scalar_type::boolean ? scalar_type::u64 : scalar_type::i64;
    case aggregate_kind::mean: return t == scalar_type::f32 ? t : scalar_type::f64;
    default: return t;  // min, max, first
  }
}
}  // namespace

tensor tensor_query::new_leaf(int var, scalar_type t) {
  tensor leaf = tensor(allocate_tensor(d_.dev, {1}, t)).expand({static_cast<std::int64_t>(d_.n)});
  leaves_[leaf.impl().get()] = var;
  keep_.push_back(leaf);
  return leaf;
}

void tensor_query::replace_element(const std::vector<int>& vars,
                                   const std::vector<scalar_type>& types) {
  leaves_.clear();
  components_.clear();
  d_.vars = vars;
  d_.types = types;
  for (std::size_t k = 0; k < vars.size(); ++k) components_.push_back(new_leaf(vars[k], types[k]));
}

bool tensor_query::group(const tensor& key, const std::vector<aggregate_spec>& aggs, bool sorted) {
  require_stages("group_by");
  for (const aggregate_spec& a : aggs)
    if (a.kind != aggregate_kind::count && !a.value.defined())
      throw invalid_argument("kiln::query group_by: an aggregate other than count needs a value");
  const std::size_t nodes = d_.graph.nodes.size(), caps = d_.graph.captures.size(),
                    roots = d_.graph.roots.size();
  const int vars = d_.next_var;
  const auto undo = [&] {
    d_.graph.nodes.resize(nodes);
    d_.graph.captures.resize(caps);
    d_.graph.roots.resize(roots);
    d_.next_var = vars;
    return false;
  };
  bool uses_index = false;
  const ir::node_id k = lower_expr(key, "kiln::query group_by", false, &uses_index);
  if (k < 0) return undo();
  stage s = make_stage(stage_kind::group, d_.new_var(), k, key.dtype());
  s.sorted = sorted;
  for (const aggregate_spec& a : aggs) {
    aggregate g;
    g.kind = a.kind;
    if (a.kind != aggregate_kind::count) {
      if ((g.expr = lower_expr(a.value, "kiln::query aggregate", false, &uses_index)) < 0)
        return undo();
      if (a.value.dtype() == scalar_type::boolean && a.kind != aggregate_kind::sum &&
          a.kind != aggregate_kind::first)
        throw dtype_error("kiln::query aggregate: min, max and mean of bool are not defined");
      g.in_var = d_.new_var();
      g.in_type = a.value.dtype();
    } else {
      g.in_type = scalar_type::u64;
    }
    g.out_type = aggregate_type(a.kind, g.in_type);
    g.out_var = d_.new_var();
    s.aggregates.push_back(g);
  }
  s.uses_index = uses_index;
  std::vector<int> out_vars{s.var};
  std::vector<scalar_type> out_types{s.type};
  for (const aggregate& g : s.aggregates) {
    out_vars.push_back(g.out_var);
    out_types.push_back(g.out_type);
  }
  d_.stages.push_back(std::move(s));
  replace_element(out_vars, out_types);
  return true;
}

bool tensor_query::first_by(const tensor& key, bool sorted) {
  require_stages("distinct_by");
  bool uses_index = false;
  const ir::node_id k =
      lower_expr(key, "kiln::query distinct_by/unique_by_key", false, &uses_index);
  if (k < 0) return false;
  stage s = make_stage(stage_kind::group, d_.new_var(), k, key.dtype());
  s.sorted = sorted;
  s.drop_key = true;
  s.uses_index = uses_index;
  for (std::size_t c = 0; c < d_.vars.size(); ++c) {
    aggregate a;
    a.kind = aggregate_kind::first;
    a.in_var = a.out_var = d_.vars[c];
    a.in_type = a.out_type = d_.types[c];
    s.aggregates.push_back(a);
  }
  d_.stages.push_back(std::move(s));
  return true;  // the element keeps its components (and their leaves)
}

void tensor_query::distinct() {
  require_stages("distinct");
  require_single("distinct");
  stage s = make_stage(stage_kind::group, d_.vars[0], -1, d_.types[0]);
  s.sorted = true;
  d_.stages.push_back(std::move(s));
}

void tensor_query::top_k(std::uint64_t k) {
  require_stages("top_k");
  require_single("top_k");
  d_.stages.push_back(make_stage(stage_kind::top_k, -1, -1, type(), k));
}

bool tensor_query::join(const tensor_query& other, const tensor& key, const tensor& other_key,
                        bool left) {
  require_stages("join");
  other.require_bound();
  if (!(other.d_.dev == d_.dev))
    throw invalid_argument("kiln::query join: the sides live on different devices (" + d_.dev.id() +
                           " and " + other.d_.dev.id() + ")");
  if (key.dtype() != other_key.dtype())
    throw dtype_error(std::string("kiln::query join: the keys differ in type (") +
                      type_name(key.dtype()) + " and " + type_name(other_key.dtype()) + ")");
  // The other side ends in its key, prepended to its element (kiln::join's form).
  tensor_query o = other;
  bool other_index = false;
  const ir::node_id ox = o.lower_expr(other_key, "kiln::query join", false, &other_index);
  if (ox < 0) return false;
  stage ok = make_stage(stage_kind::enumerate, o.d_.new_var(), ox, other_key.dtype());
  ok.uses_index = other_index;
  o.d_.vars.insert(o.d_.vars.begin(), ok.var);
  o.d_.types.insert(o.d_.types.begin(), ok.type);
  o.d_.stages.push_back(std::move(ok));

  bool uses_index = false;
  const ir::node_id x = lower_expr(key, "kiln::query join", false, &uses_index);
  if (x < 0) return false;
  stage s = make_stage(stage_kind::join, d_.new_var(), x, key.dtype());
  s.uses_index = uses_index;
  s.left = left;
  s.out_vars = d_.vars;
  s.out_types = d_.types;
  for (std::size_t k = 1; k < o.d_.types.size(); ++k) {
    s.out_vars.push_back(d_.new_var());
    s.out_types.push_back(o.d_.types[k]);
  }
  if (left) {
    s.out_vars.push_back(d_.new_var());
    s.out_types.push_back(scalar_type::boolean);
  }
  s.other = std::make_shared<query_desc>(std::move(o.d_));
  const std::vector<int> out_vars = s.out_vars;
  const std::vector<scalar_type> out_types = s.out_types;
  d_.stages.push_back(std::move(s));
  replace_element(out_vars, out_types);
  return true;
}

bool tensor_query::map(const tensor& value) { return lower_stage(value, stage_kind::map, false); }
bool tensor_query::filter(const tensor& predicate) {
  return lower_stage(predicate, stage_kind::filter, false);
}
bool tensor_query::order_by(const tensor& key, bool descending) {
  return lower_stage(key, stage_kind::sort, descending);
}
void tensor_query::sort(bool descending) {
  require_stages("sort");
  require_single("sort");
  stage s = make_stage(stage_kind::sort, -1, -1, type());
  s.descending = descending;
  d_.stages.push_back(std::move(s));
}

scalar_type tensor_query::type() const { return d_.types.at(0); }

void tensor_query::require_stages(const char* what) const {
  if (prepared_)
    throw invalid_argument(std::string("kiln::query: ") + what +
                           " cannot be added to a query made by unbound() or over()");
}

void tensor_query::require_bound() const {
  if (!bound_)
    throw invalid_argument("kiln::query: an unbound() query has no inputs; run over(inputs)");
}

void tensor_query::require_single(const char* what) const {
  if (d_.vars.size() != 1)
    throw invalid_argument(std::string("kiln::query: ") + what +
                           " needs a single-valued element; map the components of a zip to one "
                           "value first");
}

scalar_type tensor_query::accumulator_type(reduce_kind k) const {
  const scalar_type t = type();
  switch (k) {
    case reduce_kind::count: return scalar_type::u64;
    case reduce_kind::sum:
    case reduce_kind::product:
      if (is_floating(t)) return t;
      return is_unsigned(t) ? scalar_type::u64 : scalar_type::i64;
    case reduce_kind::any:
    case reduce_kind::all: return scalar_type::boolean;
    case reduce_kind::average: return scalar_type::f64;
    default: return t;  // min, max, argmin, argmax
  }
}

std::shared_ptr<async_state> tensor_query::reduce_async(reduce_kind k) {
  require_bound();
  if (k == reduce_kind::custom)
    throw invalid_argument("kiln::query: a custom reduction needs C++'s kiln::reduce");
  if (k != reduce_kind::count) require_single("this reduction");
  query_desc d = d_;  // runs may change their description; this query can run again
  return q::reduce_async(d, reduce_spec{k, accumulator_type(k)}, nullptr);
}

reduce_result tensor_query::reduce(reduce_kind k) {
  require_bound();
  if (k == reduce_kind::custom)
    throw invalid_argument("kiln::query: a custom reduction needs C++'s kiln::reduce");
  if (k != reduce_kind::count) require_single("this reduction");
  query_desc d = d_;
  return q::reduce(d, reduce_spec{k, accumulator_type(k)});
}

std::shared_ptr<async_state> tensor_query::collect_async() {
  require_bound();
  require_single("collecting");
  query_desc d = d_;
  return q::collect_async(d, nullptr);
}

namespace {
tensor as_tensor(collect_result r, scalar_type t) {
  if (!r.outputs.at(0)) return tensor(allocate_tensor(r.dev, {0}, t));
  auto out = std::make_shared<tensor_impl>();
  out->dev = r.dev;
  out->dtype = t;
  out->shape = {static_cast<std::int64_t>(r.count)};
  out->strides = {1};
  out->mem = r.outputs.at(0);
  return tensor(std::move(out));
}
}  // namespace

tensor tensor_query::collected(async_state& s, scalar_type t) {
  return as_tensor(async_collect(s), t);
}

tensor tensor_query::collect() {
  require_bound();
  require_single("collecting");
  query_desc d = d_;
  return as_tensor(q::collect(d), type());
}

std::vector<tensor> tensor_query::collect_all() {
  require_bound();
  query_desc d = d_;
  collect_result r = q::collect(d);
  std::vector<tensor> out;
  for (std::size_t k = 0; k < d_.types.size(); ++k) {
    collect_result one;
    one.outputs = {r.outputs.at(k)};
    one.count = r.count;
    one.dev = r.dev;
    out.push_back(as_tensor(std::move(one), d_.types[k]));
  }
  return out;
}

}  // namespace kiln::detail::q
