// Reductions fuse: the elementwise work before a reduction (its prologue) and after it (its
// epilogue) run in the reduction's one kernel; launch counts prove it, and the CUDA dialect
// of every reduction strategy compiles.
#include <tuple>

#include "codegen/target.hpp"
#include "tensor/reduce_fixture.hpp"
#include "tensor/reduce_kernel.hpp"
#include "tensor/row_kernel.hpp"

namespace tensor_test {
namespace {

class ReduceFusionTest : public TensorTest {};
KILN_INSTANTIATE_TENSOR_PER_DEVICE(ReduceFusionTest);

TEST_P(ReduceFusionTest, ReluOfBroadcastExpressionSummedIsOneLaunch) {
  const host<float> ha = random_host<float>({6, 50}, 31), hb = random_host<float>({50}, 32),
                    hc = random_host<float>({6, 1}, 33);
  const kiln::tensor a = upload(dev(), ha), b = upload(dev(), hb), c = upload(dev(), hc);
  const kiln::tensor s = kiln::relu(a * b + c).sum(1);
  EXPECT_TRUE(s.is_lazy());
  s.eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  std::vector<double> want(6, 0), scale(6, 0);
  for (std::size_t i = 0; i < 6; ++i)
    for (std::size_t j = 0; j < 50; ++j) {
      const float v = ha.v[i * 50 + j] * hb.v[j] + hc.v[i];
      want[i] += v > 0 ? v : 0;
      scale[i] += std::fabs(v);
    }
  EXPECT_TRUE(near_rows(read_doubles(s), want, scale, 1e-6));
  // New sizes and scalars of the same structure compile nothing.
  const kiln::tensor a2 = upload(dev(), random_host<float>({9, 7}, 34));
  const kiln::tensor b2 = upload(dev(), random_host<float>({7}, 35));
  const kiln::tensor c2 = upload(dev(), random_host<float>({9, 1}, 36));
  kiln::relu(a2 * b2 + c2).sum(1).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  EXPECT_EQ(stats().programs_compiled, 0u);
}

TEST_P(ReduceFusionTest, EpilogueFusesIntoTheReduction) {
  const host<double> hx = random_host<double>({5, 8}, 37), hy = random_host<double>({5}, 38);
  const kiln::tensor x = upload(dev(), hx), y = upload(dev(), hy);
  // mean = sum / n, 2-norm = sqrt(sum(x * x)), then more elementwise work reading another input.
  const kiln::tensor r = kiln::sqrt((x * x).sum(1)) * 2.0 + y + x.mean(1) * 0.0;
  r.eval();
  EXPECT_EQ(stats().kernel_launches, 2u);  // two reductions: one fuses, one runs first
  const kiln::tensor n = kiln::sqrt((x * x).sum(1)) * 2.0 + y;
  n.eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  std::vector<double> want;
  for (std::size_t i = 0; i < 5; ++i) {
    double s = 0;
    for (std::size_t j = 0; j < 8; ++j) s += hx.v[i * 8 + j] * hx.v[i * 8 + j];
    want.push_back(std::sqrt(s) * 2 + hy.v[i]);
  }
  EXPECT_TRUE(near_rows(read_doubles(n), want, std::vector<double>(5, 1.0), 1e-12));
  EXPECT_TRUE(near_rows(read_doubles(r), want, std::vector<double>(5, 1.0), 1e-12));
  x.mean(1).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  x.norm(2, 1).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
}

// Reductions read back broadcast along the trailing axes (softmax, row normalisation) run
// as one row kernel; a reduction broadcast along another axis runs first, on its own.
TEST_P(ReduceFusionTest, RowFusionAndBroadcastReductions) {
  const host<float> h = random_host<float>({4, 30}, 39);
  const kiln::tensor x = upload(dev(), h);
  const kiln::tensor centred = x - x.mean(1, true);
  centred.eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  x.var(1).eval();  // the mean, then the sum of squares with the division as its epilogue
  EXPECT_EQ(stats().kernel_launches, 2u);
  x.softmax(1).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  x.log_softmax(-1).eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  (x - x.mean(0, true)).eval();  // reduced along the leading axis: the mean runs first
  EXPECT_EQ(stats().kernel_launches, 2u);
  const host<float> hc = random_host<float>({4, 1}, 40);
  const std::vector<float> cv = (x.softmax(1) * upload(dev(), hc)).to_vector<float>();
  EXPECT_EQ(stats().kernel_launches, 1u);
  const std::vector<float> sv = x.softmax(1).to_vector<float>();
  for (std::size_t i = 0; i < cv.size(); ++i) EXPECT_FLOAT_EQ(cv[i], sv[i] * hc.v[i / 30]);
  // Row normalisation (x - mean) / sqrt(var + eps): three passes over each row, one kernel.
  const kiln::tensor norm = (x - x.mean(1, true)) / kiln::sqrt(x.var(1, 0, true) + 1e-5f);
  norm.eval();
  EXPECT_EQ(stats().kernel_launches, 1u);
  std::vector<double> want;
  for (std::size_t i = 0; i < 4; ++i) {
    double m = 0, v = 0;
    for (std::size_t j = 0; j < 30; ++j) m += h.v[i * 30 + j];
    m /= 30;
    for (std::size_t j = 0; j < 30; ++j) v += (h.v[i * 30 + j] - m) * (h.v[i * 30 + j] - m);
    v /= 30;
    for (std::size_t j = 0; j < 30; ++j)
      want.push_back((h.v[i * 30 + j] - m) / std::sqrt(v + 1e-5));
  }
  EXPECT_TRUE(near_rows(read_doubles(norm), want, std::vector<double>(want.size(), 1.0), 1e-5));
}

TEST_P(ReduceFusionTest, RowKernelsOfEveryLengthMatchADoubleReference) {
  // Row lengths around each form's edges (a work-item per row below 32; the warp form's 1, 2,
  // 4 and 32 elements per lane on GPUs with warp shuffles; groups of lanes above 1024), row
  // counts that leave a group part-full, three inputs and two dependent reductions (a layer
  // norm with a broadcast weight), bf16 storage, and a NaN row.
  for (const std::int64_t len :
       {std::int64_t{31}, std::int64_t{32}, std::int64_t{33}, std::int64_t{100}, std::int64_t{256},
        std::int64_t{1000}, std::int64_t{1024}, std::int64_t{1025}}) {
    const std::int64_t rows = len == 1000 ? 9 : 13;
    SCOPED_TRACE("rows " + std::to_string(rows) + " x " + std::to_string(len));
    host<float> hx = random_host<float>({rows, len}, 40 + std::uint64_t(len));
    hx.v[std::size_t(2 * len + 5)] = std::nanf("");  // row 2
    const host<float> hw = random_host<float>({len}, 41), hb = random_host<float>({len}, 42);
    const kiln::tensor x = upload(dev(), hx), w = upload(dev(), hw), b = upload(dev(), hb);
    const kiln::tensor xm = x - x.mean(-1, true);
    const kiln::tensor norm = xm / kiln::sqrt((xm * xm).mean(-1, true) + 1e-5f) * w + b;
    const kiln::tensor soft = x.softmax(-1), lsm = x.to(kiln::scalar_type::bf16).log_softmax(-1);
    std::vector<double> want_soft, want_lsm, want_norm;
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* r = hx.v.data() + i * len;
      double mx = -INFINITY, sum = 0, mean = 0, var = 0, bmx = -INFINITY, bsum = 0;
      std::vector<double> bf(static_cast<std::size_t>(len));
      for (std::int64_t j = 0; j < len; ++j) {
        mx = std::isnan(r[j]) || std::isnan(mx) ? NAN : std::max(mx, double(r[j]));
        bf[std::size_t(j)] = double(float(kiln::bfloat16(r[j])));
        bmx = std::isnan(bf[std::size_t(j)]) || std::isnan(bmx) ? NAN
                                                                : std::max(bmx, bf[std::size_t(j)]);
        mean += r[j];
      }
      mean /= double(len);
      for (std::int64_t j = 0; j < len; ++j) {
        sum += std::exp(r[j] - mx);
        bsum += std::exp(bf[std::size_t(j)] - bmx);
        var += (r[j] - mean) * (r[j] - mean);
      }
      var /= double(len);
      for (std::int64_t j = 0; j < len; ++j) {
        want_soft.push_back(std::exp(r[j] - mx) / sum);
        want_lsm.push_back(bf[std::size_t(j)] - bmx - std::log(bsum));
        want_norm.push_back((r[j] - mean) / std::sqrt(var + 1e-5) * hw.v[std::size_t(j)] +
                            hb.v[std::size_t(j)]);
      }
    }
    for (const auto& [got, want, tol] :
         {std::tuple{&soft, &want_soft, 1e-5}, std::tuple{&lsm, &want_lsm, 1e-2},
          std::tuple{&norm, &want_norm, 1e-4}}) {
      const std::vector<double> g = read_doubles(*got);
      ASSERT_EQ(g.size(), want->size());
      std::vector<double> gf, wf, scale;  // finite rows compared; the NaN row is NaN throughout
      for (std::size_t k = 0; k < g.size(); ++k) {
        if (std::int64_t(k) / len == 2) {
          EXPECT_TRUE(std::isnan(g[k])) << "element " << k;
          continue;
        }
        gf.push_back(g[k]);
        wf.push_back((*want)[k]);
        scale.push_back(std::max(1.0, std::fabs((*want)[k])));
      }
      EXPECT_TRUE(near_rows(gf, wf, scale, tol));
    }
  }
}

TEST(TensorCodegen, ReductionKernelsCompileForCuda) {
  KILN_SKIP_UNLESS_CUDA_COMPILE_ONLY();
  const kiln::device cpu = kiln::device::get("cpu");
  const kiln::tensor a = kiln::tensor::from(cpu, std::vector<float>(24, 1.f), {2, 3, 4});
  const kiln::tensor b = kiln::tensor::from(cpu, std::vector<std::int8_t>(4, 2), {4});
  using kiln::detail::reduce_plan;
  using kiln::detail::reduce_strategy;
  const std::vector<kiln::tensor> exprs{
      kiln::relu(a * b).sum({0, 2}), a.permute({2, 0, 1}).argmax(1),
      kiln::sqrt((a * a).sum(-1)) * 2.f + 1.f, b.min(), b.argmin()};
  for (const kiln::tensor& x : exprs) {
    // The fused reduction: the root, or the one its epilogue reads.
    const kiln::detail::tensor_impl* red = x.impl().get();
    while (kiln::ir::info(red->o).cls != kiln::ir::op_class::reduce) red = red->args.at(0).get();
    for (const reduce_plan& p :
         {reduce_plan{reduce_strategy::thread, 1, 0}, reduce_plan{reduce_strategy::group, 1, 0},
          reduce_plan{reduce_strategy::thread, 3, 2}, reduce_plan{reduce_strategy::group, 3, 2}}) {
      const auto l = kiln::detail::lower_reduce(*x.impl(), *red);
      const std::string src = kiln::detail::render_reduce(l, p);
      EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
    }
  }
}

TEST(TensorCodegen, RowKernelsCompileForCuda) {
  KILN_SKIP_UNLESS_CUDA_COMPILE_ONLY();
  const kiln::device cpu = kiln::device::get("cpu");
  const kiln::tensor x = kiln::tensor::from(cpu, std::vector<double>(24, 1.0), {2, 3, 4});
  // A weight along the row, a value constant along it, two reductions.
  const kiln::tensor w = kiln::tensor::from(cpu, std::vector<double>(4, 2.0), {4});
  const kiln::tensor c = kiln::tensor::from(cpu, std::vector<double>(6, 0.5), {2, 3, 1});
  for (const kiln::tensor& e :
       {x.softmax(-1), x.log_softmax(2), (x - x.mean(-1, true)) * w + c + x.max(-1, true),
        (x - x.mean({1, 2}, true)) / kiln::sqrt(x.var({1, 2}, 0, true) + 1e-5)}) {
    ASSERT_FALSE(kiln::detail::row_fusable(*e.impl()).empty());
    const auto r = kiln::detail::lower_rows(*e.impl());
    for (std::uint32_t lanes : {1u, 32u, 256u}) {
      const std::string src = kiln::detail::render_rows(r, lanes);
      EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
    }
    if (r.l.reduced.size() > 1) {  // several reduced dims: the group form only
      EXPECT_THROW(kiln::detail::render_warp_rows(r, 4, false, ""), kiln::invalid_argument);
      continue;
    }
    for (std::uint32_t items : {1u, 4u, 12u, 32u})  // the warp form, with the target's shuffles
      for (bool full : {false, true}) {
        const std::string src = kiln::detail::render_warp_rows(
            r, items, full, kiln::codegen::target_for("cuda").warp->definitions);
        EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
      }
  }
  // The word form: 16-bit rows of 256 (8 per lane), a bf16 weight, an f32 value along the row.
  const kiln::tensor h = kiln::tensor::from(cpu, std::vector<float>(1536, 1.f), {2, 3, 256});
  const kiln::tensor hb = h.to(kiln::scalar_type::bf16).eval();
  const kiln::tensor w256 = kiln::tensor::from(cpu, std::vector<float>(256, 2.f), {256});
  const kiln::tensor w16 = w256.to(kiln::scalar_type::bf16).eval();
  for (const kiln::tensor& e :
       {hb.softmax(-1), hb.log_softmax(2), (hb - hb.mean(-1, true)) * w16 + w256 + hb.max(-1, true),
        hb.softmax(-1).to(kiln::scalar_type::f32)}) {
    const auto r = kiln::detail::lower_rows(*e.impl());
    for (std::uint32_t items : {8u, 16u}) {
      ASSERT_TRUE(kiln::detail::warp_row_words(r, items, true));
      const std::string src = kiln::detail::render_warp_rows(
          r, items, true, kiln::codegen::target_for("cuda").warp->definitions, true);
      EXPECT_NO_THROW(kiln::compile_only("cuda", conformance::cuda_check_arch, src)) << src;
    }
    EXPECT_FALSE(kiln::detail::warp_row_words(r, 12, true));
    EXPECT_FALSE(kiln::detail::warp_row_words(r, 8, false));
  }
}

}  // namespace
}  // namespace tensor_test
