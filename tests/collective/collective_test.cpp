// kiln::collective in one process: host groups of CPU ranks (the CPU device listed once per
// rank, a thread each) against the double-precision reference for every op and dtype, the
// tensor forms, and bad input. NCCL groups of every CUDA device when there are two or more.
#include "kiln/collective.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>

#include "collective/comm_impl.hpp"
#include "collective/data_parallel_check.hpp"
#include "collective/reference.hpp"
#include "kiln/nn/data_parallel.hpp"
#include "kiln/nn/models.hpp"
#include "kiln/tensor.hpp"

namespace {

using namespace collective_test;
using kiln::collective::communicator;

std::vector<communicator> cpu_group(int n) {
  return communicator::create(std::vector<kiln::device>(n, kiln::device::get("cpu")));
}

std::vector<kiln::device> cuda_devices() {
  std::vector<kiln::device> out;
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() == "cuda") out.push_back(d);
  return out;
}

// "Concurrent": the CI runs it under ThreadSanitizer too (the ranks are threads).
TEST(Collective, ConcurrentHostRanksEveryOpAndDtype) {
  for (int size : {1, 2, 3}) {
    auto comms = cpu_group(size);
    kiln::collective::run_per_rank(comms, [&](communicator& c) {
      EXPECT_EQ(c.size(), size);
      EXPECT_EQ(c.transport(), "host");
      check_all_types(c, 37);
    });
  }
}

TEST(Collective, HostGroupEmptyBuffersAndSubviews) {
  auto comms = cpu_group(2);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    kiln::buffer<float> none(c.get_device(), 0);
    c.all_reduce(none);  // nothing to do, still collective
    std::vector<float> host = data<float>(c.rank(), 10);
    kiln::buffer<float> b(c.get_device(), host);
    c.all_reduce(b.subview(2, 5), reduce_op::max);
    const std::vector<float> got = b.to_vector();
    for (int i = 0; i < 10; ++i) {
      const double want = i >= 2 && i < 7 ? reduced<float>(reduce_op::max, 2, i) : host[i];
      EXPECT_EQ(got[i], static_cast<float>(want)) << i;
    }
  });
}

TEST(Collective, Tensors) {
  auto comms = cpu_group(2);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    const int r = c.rank();
    kiln::tensor t = kiln::tensor::from(dev, data<double>(r, 12), {3, 4});
    kiln::tensor lazy = kiln::tensor::from(dev, data<float>(r, 6), {2, 3}) * 2.f;
    lazy.eval();
    kiln::tensor in = kiln::tensor::from(dev, data<std::int32_t>(r, 8), {4, 2});
    kiln::tensor b = kiln::tensor::from(dev, data<std::int64_t>(r, 5));

    c.all_reduce(t, reduce_op::sum);
    kiln::tensor g = c.all_gather(lazy);
    kiln::tensor rs = c.reduce_scatter(in, reduce_op::min);
    c.broadcast(b, 0);

    std::vector<double> want(12);
    for (int i = 0; i < 12; ++i) want[i] = reduced<double>(reduce_op::sum, 2, i);
    expect_near(t.to_vector<double>(), want, "tensor all_reduce");
    EXPECT_EQ(g.shape(), (kiln::shape_t{4, 3}));
    std::vector<double> gw;
    for (int q = 0; q < 2; ++q)
      for (float x : data<float>(q, 6)) gw.push_back(2.0 * x);
    expect_near(g.to_vector<float>(), gw, "tensor all_gather");
    EXPECT_EQ(rs.shape(), (kiln::shape_t{2, 2}));
    std::vector<double> rw(4);
    for (int i = 0; i < 4; ++i) rw[i] = reduced<std::int32_t>(reduce_op::min, 2, r * 4 + i);
    expect_near(rs.to_vector<std::int32_t>(), rw, "tensor reduce_scatter");
    EXPECT_EQ(b.to_vector<std::int64_t>(), data<std::int64_t>(0, 5));
    kiln::tensor strided = kiln::tensor::from(dev, data<float>(r, 6), {2, 3}).t();
    kiln::tensor three = kiln::tensor::from(dev, data<float>(r, 3), {3});
    EXPECT_THROW(c.all_reduce(strided), kiln::invalid_argument);  // not contiguous
    EXPECT_THROW(c.reduce_scatter(three), kiln::shape_error);     // 3 rows over 2 ranks
  });
}

