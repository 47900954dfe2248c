// Bad input at kiln::ring's entry points that ring_fault_test.cpp's BadInputIsRefusedClearly
// does not already cover: every option at its bounds, handler names that are not identifiers,
// reading more state than the ring has, calls after terminate, empty batches, moved-from rings.
// Runs on every device that hosts rings (cpu, cuda). docs/testing.md lists what is covered where.
#include "bad_input.hpp"

#include <utility>

#include "ring/ring_fixture.hpp"

namespace ring_test {
namespace {

using bad_input::throws;
using namespace std::chrono_literals;

class RingBadInputTest : public RingTest {};
INSTANTIATE_TEST_SUITE_P(Ring, RingBadInputTest, ::testing::ValuesIn(ring_devices()), param_name);

TEST_P(RingBadInputTest, OptionsOutOfRangeNameTheOptionAndValue) {
  auto refused = [&](auto set, std::initializer_list<std::string> parts) {
    kiln::ring_options o;
    set(o);
    return throws<kiln::invalid_argument>(
        [&] { kiln::ring<ping, pong> r(dev(), handlers, "echo", o); }, parts);
  };
  EXPECT_TRUE(refused([](auto& o) { o.capacity = 0; }, {"capacity", "not 0", dev().id()}));
  EXPECT_TRUE(refused([](auto& o) { o.capacity = (1u << 24) + 1; }, {"capacity", "16777217"}));
  EXPECT_TRUE(refused([](auto& o) { o.capacity = UINT32_MAX; }, {"capacity", "4294967295"}));
  EXPECT_TRUE(refused([](auto& o) { o.batch = 0; }, {"batch", "not 0"}));
  EXPECT_TRUE(refused([](auto& o) { o.batch = 4097; }, {"batch", "4097"}));
  EXPECT_TRUE(refused([](auto& o) { o.units = UINT32_MAX; }, {"units", "4294967295"}));
  if (is_gpu()) {
    EXPECT_TRUE(refused([](auto& o) { o.warps_per_block = 0; }, {"warps_per_block"}));
    EXPECT_TRUE(refused([](auto& o) { o.warps_per_block = 32; }, {"warps_per_block"}));
  }
}

TEST_P(RingBadInputTest, HandlerNamesThatAreNotIdentifiers) {
  for (const std::string name : {"", "1echo", "echo()", "ec ho", "echo;"}) {
    const std::string quoted = std::string(1, '\'').append(name).append(1, '\'');
    EXPECT_TRUE(throws<kiln::invalid_argument>(
        [&] { kiln::ring<ping, pong> r(dev(), handlers, name); }, {quoted, "not a handler name"}))
        << "handler " << quoted;
  }
}

TEST_P(RingBadInputTest, EmptyAndBrokenSource) {
  EXPECT_THROW((kiln::ring<ping, pong>(dev(), "", "echo")), kiln::error);
  EXPECT_THROW((kiln::ring<ping, pong>(dev(), "KILN_FUNC void echo(", "echo")),
               kiln::compile_error);
}

// The state is at least 16 bytes (zeroed past what options.state gave); reading more is refused.
TEST_P(RingBadInputTest, ReadingMoreStateThanTheRingHas) {
  struct wide {
    std::uint64_t w[4];
  };
  struct wider {
    std::uint64_t w[5];
  };
  {
    kiln::ring<ping, pong> none(dev(), handlers, "echo");
    EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)none.state<wide>(); },
                                               {"state is 16 bytes", "cannot read 32"}));
    EXPECT_EQ(none.state<std::uint64_t>(), 0u);
  }  // ended first: on CUDA a second ring's program cannot load beside a resident one
  kiln::ring<ping, pong> some(dev(), handlers, "count", kiln::ring_options{}.with_state(wide{}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)some.state<wider>(); },
                                             {"state is 32 bytes", "cannot read 40"}));
  EXPECT_NO_THROW((void)some.state<wide>());
}

TEST_P(RingBadInputTest, CallsAfterTerminate) {
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  r.activate();
  (void)r.terminate();
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { r.activate(); }, {"already terminated"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { r.deactivate(); }, {"already terminated"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)r.send(make_ping(1, 0, 1)); },
                                             {"send after terminate"}));
  const std::vector<ping> batch(3, make_ping(2, 0, 2));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)r.send_batch(batch); }, {"send after terminate"}));
  EXPECT_FALSE(r.try_receive().has_value());
}

TEST_P(RingBadInputTest, EmptyBatchesDoNothing) {
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  r.activate();
  EXPECT_EQ(r.send_batch(std::span<const ping>()), 0u);
  EXPECT_EQ(r.try_send_batch(std::span<const ping>()), 0u);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(r.receive_batch(std::span<kiln::ring_response<pong>>(), 200ms), 0u);
  EXPECT_EQ(r.status().sent, 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  (void)r.terminate();
}

TEST_P(RingBadInputTest, MovedFromRing) {
  kiln::ring<ping, pong> r(dev(), handlers, "echo");
  kiln::ring<ping, pong> taken = std::move(r);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { r.activate(); }, {"ring", "moved-from"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)r.send(make_ping(1, 0, 1)); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)r.try_receive(); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)r.status(); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)r.terminate(); }, {"moved-from"}));
  taken.activate();
  ASSERT_TRUE(taken.send(make_ping(3, 0, 3), 10s).has_value());
  const auto got = taken.receive(10s);
  ASSERT_TRUE(got.has_value());
  expect_echo(*got, 3, 0, 3);
  (void)taken.terminate();
}

}  // namespace
}  // namespace ring_test
