// Renders IR expressions into kernel-language C expressions (docs/kernel_language.md). The
// one place IR becomes text: every front end's generator calls it. Fully parenthesised, with
// the casts the graph holds; abs/min/max/clamp call generated helpers with std:: semantics,
// philox_lo/philox_hi a generated Philox4x32-10.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "kiln/ir/node.hpp"

namespace kiln::codegen {

std::string value_name(int var);     // a component leaf's value: "v3"
std::string capture_name(int slot);  // a captured scalar's kernel parameter: "kq_c3"
std::string load_name(int slot);     // the value a load leaf read, declared by the kernel: "kl3"

// f16 and bf16 are stored in 16 bits and computed in float (DESIGN 12). value_type: the type a
// kernel declares a value of type t with ("float" for both, type_name otherwise); load_value:
// stored element `elem` (an lvalue such as "p[i]") read as that type; store_value: value v
// converted for storing into an element of type t (rounded to nearest even).
std::string value_type(scalar_type t);
std::string load_value(scalar_type t, const std::string& elem);
std::string store_value(scalar_type t, const std::string& v);

std::string render_expr(const ir::graph& g, ir::node_id root);
// One node, its operands spelled by `operand` (a name a kernel declared earlier, say), so a
// DAG renders each shared node once instead of once per use.
std::string render_node(const ir::graph& g, ir::node_id id,
                        const std::function<std::string(ir::node_id)>& operand);

// A generated helper function: abs, min, max, clamp in one type ("kq_min_float"), or
// philox_lo/philox_hi ("kq_philox_lo_uint64_t").
struct helper {
  ir::op o;
  scalar_type t;
  bool operator==(const helper&) const = default;
};
std::string helper_name(const helper& h);
std::string helper_def(const helper& h);
// The helpers the roots call, each once, in the order kernels have always defined them.
std::vector<helper> helpers_of(const ir::graph& g, const std::vector<ir::node_id>& roots);
// Every node's helpers, in node order: linear in a DAG whose shared nodes the walk above repeats.
std::vector<helper> helpers_in(const ir::graph& g);

}  // namespace kiln::codegen