TEST(Collective, BadInput) {
  auto comms = cpu_group(2);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    kiln::buffer<float> a(dev, data<float>(c.rank(), 4)), b(dev, 5), big(dev, 8);
    try {
      c.all_reduce(a, b);
      ADD_FAILURE() << "size mismatch accepted";
    } catch (const kiln::invalid_argument& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("all_reduce"), std::string::npos) << m;
      EXPECT_NE(m.find("rank " + std::to_string(c.rank())), std::string::npos) << m;
    }
    EXPECT_THROW(c.all_gather(a, b), kiln::invalid_argument);
    EXPECT_THROW(c.reduce_scatter(a, b), kiln::invalid_argument);
    EXPECT_THROW(c.broadcast(a, 2), kiln::invalid_argument);  // no rank 2
    EXPECT_THROW(c.broadcast(a, -1), kiln::invalid_argument);
    kiln::buffer<bool> flags(dev, std::vector<bool>{true, false});
    EXPECT_THROW(c.all_reduce(flags), kiln::dtype_error);
    // Checks happen before the rendezvous, so the group is still in step here.
    c.all_reduce(big);
  });
  // Ranks that disagree: every rank gets the same collective_error instead of a hang.
  std::atomic<int> errors{0};
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    kiln::buffer<float> x(c.get_device(), c.rank() == 0 ? 4 : 6);
    x.fill(1.f);
    try {
      c.all_reduce(x);
    } catch (const kiln::collective_error& e) {
      EXPECT_NE(std::string(e.what()).find("disagree"), std::string::npos) << e.what();
      ++errors;
    }
  });
  EXPECT_EQ(errors.load(), 2);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    kiln::buffer<float> x(c.get_device(), 4);
    x.fill(1.f);
    EXPECT_THROW(c.all_reduce(x, c.rank() == 0 ? reduce_op::sum : reduce_op::max),
                 kiln::collective_error);
  });
  EXPECT_THROW(communicator::create({}), kiln::invalid_argument);
  EXPECT_THROW(communicator().rank(), kiln::invalid_argument);
}

// A device of another backend: not in the group (device_mismatch); a group across backends and
// a backend without the "ccl" extension are refused with the reason.
TEST(Collective, OtherBackends) {
  kiln::device other{nullptr};
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() != "cpu") other = d;
  if (!other.impl()) GTEST_SKIP() << "no device besides the CPU (PoCL or a GPU) to test with";
  auto comms = cpu_group(1);
  kiln::buffer<float> foreign(other, 4);
  EXPECT_THROW(comms[0].all_reduce(foreign), kiln::device_mismatch);
  kiln::queue q(other);
  kiln::buffer<float> mine(comms[0].get_device(), 4);
  EXPECT_THROW(comms[0].all_reduce(mine, reduce_op::sum, &q), kiln::device_mismatch);
  EXPECT_THROW(communicator::create({kiln::device::get("cpu"), other}), kiln::invalid_argument);
  if (other.backend() == "opencl") {
    try {
      communicator::create({other});
      ADD_FAILURE() << "an OpenCL group was accepted";
    } catch (const kiln::unsupported& e) {
      EXPECT_NE(std::string(e.what()).find("ccl"), std::string::npos) << e.what();
    }
  }
}

// One rank's call fails its own checks (an uneven last batch, say) while the other's is fine:
// both throw, and the group stays usable; before, the other rank waited forever.
TEST(Collective, ConcurrentRanksOneFailingItsOwnChecksFailsEveryRank) {
  auto comms = cpu_group(2);
  std::atomic<int> local{0}, remote{0};
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    const std::int64_t rows = c.rank() == 1 ? 7 : 8;  // 7 rows do not split over 2 ranks
    kiln::tensor t = kiln::tensor::from(dev, data<float>(c.rank(), rows * 2), {rows, 2});
    try {
      c.reduce_scatter(t);
      ADD_FAILURE() << "rank " << c.rank() << " returned";
    } catch (const kiln::shape_error&) {
      ++local;
    } catch (const kiln::collective_error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 could not make the call"), std::string::npos)
          << e.what();
      ++remote;
    }
    kiln::buffer<float> a(dev, data<float>(c.rank(), 4)), b(dev, c.rank() == 0 ? 5 : 4);
    EXPECT_THROW(c.all_reduce(a, b), kiln::error);  // rank 0: sizes; rank 1: rank 0 failed
    kiln::buffer<float> x(dev, data<float>(c.rank(), 4));
    c.all_reduce(x);  // in step again
    std::vector<double> want(4);
    for (int i = 0; i < 4; ++i) want[i] = reduced<float>(reduce_op::sum, 2, i);
    expect_near(x.to_vector(), want, "after the failed calls");
  });
  EXPECT_EQ(local.load(), 1);
  EXPECT_EQ(remote.load(), 1);
}

