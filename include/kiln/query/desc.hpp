// The run-time description of a query that the header templates build and the library plans,
// generates and runs (src/query/). Internal: users see kiln::query and its operators.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/device.hpp"
#include "kiln/query/expr.hpp"
#include "kiln/scalar_type.hpp"

namespace kiln::detail {
struct memory_impl;
}

namespace kiln::detail::q {

enum class stage_kind : std::uint8_t { map, filter, take, skip, enumerate, scan };

struct stage {
  stage_kind kind = stage_kind::map;
  std::string var;   // map, enumerate, scan: the C name of the new component
  std::string code;  // map: expression; filter: predicate; scan: combine of kq_a and kq_b
  scalar_type type = scalar_type::f32;  // type of var
  std::uint64_t count = 0;              // take, skip
  bool uses_index = false;
  bool exclusive = false;  // scan
  std::string init;        // exclusive scan: the capture holding the initial value
  std::string arg;         // scan: the component it scans
};

inline stage make_stage(stage_kind k, std::string var, std::string code, scalar_type t,
                        std::uint64_t count = 0) {
  stage s;
  s.kind = k;
  s.var = std::move(var);
  s.code = std::move(code);
  s.type = t;
  s.count = count;
  return s;
}

struct input {
  std::shared_ptr<memory_impl> mem;  // device inputs
  std::uint64_t offset = 0;          // in elements
  const void* host = nullptr;        // host inputs (kiln::on); null for an empty range
  bool on_host = false;
  scalar_type type = scalar_type::f32;
};

enum class placement : std::uint8_t { fixed, automatic };

struct query_desc {
  device dev{nullptr};
  placement where = placement::fixed;
  std::uint64_t n = 0;
  std::vector<input> inputs;
  std::vector<capture> captures;
  std::vector<std::string> helpers;
  std::vector<stage> stages;
  std::vector<std::string> names;  // the current element's components
  std::vector<scalar_type> types;
  int next_var = 0;

  bool host_input() const { return !inputs.empty() && inputs[0].on_host; }
  std::string new_var() {
    std::string v = std::to_string(next_var++);
    v.insert(v.begin(), 'v');  // not "v" + ...: GCC 12 warns falsely there (bug 105329)
    return v;
  }
  render_ctx ctx() { return render_ctx{names, "kq_i", &captures, &helpers, false}; }
};

enum class reduce_kind : std::uint8_t {
  count,
  sum,
  product,
  min,
  max,
  any,
  all,
  average,
  argmin,
  argmax,
  custom
};

struct reduce_spec {
  reduce_kind kind = reduce_kind::sum;
  scalar_type acc = scalar_type::f64;  // type of the accumulated value
  std::string op;                      // custom: combine of kq_a and kq_b
  std::string init;                    // custom: the capture holding init
};

// The accumulator every reduction produces; the generated kernels use the same layout.
struct reduce_result {
  std::uint64_t value_bits = 0;  // the value, in the accumulator's type
  std::uint64_t count = 0;       // elements seen
  std::int64_t index = -1;       // argmin/argmax
};

struct collect_result {
  std::vector<std::shared_ptr<memory_impl>> outputs;  // one per element component
  std::uint64_t count = 0;
  device dev{nullptr};
};

// src/query/run.cpp
collect_result collect(query_desc& d);
reduce_result reduce(query_desc& d, const reduce_spec& r);

}  // namespace kiln::detail::q
