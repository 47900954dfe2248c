// kiln::query over tensors whose element types are known only at run time: the form language
// bindings use (python/kiln/query.py). C++'s kiln::query types its placeholder expressions at
// compile time; here each stage is a lazy elementwise tensor expression over the inputs (built
// with ordinary tensor arithmetic, so it has the tensor engine's dtype rules), which the query
// takes apart into its IR. The run is kiln::query's own: one planner, the same generated
// kernels (a filter compacts on the device; reductions use the look-back/tree kernels).
//
//   kiln::detail::q::tensor_query tq({x});                  // x: a 1-D stored tensor
//   const kiln::tensor v = x * 2.f + 1.f;                    // lazy: nothing runs
//   tq.map(v);
//   tq.filter(v > 50.f);
//   kiln::detail::q::reduce_result r = tq.reduce(kiln::detail::q::reduce_kind::sum);
//   float s = std::bit_cast<float>(std::uint32_t(r.value_bits));   // tq.accumulator_type()
#pragma once

#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kiln/query/async.hpp"
#include "kiln/query/desc.hpp"
#include "kiln/tensor.hpp"

namespace kiln::detail::q {

class tensor_query {
 public:
  // Inputs: 1-D tensors of one length on one device (a lazy one is evaluated; a strided one is
  // copied to contiguous storage). Errors as kiln::zip's: kiln::invalid_argument, naming them.
  explicit tensor_query(const std::vector<tensor>& inputs);

  // A tensor standing for the element's position (int64): an expression may use it as a
  // leaf (Python's kiln._i). Its values are meaningless outside this query.
  const tensor& index() const;

  // The element becomes `value` (a map), or only elements where `predicate` holds are kept.
  // False, and the query unchanged, when the expression is not one a query can run: a leaf
  // that is neither a component of the current element nor index(), a reduction or other
  // non-elementwise node, a shape other than the inputs' length, or a 16-bit type. The caller
  // then evaluates it another way.
  bool map(const tensor& value);
  bool filter(const tensor& predicate);
  // Reorders the elements, stably (kiln::order_by / kiln::sort): by `key`, an expression as
  // map's (false as for map), or by the single-valued element itself (else
  // kiln::invalid_argument). The element keeps its components.
  bool order_by(const tensor& key, bool descending = false);
  void sort(bool descending = false);

  // Grouping stages (kiln/query/group.hpp), false as map's. group: by `key`, sorted
  // (group_by | aggregate) or over consecutive runs (reduce_by_key); the element becomes
  // (key, one component per aggregate; count's value is undefined). first_by: the first
  // element of each key, every component kept (distinct_by sorted, unique_by_key not).
  struct aggregate_spec {
    aggregate_kind kind = aggregate_kind::sum;
    tensor value;
  };
  bool group(const tensor& key, const std::vector<aggregate_spec>& aggs, bool sorted);
  bool first_by(const tensor& key, bool sorted);
  void distinct();              // single-valued element
  void top_k(std::uint64_t k);  // single-valued element
  // kiln::join / left_join with another run-time query (its key from its own components).
  // After it the element is this side's components, the other's, then (left) matched.
  bool join(const tensor_query& other, const tensor& key, const tensor& other_key, bool left);

  // The lowered stages without the inputs' memory: what a cache of queries keeps (Python's
  // kiln.query keys one by its stages' placeholder trees), so that a query run again over
  // other inputs is not lowered again (about half of a small query's cost from Python).
  // Terminals refuse it until over() binds inputs; neither takes stages (kiln::invalid_argument).
  tensor_query unbound() const;
  // These stages over other inputs: as many, of the same types, on the same device, 1-D and of
  // one length (any). nullopt where they differ in count, type or device, or a join's other
  // side is bound to its own inputs; shape and length errors as the constructor's. Inputs are
  // taken as the constructor takes them (a lazy one evaluated, a strided one made contiguous).
  std::optional<tensor_query> over(const std::vector<tensor>& inputs) const;

  // The tensors standing for the element's components in stage expressions: the inputs, a
  // map's value, or new leaves after a group or a join.
  const std::vector<tensor>& components() const { return components_; }

  scalar_type type() const;  // the (single-valued) element's type; first component's for zip
  std::size_t arity() const { return d_.vars.size(); }
  std::uint64_t size() const { return d_.n; }
  const device& get_device() const { return d_.dev; }

  // The accumulator type kiln::query's terminal of that kind reduces into (sum of an integer:
  // 64-bit; average: f64; min/max: the element's type); count's is u64.
  scalar_type accumulator_type(reduce_kind k) const;
  // Starts the reduction or the compaction on the device's default queue; the caller waits on
  // async_event (kiln::python waits so that Ctrl-C can interrupt) and takes the result with
  // async_reduce / collected(). Single-valued elements only (but count), else
  // kiln::invalid_argument.
  std::shared_ptr<async_state> reduce_async(reduce_kind k);
  // The same, waiting (as C++'s kiln::query terminals do; a kiln::fallback scope applies).
  // Cheaper than the asynchronous form where the CPU backend runs a small query inline.
  reduce_result reduce(reduce_kind k);
  tensor collect();
  // Every component's values (one tensor each; an element of several components).
  std::vector<tensor> collect_all();
  std::shared_ptr<async_state> collect_async();
  // The elements a finished collect_async produced, as a 1-D tensor of type().
  static tensor collected(async_state& s, scalar_type t);

 private:
  // unbound() and over() fill it (two parameters: tensor_query({}) stays the inputs' form).
  struct prepared {};
  tensor_query(prepared, bool bound) : prepared_(true), bound_(bound) {}
  bool lower_stage(const tensor& expr, stage_kind kind, bool descending);
  ir::node_id lower_expr(const tensor& expr, const char* what, bool to_bool, bool* uses_index);
  tensor new_leaf(int var, scalar_type t);
  void replace_element(const std::vector<int>& vars, const std::vector<scalar_type>& types);
  void require_single(const char* what) const;
  void require_stages(const char* what) const;  // not unbound() / over()'s
  void require_bound() const;                   // not unbound()'s
  // The constructor's checks of inputs[k] against the first input's length and device; their
  // contiguous form is appended to d_.inputs.
  void bind_input(const std::vector<tensor>& inputs, std::size_t k);

  query_desc d_;
  mutable tensor index_;      // made by index(), on first use
  std::vector<tensor> keep_;  // inputs and stage values: their impls key leaves_ below
  std::unordered_map<const tensor_impl*, int> leaves_;  // stored or lazy tensor -> value number
  std::vector<tensor> components_;
  bool prepared_ = false;  // made by unbound() or over(): takes no stages
  bool bound_ = true;      // false for unbound()'s
};

}  // namespace kiln::detail::q