// A rank whose thread throws outside a collective wakes the ranks waiting for it.
TEST(Collective, ConcurrentRanksOneStoppingWakesTheRanksWaitingForIt) {
  auto comms = cpu_group(2);
  try {
    kiln::collective::run_per_rank(comms, [&](communicator& c) {
      if (c.rank() == 1) throw std::runtime_error("no more data");
      kiln::buffer<float> x(c.get_device(), data<float>(0, 4));
      c.all_reduce(x);
    });
    ADD_FAILURE() << "run_per_rank returned";
  } catch (const kiln::collective_error& e) {  // rank 0's, rethrown first
    EXPECT_NE(std::string(e.what()).find("rank 1 stopped: no more data"), std::string::npos)
        << e.what();
  }
  // A rank that returns (fewer batches than the others, say) wakes them too.
  try {
    kiln::collective::run_per_rank(comms, [&](communicator& c) {
      kiln::buffer<float> x(c.get_device(), data<float>(c.rank(), 4));
      c.all_reduce(x);
      if (c.rank() == 0) c.all_reduce(x);  // rank 1 has returned
    });
    ADD_FAILURE() << "run_per_rank returned";
  } catch (const kiln::collective_error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 returned"), std::string::npos) << e.what();
  }
  // Once every rank's thread has ended, the group works again.
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    kiln::buffer<float> x(c.get_device(), data<float>(c.rank(), 4));
    c.all_reduce(x);
    std::vector<double> want(4);
    for (int i = 0; i < 4; ++i) want[i] = reduced<float>(reduce_op::sum, 2, i);
    expect_near(x.to_vector(), want, "after the group was abandoned");
  });
}

// The tensor forms on a queue of the caller's: the tensor is evaluated on the default queue,
// which the caller's queue waits for, and later tensor work waits for the collective.
TEST(Collective, TensorFormsOnACallersQueue) {
  auto comms = cpu_group(2);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    kiln::queue q(dev);
    const kiln::tensor base = kiln::tensor::from(dev, data<float>(c.rank(), 1 << 14), {1 << 14});
    kiln::tensor lazy = base * 2.f + 1.f;  // not evaluated yet
    c.all_reduce(lazy, reduce_op::sum, &q);
    const kiln::tensor after = lazy * 0.5f;  // default-queue work after the collective
    std::vector<double> want(1 << 14);
    for (std::size_t i = 0; i < want.size(); ++i)
      want[i] =
          0.5 * ((2.0 * data<float>(0, 1 << 14)[i] + 1) + (2.0 * data<float>(1, 1 << 14)[i] + 1));
    expect_near(after.to_vector<float>(), want, "tensor all_reduce on a caller's queue");
    kiln::tensor g = c.all_gather(base * 3.f, &q);
    EXPECT_EQ(g.shape(), (kiln::shape_t{2 << 14}));
  });
}

// Integer reductions wrap as NCCL's do (no signed-overflow UB), and avg divides by a rank
// count that need not fit the element type.
TEST(Collective, HostReductionsAtTheIntegerEdges) {
  using kiln::scalar_type;
  std::int32_t acc[2] = {INT32_MAX, INT32_MIN};
  const std::int32_t one[2] = {1, -1};
  kiln::collective::detail::reduce_into(scalar_type::i32, reduce_op::sum, acc, one, 2);
  EXPECT_EQ(acc[0], INT32_MIN);
  EXPECT_EQ(acc[1], INT32_MAX);
  std::int64_t big[1] = {INT64_MAX};
  const std::int64_t two[1] = {2};
  kiln::collective::detail::reduce_into(scalar_type::i64, reduce_op::prod, big, two, 1);
  EXPECT_EQ(big[0], -2);
  std::uint16_t h[1] = {65535};
  const std::uint16_t h2[1] = {65535};
  kiln::collective::detail::reduce_into(scalar_type::u16, reduce_op::prod, h, h2, 1);
  EXPECT_EQ(h[0], 1);  // 65535^2 mod 2^16 (in int, the product overflowed: UB)
  std::uint8_t u[1] = {255};
  kiln::collective::detail::finish_avg(scalar_type::u8, u, 1, 256);  // was a division by 0
  EXPECT_EQ(u[0], 0);
  std::int8_t s[1] = {-128};
  kiln::collective::detail::finish_avg(scalar_type::i8, s, 1, 128);  // 128 wrapped to -128
  EXPECT_EQ(s[0], -1);
}

