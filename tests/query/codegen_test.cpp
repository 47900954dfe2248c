// The GPU kernel templates of the query engine, compiled for CUDA through NVRTC without a GPU
// (compile-only), so CI checks every template's CUDA source; and the CPU templates compiled by
// the host compiler. One segment per template and reduce kind.
#include "query/codegen.hpp"

#include <gtest/gtest.h>

#include <kiln/kiln.hpp>

#include "conformance/backends.hpp"

namespace {
using namespace kiln::placeholders;
using namespace kiln::detail::q;
using ir_node = kiln::ir::node_id;

segment segment_of(query_desc& d, segment_end end) {
  segment s;
  for (std::size_t k = 0; k < d.inputs.size(); ++k) {
    const int v = static_cast<int>(k);  // sources number their inputs first
    s.inputs.push_back({v, v, d.inputs[k].type, {}});
  }
  s.stages = d.stages;
  s.out_vars = d.vars;
  s.out_types = d.types;
  s.end = end;
  return s;
}

// Renders for both backend classes; the CPU source is compiled for the CPU device, the GPU one
// through NVRTC when the CUDA backend is loaded without a device (the CI case).
void check(query_desc& d, segment_end end, const reduce_spec* r = nullptr) {
  const segment s = segment_of(d, end);
  const codegen_in in{s, d.graph, r};
  const generated gpu = render_gpu(in, kiln::codegen::cuda_target), cpu = render_cpu(in);
  ASSERT_FALSE(gpu.kernels.empty());
  if (conformance::cuda_compile_only()) {
    EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, gpu.source))
        << gpu.source;
  }
  const kiln::program p = kiln::program::compile(kiln::device::get("cpu"), cpu.source);
  for (const auto& k : cpu.kernels) EXPECT_NO_THROW(p.get_kernel(k));
}

TEST(QueryCodegen, EveryTemplateCompiles) {
  if (!conformance::cuda_compile_only())
    std::cout << "[ note     ] CUDA sources are checked where NVRTC runs without a GPU; with a "
                 "GPU the query suite runs them\n";
  const kiln::device cpu = kiln::device::get("cpu");
  kiln::buffer<float> xs(cpu, 16);
  kiln::buffer<int> ws(cpu, 16);
  kiln::buffer<double> ds(cpu, 16);
  {
    auto q = xs | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1.f) | kiln::transform(_1 + 1.f);
    check(q.desc(), segment_end::collect);  // staged compaction
  }
  {
    auto q = kiln::zip(ds, ws) | kiln::filter(_2 != 0);  // 12 bytes per element: unstaged
    check(q.desc(), segment_end::collect);
  }
  {
    auto q = xs | kiln::transform(kiln::clamp(_1, 0.f, 1.f) + kiln::abs(_1));
    check(q.desc(), segment_end::collect);  // map, with helpers
  }
  for (reduce_kind k : {reduce_kind::count, reduce_kind::sum, reduce_kind::product,
                        reduce_kind::min, reduce_kind::max, reduce_kind::any, reduce_kind::all,
                        reduce_kind::average, reduce_kind::argmin, reduce_kind::argmax}) {
    SCOPED_TRACE(static_cast<int>(k));
    auto q = xs | kiln::filter(_1 > 2.f);
    const kiln::scalar_type acc = k == reduce_kind::average ? kiln::scalar_type::f64
                                  : k == reduce_kind::any || k == reduce_kind::all
                                      ? kiln::scalar_type::boolean
                                  : k == reduce_kind::count ? kiln::scalar_type::u64
                                                            : kiln::scalar_type::f32;
    const reduce_spec r{k, acc};
    check(q.desc(), segment_end::reduce, &r);
  }
  {
    auto q = ws | kiln::transform(_1 + 1);
    query_desc& d = q.desc();
    const ir_node op = lower_combine<int>(d, _1 * _2, "test");
    const reduce_spec r{reduce_kind::custom, kiln::scalar_type::i32, op, d.graph.new_capture(1)};
    check(q.desc(), segment_end::reduce, &r);
  }
  {
    auto q = xs | kiln::inclusive_scan() | kiln::transform(_1 * 2.f + kiln::cast<float>(_i));
    check(q.desc(), segment_end::scan);  // 4-byte packed look-back words
  }
  {
    auto q = ws | kiln::exclusive_scan(3, kiln::max(_1, _2));
    check(q.desc(), segment_end::scan);
  }
  {
    auto q = ws | kiln::inclusive_scan();  // int64 sums: the fenced protocol
    check(q.desc(), segment_end::scan);
  }
  {
    auto q = ds | kiln::exclusive_scan(1.0);
    check(q.desc(), segment_end::scan);
  }
}

}  // namespace
