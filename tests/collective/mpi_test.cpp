// kiln::collective across processes: run by CTest as `mpirun -np 2 collective_mpi_test` (see
// tests/CMakeLists.txt). Every rank runs every test; each computes the reference for all ranks
// from the shared deterministic data. CPU ranks go through MPI, GPU ranks (KILN_DEVICE=cuda,
// one GPU per rank) through NCCL with the id sent over MPI.
#include <gtest/gtest.h>

#include <cstdlib>

#include "collective/data_parallel_check.hpp"
#include "collective/reference.hpp"
#include "kiln/collective_mpi.hpp"

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
  EXPECT_THROW(c.all_reduce(a, b), kiln::invalid_argument);  // on every rank: still in step
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
  // One rank fails its own check, the others get a collective_error rather than a hang (MPI
  // transport; NCCL ranks would hang, as with NCCL itself).
  if (c.transport() == "mpi") {
    kiln::buffer<float> y(c.get_device(), 4), z(c.get_device(), c.rank() == 1 ? 5 : 4);
    y.fill(1.f);
    if (c.rank() == 1)
      EXPECT_THROW(c.all_reduce(y, z), kiln::invalid_argument);
    else
      EXPECT_THROW(c.all_reduce(y, z), kiln::collective_error);
  }
  c.all_reduce(a);  // still in step
}

// NCCL's in-place forms (send is this rank's block of recv, or recv of send) through MPI.
TEST(CollectiveMpi, InPlaceGatherAndScatter) {
  const communicator& c = world();
  const std::uint64_t n = 5, r = static_cast<std::uint64_t>(c.rank());
  const std::uint64_t size = static_cast<std::uint64_t>(c.size());
  kiln::buffer<float> all(c.get_device(), n * size);
  all.fill(-1.f);
  kiln::buffer<float> mine(c.get_device(), data<float>(c.rank(), n));
  c.get_device().default_queue().copy(mine, all.subview(r * n, n));
  c.all_gather(all.subview(r * n, n), all);
  std::vector<double> want;
  for (int q = 0; q < c.size(); ++q)
    for (float v : data<float>(q, n)) want.push_back(v);
  expect_near(all.to_vector(), want, "in-place all_gather");
  kiln::buffer<float> rs(c.get_device(), data<float>(c.rank(), n * size));
  c.reduce_scatter(rs, rs.subview(r * n, n));
  std::vector<double> rw(n);
  for (std::uint64_t i = 0; i < n; ++i) rw[i] = reduced<float>(reduce_op::sum, c.size(), r * n + i);
  const std::vector<float> got = rs.to_vector();
  expect_near(std::vector<float>(got.begin() + r * n, got.begin() + (r + 1) * n), rw,
              "in-place reduce_scatter");
}

TEST(CollectiveMpi, DataParallelMatchesOneProcess) {
  data_parallel_matches_one_process(world(), true);
}
TEST(CollectiveMpi, DataParallelWithoutOverlap) {
  data_parallel_matches_one_process(world(), false);
}

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