// A second backward before step() would add gradients after the average: refused.
TEST(DataParallel, ASecondBackwardBeforeStepIsRefused) {
  auto comms = cpu_group(1);
  const kiln::device dev = comms[0].get_device();
  kiln::nn::sequential model(kiln::nn::linear(dev, 4, 2, {.seed = 3}));
  auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.1});
  kiln::nn::data_parallel ddp(model, opt, comms[0]);
  const kiln::tensor x = kiln::tensor::randn(dev, {3, 4}, 1),
                     y = kiln::tensor::randn(dev, {3, 2}, 2);
  opt.zero_grad();
  kiln::nn::mse_loss(ddp(x), y).backward();
  try {
    kiln::nn::mse_loss(ddp(x), y).backward();
    ADD_FAILURE() << "a second backward was accepted";
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("second backward"), std::string::npos) << e.what();
  }
}

// The constructor broadcasts rank 0's parameters and buffers (batch-norm statistics), unless
// told not to.
TEST(DataParallel, ConstructionBroadcastsParametersAndBuffersFromRankZero) {
  for (bool broadcast : {true, false}) {
    auto comms = cpu_group(2);
    kiln::collective::run_per_rank(comms, [&](communicator& c) {
      const kiln::device& dev = c.get_device();
      kiln::nn::sequential model(kiln::nn::batch_norm2d(dev, 3), kiln::nn::flatten(),
                                 kiln::nn::linear(dev, 12, 2, {.seed = 5}));
      {
        kiln::no_grad off;
        for (kiln::tensor& p : model.parameters()) kiln::copy_(p, p + float(c.rank()));
        for (auto& [name, b] : model.named_buffers())
          if (b.dtype() == kiln::scalar_type::f32) kiln::copy_(b, b + float(10 * c.rank()));
      }
      auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.1});
      kiln::nn::data_parallel ddp(model, opt, c, {.broadcast_parameters = broadcast});
      for (const kiln::tensor& p : model.parameters()) {
        kiln::tensor copy = (p.detach() * 1.f).eval();  // rank 0's copy reaches every rank
        c.broadcast(copy, 0);
        const bool same = copy.to_vector<float>() == p.to_vector<float>();
        EXPECT_EQ(same, broadcast || c.rank() == 0) << "rank " << c.rank();
      }
      for (auto& [name, b] : model.named_buffers()) {
        if (b.dtype() != kiln::scalar_type::f32) continue;
        kiln::tensor copy = (b * 1.f).eval();
        c.broadcast(copy, 0);
        const bool same = copy.to_vector<float>() == b.to_vector<float>();
        EXPECT_EQ(same, broadcast || c.rank() == 0) << name << " on rank " << c.rank();
      }
    });
  }
}

// The wide MLP (bench_collective's and `kiln train`'s model where communication matters) builds
// with its 10M parameters, cuts into more than one bucket, and trains a step on two CPU ranks
// with identical parameters after it.
TEST(DataParallel, WideMlpTrainsAStepOnTwoHostRanks) {
  EXPECT_EQ(kiln::nn::models::sample_shape("mlp_wide"), kiln::shape_t{784});
  EXPECT_THROW(kiln::nn::models::by_name("resnet", kiln::device::get("cpu")),
               kiln::invalid_argument);
  EXPECT_THROW(kiln::nn::models::sample_shape("resnet"), kiln::invalid_argument);
  auto comms = cpu_group(2);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    const kiln::device& dev = c.get_device();
    kiln::nn::manual_seed(1);
    kiln::nn::sequential model = kiln::nn::models::by_name("mlp_wide", dev);
    EXPECT_EQ(model.parameter_count(), 10'020'874);
    auto opt = kiln::optim::sgd(model.parameters(), {.lr = 0.1});
    kiln::nn::data_parallel ddp(model, opt, c);
    EXPECT_GE(ddp.bucket_count(), 3u);  // 40 MB of gradients, automatic 10 MB buckets
    const kiln::tensor before = (model.parameters().back().detach() * 1.f).eval();
    const kiln::tensor x = kiln::tensor::randn(dev, {2, 784}, 10 + c.rank());
    const kiln::tensor y =
        (kiln::tensor::rand(dev, {2}, 20 + c.rank()) * 10.f).to(kiln::scalar_type::i64);
    opt.zero_grad();
    const kiln::tensor loss = kiln::nn::cross_entropy(ddp(x), y);
    loss.backward();
    ddp.step();
    EXPECT_TRUE(std::isfinite(loss.item<float>()));
    EXPECT_GT(kiln::abs(model.parameters().back().detach() - before).max().item<float>(), 0.f);
    for (const kiln::tensor& p : model.parameters()) {
      kiln::tensor p0 = (p.detach() * 1.f).eval();
      c.broadcast(p0, 0);
      kiln::tensor diff = kiln::abs(p.detach() - p0).max().contiguous();
      c.all_reduce(diff, reduce_op::max);
      EXPECT_EQ(diff.item<float>(), 0.f) << "rank " << c.rank();
    }
  });
}

