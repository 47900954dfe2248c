// Ring-kernel tests run once per device that can host a ring (cpu:N, cuda:N): named after the
// device ("Ring/RingTest.X/cpu_0"). Messages carry the producer and a per-producer sequence
// number so every test can check, on every message, that none is lost, duplicated or reordered.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <kiln/kiln.hpp>
#include <string>
#include <vector>

struct ping {
  std::uint64_t key;
  float x;
  std::uint32_t producer;
  std::uint32_t seq;
};
KILN_RING_MESSAGE(ping, key, x, producer, seq);

struct pong {
  std::uint64_t key;
  float y;
  std::uint32_t producer;
  std::uint32_t seq;
  std::uint64_t id;  // kiln_ring_message_id as the handler saw it
};
KILN_RING_MESSAGE(pong, key, y, producer, seq, id);

namespace ring_test {

using namespace std::chrono_literals;

// echo: y = 2x + 1. count: also adds 1 to a uint64 counter in the state. flaky: fails odd keys.
inline constexpr const char* handlers = R"(
KILN_FUNC void echo(const ping* in, pong* out, kiln_ring_ctx* ctx) {
  out->key = in->key;
  out->y = 2.0f * in->x + 1.0f;
  out->producer = in->producer;
  out->seq = in->seq;
  out->id = kiln_ring_message_id(ctx);
}
KILN_FUNC void count(const ping* in, pong* out, kiln_ring_ctx* ctx) {
  echo(in, out, ctx);
  kiln_atomic_add((uint64_t*)kiln_ring_state(ctx), (uint64_t)1);
}
KILN_FUNC void flaky(const ping* in, pong* out, kiln_ring_ctx* ctx) {
  echo(in, out, ctx);
  if (in->key % 2 == 1) kiln_ring_fail(ctx, 7);
}
)";

inline std::vector<std::string> ring_devices() {
  std::vector<std::string> ids;
  for (const kiln::device& d : kiln::device::all())
    if (d.backend() == "cpu" || d.backend() == "cuda") ids.push_back(d.id());
  return ids;
}

inline std::string param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == ':') c = '_';
  return s;
}

inline ping make_ping(std::uint64_t key, std::uint32_t producer, std::uint32_t seq) {
  return ping{key, static_cast<float>(key % 1000) * 0.25f, producer, seq};
}

// The response to make_ping(key, ...) through echo, checked field by field.
inline void expect_echo(const kiln::ring_response<pong>& r, std::uint64_t key,
                        std::uint32_t producer, std::uint32_t seq) {
  ASSERT_EQ(r.value.key, key);
  ASSERT_EQ(r.value.y, 2.0f * (static_cast<float>(key % 1000) * 0.25f) + 1.0f);
  ASSERT_EQ(r.value.producer, producer);
  ASSERT_EQ(r.value.seq, seq);
  ASSERT_EQ(r.value.id, r.id);
  ASSERT_EQ(r.status, 0);
}

class RingTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { dev_.emplace(kiln::device::get(GetParam())); }
  const kiln::device& dev() const { return *dev_; }
  bool is_gpu() const { return dev().backend() == "cuda"; }

 private:
  std::optional<kiln::device> dev_;
};

}  // namespace ring_test
