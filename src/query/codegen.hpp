// Renders a segment into portable-kernel-language source (docs/kernel_language.md). One
// element function carries the fused chain; GPU and CPU kernel templates wrap it
// (kernels_gpu.cpp, kernels_cpu.cpp). Kernel parameters, in order: inputs, captures, then the
// template's own (outputs, scratch, sizes).
#pragma once

#include <string>
#include <vector>

#include "codegen/expr_render.hpp"
#include "codegen/target.hpp"
#include "query/segment.hpp"
#include "runtime/generated_kernels.hpp"

namespace kiln::detail::q {

struct codegen_in {
  const segment& seg;
  const ir::graph& graph;               // the query's: every kernel takes all its captures
  const reduce_spec* reduce = nullptr;  // segment_end::reduce
  bool warp32 = true;  // the device runs the target's warp primitives (feature::warp32)
};

// Common text: helpers, element function(s), accumulator and scan types.
struct common_code {
  std::string text;
  std::string params;     // "KILN_GLOBAL const float* KILN_RESTRICT kq_in0, float kq_c0"
  std::string args;       // "kq_in0, kq_c0"
  std::string out_decls;  // "float o0; int32_t o1;"  (collect/reduce outputs, in registers)
  std::string out_refs;   // "&o0, &o1"
  std::string lead;       // params followed by ", ", or "" (a kernel's first parameters)
  std::string call_args;  // ", " followed by args, or "" (after kq_i in element calls)
};

// "KILN_GLOBAL T0* KILN_RESTRICT kq_out0, ...": the collect outputs, each followed by ", ".
std::string out_params(const segment& seg);
// "kq_out0[pos] = o0[idx]; ..." (idx null: the outputs are scalars o0, o1 ...).
std::string out_stores(const segment& seg, const char* pos, const char* idx);

common_code render_common(const codegen_in& in);
const char* c_type(scalar_type t);

// Full program source and the kernels it defines, in launch order.
using generated = generated_program;
// GPU kernels in the target's best form (warp primitives where it has them), shaped by its
// tile policy, which the launcher reads too.
generated render_gpu(const codegen_in& in, const codegen::target& t);
generated render_cpu(const codegen_in& in);

}  // namespace kiln::detail::q