// One NCCL rank per CUDA device; empty, with *why set, when there is no device or no NCCL.
std::vector<communicator> nccl_ranks(std::string* why) {
  const auto gpus = cuda_devices();
  if (gpus.empty()) {
    *why = "no CUDA device";
    return {};
  }
  try {
    return communicator::create(gpus);
  } catch (const kiln::unsupported& e) {
    *why = std::string("no NCCL: ") + e.what();
    return {};
  }
}

// data_parallel through NCCL (its own communication queue, event waits) on every CUDA device.
TEST(DataParallel, NcclRanksMatchOneProcess) {
  std::string why;
  std::vector<communicator> comms = nccl_ranks(&why);
  if (comms.empty()) GTEST_SKIP() << why;
  for (bool overlap : {true, false})
    kiln::collective::run_per_rank(
        comms, [&](communicator& c) { data_parallel_matches_one_process(c, overlap); });
}

// Each rank's step captured once and replayed as a CUDA graph (NCCL calls, bucket forks and
// the optimizer inside it): the same parameters as one process, step for step.
TEST(DataParallel, CapturedNcclStepsMatchOneProcess) {
  std::string why;
  std::vector<communicator> comms = nccl_ranks(&why);
  if (comms.empty()) GTEST_SKIP() << why;
  kiln::collective::run_per_rank(
      comms, [&](communicator& c) { data_parallel_matches_one_process(c, true, true); });
}

// A group of one NCCL rank per CUDA device (a one-GPU machine's data_parallel): nothing to
// all-reduce, eagerly and captured.
TEST(DataParallel, OneNcclRankMatchesOneProcess) {
  const auto gpus = cuda_devices();
  if (gpus.empty()) GTEST_SKIP() << "no CUDA device";
  for (const kiln::device& d : gpus) {
    std::vector<communicator> one;
    try {
      one = communicator::create({d});
    } catch (const kiln::unsupported& e) {
      GTEST_SKIP() << "no NCCL: " << e.what();
    }
    for (bool captured : {false, true}) data_parallel_matches_one_process(one[0], true, captured);
  }
}

// Ranks as threads of this process, both training on the one CPU device (the same check runs
// under mpirun in collective_mpi_test).
TEST(DataParallel, HostRanksMatchOneProcess) {
  for (int ranks : {1, 2})  // one rank: nothing to all-reduce, the same training
    for (bool overlap : {true, false}) {
      auto comms = cpu_group(ranks);
      kiln::collective::run_per_rank(
          comms, [&](communicator& c) { data_parallel_matches_one_process(c, overlap); });
    }
  // A step_graph of the same step: CPU ranks run it eagerly, with the same result.
  auto comms = cpu_group(2);
  kiln::collective::run_per_rank(
      comms, [&](communicator& c) { data_parallel_matches_one_process(c, true, true); });
}

TEST(Collective, NcclInProcess) {
  const auto gpus = cuda_devices();
  if (gpus.empty()) GTEST_SKIP() << "no CUDA device: the NCCL path needs one (two for a group)";
  std::string ccl;
  for (const kiln::backend_status& b : kiln::backends())
    if (b.name == "cuda")
      for (const std::string& e : b.extensions) ccl += e + " ";
  if (ccl.find("ccl/") == std::string::npos) {
    EXPECT_THROW(communicator::create(gpus), kiln::unsupported);
    GTEST_SKIP() << "the CUDA plugin has no ccl extension (NCCL missing): refusal tested";
  }
  EXPECT_THROW(communicator::create({gpus[0], gpus[0]}), kiln::invalid_argument);
  auto comms = communicator::create(gpus);
  kiln::collective::run_per_rank(comms, [&](communicator& c) {
    EXPECT_EQ(c.transport(), "nccl");
    check_all_types(c, 1000);
    kiln::queue q(c.get_device());  // ordered on a queue of the caller's
    kiln::buffer<float> x(c.get_device(), data<float>(c.rank(), 1 << 20));
    c.all_reduce(x, reduce_op::avg, &q);
    q.finish();
    std::vector<double> want(1 << 20);
    for (std::size_t i = 0; i < want.size(); ++i)
      want[i] = reduced<float>(reduce_op::avg, c.size(), i);
    expect_near(x.to_vector(), want, "1M-element avg on a queue");
  });
}

}  // namespace
