// kiln::collective across processes: run by CTest as `mpirun -np 2 collective_mpi_test` (see
// tests/CMakeLists.txt). Every rank runs every test; each computes the reference for all ranks
// from the shared deterministic data. CPU ranks go through MPI, GPU ranks (KILN_DEVICE=cuda,
// one GPU per rank) through NCCL with the id sent over MPI.
#include <gtest/gtest.h>

#include <cstdlib>

#include "collective/reference.hpp"
#include "kiln/collective_mpi.hpp"
#include "kiln/nn.hpp"
#include "kiln/nn/data_parallel.hpp"
#include "kiln/optim.hpp"
#include "kiln/tensor/inplace.hpp"

namespace {

using namespace collective_test;
using kiln::collective::communicator;

const communicator& world() {
  static const communicator c = kiln::collective::mpi::world(kiln::collective::mpi::local_device());
  return c;
}

TEST(CollectiveMpi, EveryOpAndDtype) {
  const communicator& c = world();
  ASSERT_GE(c.size(), 2) << "run under mpirun -np 2";
  EXPECT_EQ(c.size(), kiln::collective::mpi::world_size());
  EXPECT_EQ(c.rank(), kiln::collective::mpi::world_rank());
  check_all_types(c, 53);
}

TEST(CollectiveMpi, Tensors) {
  const communicator& c = world();
  kiln::tensor t = kiln::tensor::from(c.get_device(), data<float>(c.rank(), 6), {2, 3});
  c.all_reduce(t, reduce_op::avg);
  std::vector<double> want(6);
  for (int i = 0; i < 6; ++i) want[i] = reduced<float>(reduce_op::avg, c.size(), i);
  expect_near(t.to_vector<float>(), want, "tensor avg");
  kiln::tensor g =
      c.all_gather(kiln::tensor::from(c.get_device(), data<std::int64_t>(c.rank(), 3)));
  EXPECT_EQ(g.numel(), 3 * c.size());
}

TEST(CollectiveMpi, BadInput) {
  const communicator& c = world();
  kiln::buffer<float> a(c.get_device(), data<float>(c.rank(), 4)), b(c.get_device(), 5);
  EXPECT_THROW(c.all_reduce(a, b), kiln::invalid_argument);  // local check: no message sent
  EXPECT_THROW(c.broadcast(a, c.size()), kiln::invalid_argument);
  // Ranks that disagree get an error naming the difference, on every rank, not a hang.
  if (c.transport() == "mpi") {
    kiln::buffer<float> x(c.get_device(), c.rank() == 0 ? 4 : 6);
    x.fill(1.f);
    try {
      c.all_reduce(x);
      ADD_FAILURE() << "mismatched counts accepted";
    } catch (const kiln::collective_error& e) {
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(c.rank())), std::string::npos)
          << e.what();
    }
  }
  c.all_reduce(a);  // still in step
}

// Data-parallel training: identical parameters on every rank after each step, and the same
// parameters as one process training on the concatenated batch.
void data_parallel_matches_one_process(bool overlap) {
  const communicator& c = world();
  const kiln::device dev = c.get_device();
  const int per_rank = 4, total = per_rank * c.size();
  auto make = [&] {
    return kiln::nn::sequential(kiln::nn::linear(dev, 6, 5, {.seed = 7}), kiln::nn::relu(),
                                kiln::nn::linear(dev, 5, 3, {.seed = 8}));
  };
  kiln::nn::sequential model = make();
  // Rank-dependent start: the wrapper's broadcast from rank 0 must fix it.
  if (c.rank() != 0) {
    kiln::no_grad off;
    for (kiln::tensor& p : model.parameters()) kiln::copy_(p, p * 3.f + 1.f);
  }
  auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.1, .momentum = 0.9});
  kiln::nn::data_parallel ddp(model, opt, c, {.bucket_bytes = 64, .overlap = overlap});
  EXPECT_GT(ddp.bucket_count(), 1u);  // 64 bytes: several buckets
  kiln::nn::sequential ref = make();
  auto ref_opt = kiln::optim::sgd(ref.parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 4; ++step) {
    const kiln::tensor x_all = kiln::tensor::randn(dev, {total, 6}, 100 + step);
    const kiln::tensor y_all = kiln::tensor::randn(dev, {total, 3}, 200 + step);
    const kiln::tensor x =
        x_all.slice(0, c.rank() * per_rank, (c.rank() + 1) * per_rank).contiguous();
    const kiln::tensor y =
        y_all.slice(0, c.rank() * per_rank, (c.rank() + 1) * per_rank).contiguous();
    opt.zero_grad();
    kiln::nn::mse_loss(ddp(x), y).backward();
    ddp.step();
    ref_opt.zero_grad();
    kiln::nn::mse_loss(ref.forward(x_all), y_all).backward();
    ref_opt.step();
    const auto mine = model.parameters(), theirs = ref.parameters();
    for (std::size_t i = 0; i < mine.size(); ++i) {
      // Identical across ranks: the max over ranks of |p - p_rank0| is exactly 0.
      kiln::tensor p = mine[i].detach().contiguous();
      kiln::tensor p0 = p.contiguous() + 0.f;
      p0.eval();
      c.broadcast(p0, 0);
      kiln::tensor diff = kiln::abs(p - p0).max().contiguous();
      c.all_reduce(diff, reduce_op::max);
      EXPECT_EQ(diff.item<float>(), 0.f) << "step " << step << " parameter " << i;
      const auto a = p.to_vector<float>(), b = theirs[i].detach().to_vector<float>();
      for (std::size_t k = 0; k < a.size(); ++k)
        ASSERT_NEAR(a[k], b[k], 1e-5) << "step " << step << " parameter " << i << " element " << k;
    }
  }
}

TEST(CollectiveMpi, DataParallelMatchesOneProcess) { data_parallel_matches_one_process(true); }
TEST(CollectiveMpi, DataParallelWithoutOverlap) { data_parallel_matches_one_process(false); }

}  // namespace

int main(int argc, char** argv) {
  kiln::collective::mpi::init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints the per-test lines; every rank still runs and asserts.
  if (kiln::collective::mpi::world_rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int failed = RUN_ALL_TESTS();
  // A failure on any rank fails the run on rank 0 (mpirun reports the first non-zero exit).
  return failed;
}
