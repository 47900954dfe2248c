// Bad input at the runtime's entry points (device, buffer, pinned_buffer, queue, event,
// program, kernel) that tests/conformance/errors_test.cpp does not already cover: null and
// moved-from handles, sizes that overflow, empty and unknown names. Each runs on every device.
// docs/testing.md ("Bad input, by entry point") lists what is covered where.
#include "bad_input.hpp"

#include <utility>

#include "conformance/backends.hpp"
#include "kiln/queue_poll.hpp"

namespace conformance {
namespace {

using bad_input::throws;

class BadInputTest : public DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(BadInputTest);

constexpr const char* ints_source = R"(
KILN_KERNEL void ints(KILN_GLOBAL int32_t* y, int32_t v) {
  y[kiln_global_id(0)] = v;
}
KILN_KERNEL void nothing(KILN_GLOBAL int32_t* y) {
})";

// ---- buffer / buffer_view / pinned_buffer ----

TEST_P(BadInputTest, BufferSizeInBytesOverflowing) {
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { kiln::buffer<float> b(dev(), UINT64_MAX); },
                                             {"overflows", std::to_string(UINT64_MAX)}));
  // 2^62 floats is exactly 2^64 bytes: must not wrap to a zero-byte allocation.
  const std::uint64_t wraps = std::uint64_t(1) << 62;
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { kiln::buffer<float> b(dev(), wraps); }, {"overflows"}));
  // The largest size that does not overflow is refused as memory the device lacks.
  EXPECT_TRUE(throws<kiln::out_of_memory>(
      [&] { kiln::buffer<float> b(dev(), UINT64_MAX / sizeof(float)); }, {dev().id()}));
}

TEST_P(BadInputTest, PinnedBufferSizeInBytesOverflowing) {
  // 2^62 floats is 2^64 bytes: wrapped, it would be a zero-byte allocation claiming 2^62
  // elements (writes past its end).
  const std::size_t wraps = std::size_t(1) << 62;
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { kiln::pinned_buffer<float> p(dev(), wraps); },
                                             {"pinned_buffer", "overflows"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { kiln::pinned_buffer<double> p(dev(), SIZE_MAX); }, {"pinned_buffer", "overflows"}));
}

// A request that does not overflow but no host can give: refused, never a hang (the CPU
// backend's size classes looped forever at 2^63 bytes and above).
TEST_P(BadInputTest, PinnedBufferBeyondAnyHost) {
  const std::size_t huge = std::size_t(1) << 63;
  EXPECT_TRUE(throws<kiln::out_of_memory>([&] { kiln::pinned_buffer<std::uint8_t> p(dev(), huge); },
                                          {std::to_string(huge)}));
  EXPECT_TRUE(throws<kiln::out_of_memory>(
      [&] { kiln::pinned_buffer<std::uint8_t> p(dev(), SIZE_MAX - 7); }, {"bytes"}));
}

TEST_P(BadInputTest, EmptyBufferHasNoDevice) {
  kiln::buffer<float> empty;
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)empty.get_device(); }, {"empty", "no device"}));
  kiln::buffer<float> b(dev(), 4);
  kiln::buffer<float> taken = std::move(b);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)b.get_device(); }, {"no device"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::buffer_view<int>().get_device(); },
                                             {"no device"}));
  EXPECT_EQ(taken.get_device(), dev());
}

TEST_P(BadInputTest, EmptyBufferReadsWritesAndSubviews) {
  // Nothing to do is not an error; anything past the (zero) end is.
  kiln::buffer<float> empty;
  std::vector<float> none, one(1, 1.0f);
  EXPECT_NO_THROW(empty.copy_from(none));
  EXPECT_NO_THROW(empty.fill(1.0f));
  EXPECT_TRUE(empty.to_vector().empty());
  EXPECT_NO_THROW((void)empty.subview(0, 0));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { empty.copy_from(one); }, {"copy_from", "sizes differ"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { empty.copy_to(one); }, {"copy_to", "sizes differ"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)empty.subview(0, 1); },
                                             {"subview", "0 elements"}));
  kiln::queue& q = dev().default_queue();
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.copy(one, empty); }, {"queue::copy"}));
  kiln::buffer<float> zero(dev(), 0);
  EXPECT_TRUE(zero.empty());
  EXPECT_NO_THROW(q.copy(zero, empty.view()));
}

TEST_P(BadInputTest, SubviewOffsetsNearTheTop) {
  kiln::buffer<std::int32_t> b(dev(), 8);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)b.subview(UINT64_MAX, 1); }, {"subview"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)b.subview(UINT64_MAX, UINT64_MAX); },
                                             {"subview"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)b.subview(8, 1); }, {"subview"}));
  EXPECT_NO_THROW((void)b.subview(8, 0));
}

TEST_P(BadInputTest, CopiesAndFillsOfAnotherDevicesBuffer) {
  std::optional<kiln::device> other;
  for (const kiln::device& d : kiln::device::all())
    if (!(d == dev())) other.emplace(d);
  if (!other) GTEST_SKIP() << "only " << dev().id() << " here: a foreign buffer needs two devices";
  kiln::buffer<float> theirs(*other, 8);
  theirs.fill(3.0f);
  std::vector<float> host(8, 1.0f);
  kiln::queue& q = dev().default_queue();
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.fill(theirs, 1.0f); },
                                             {"fill", other->id(), dev().id()}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.copy(host, theirs); },
                                             {"copy to device", other->id(), dev().id()}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.copy(theirs, host); },
                                             {"copy to host", other->id(), dev().id()}));
  q.finish();
  EXPECT_TRUE(elements_equal(theirs.to_vector(), std::vector<float>(8, 3.0f)))
      << "a refused copy or fill changed the buffer";
}

// ---- queue / event: null and moved-from handles ----

TEST_P(BadInputTest, MovedFromQueue) {
  kiln::queue q(dev());
  kiln::queue taken = std::move(q);
  kiln::buffer<float> b(dev(), 4);
  std::vector<float> host(4, 1.0f);
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)q.get_device(); }, {"queue", "moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)q.record(); }, {"queue", "moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.finish(); }, {"queue", "moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.wait(taken.record()); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.copy(host, b); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.fill(b, 2.0f); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { kiln::queue(nullptr).finish(); }, {"queue"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::idle(q); }, {"moved-from"}));
  EXPECT_NO_THROW(taken.finish());
}

TEST_P(BadInputTest, NullEvent) {
  kiln::queue& q = dev().default_queue();
  const kiln::event good = q.record();
  const kiln::event null(nullptr);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { null.wait(); }, {"event", "empty"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)null.done(); }, {"event", "empty"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { q.wait(null); }, {"event", "empty"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::elapsed_ms(good, null); },
                                             {"event", "empty"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::elapsed_ms(null, good); },
                                             {"event", "empty"}));
  good.wait();
}

// ---- program / kernel ----

TEST_P(BadInputTest, EmptyAndBlankSource) {
  for (const char* src : {"", "   \n\t\n", "// only a comment\n"})
    EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)kiln::program::compile(dev(), src); },
                                               {"KILN_KERNEL"}))
        << "source: '" << src << "'";
}

TEST_P(BadInputTest, UnknownAndEmptyKernelNames) {
  const kiln::program prog = compile(ints_source);
  EXPECT_TRUE(throws<kiln::not_found>([&] { (void)prog.get_kernel(""); }, {"''", "ints"}));
  EXPECT_TRUE(
      throws<kiln::not_found>([&] { (void)prog.get_kernel("INTS"); }, {"'INTS'", "nothing"}));
  EXPECT_TRUE(throws<kiln::not_found>([&] { (void)prog.get_kernel("ints "); }, {"'ints '"}));
}

TEST_P(BadInputTest, BrokenOptionsAreCompileErrors) {
  // A macro the options define badly breaks the source that uses it: a compile_error with the
  // compiler's log, never a crash or a silently wrong kernel.
  const char* src = R"(
KILN_KERNEL void k(KILN_GLOBAL int32_t* y) {
  y[kiln_global_id(0)] = VALUE;
})";
  EXPECT_THROW((void)kiln::program::compile(dev(), src), kiln::compile_error) << "VALUE undefined";
  EXPECT_THROW((void)kiln::program::compile(dev(), src, "-DVALUE=+"), kiln::compile_error);
}

TEST_P(BadInputTest, MovedFromProgramAndNullKernel) {
  kiln::program prog = compile(ints_source);
  kiln::program taken = std::move(prog);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)prog.get_kernel("ints"); },
                                             {"program", "moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)prog.kernel_names(); }, {"program"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)prog.get_device(); }, {"program"}));
  const kiln::kernel null(nullptr);
  kiln::buffer<std::int32_t> y(dev(), 4);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)null.name(); }, {"kernel", "empty"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)null.params(); }, {"kernel", "empty"}));
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { (void)null.max_work_group_size(); }, {"kernel"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { null.launch(dev().default_queue(), kiln::range(4), y, 1); }, {"kernel", "empty"}));
  kiln::queue q(dev());
  kiln::queue q_taken = std::move(q);
  const kiln::kernel k = taken.get_kernel("ints");
  EXPECT_TRUE(
      throws<kiln::invalid_argument>([&] { k.launch(q, kiln::range(4), y, 1); }, {"moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { k.launch(q, kiln::range(4), kiln::local_size(4), y, 1); }, {"moved-from"}));
}

// A range whose group count overflows (UINT64_MAX items rounded up to whole work-groups) must be
// refused, not wrapped to a launch of no groups.
TEST_P(BadInputTest, LaunchRangeOverflowingTheGroupCount) {
  const kiln::kernel k = compile(ints_source).get_kernel("nothing");
  kiln::buffer<std::int32_t> y(dev(), 1);
  kiln::queue& q = dev().default_queue();
  EXPECT_TRUE(throws<kiln::invalid_argument>(
      [&] { k.launch(q, kiln::range(UINT64_MAX), kiln::local_size(2), y); }, {"range"}));
}

// ---- device: null and moved-from handles ----

TEST_P(BadInputTest, MovedFromDevice) {
  kiln::device d = dev();
  kiln::device taken = std::move(d);
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)d.id(); }, {"device", "moved-from"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { (void)d.default_queue(); }, {"device"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { kiln::queue q(d); }, {"device"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([&] { kiln::buffer<float> b(d, 4); }, {"device"}));
}

TEST(conformance_BadInput, DeviceSpecsWithSpacesCaseAndHugeIndices) {
  for (const char* spec : {" cpu", "cpu ", "CPU", "cpu:0:0"})
    EXPECT_TRUE(throws<kiln::error>([&] { (void)kiln::device::get(spec); }, {spec}))
        << "spec '" << spec << "'";
  EXPECT_TRUE(throws<kiln::invalid_argument>([] { (void)kiln::device::get("cpu:99999999999"); },
                                             {"'cpu:99999999999'", "<backend>:<index>"}));
  EXPECT_TRUE(throws<kiln::not_found>([] { (void)kiln::device::get("cpu:999999"); },
                                      {"'cpu:999999'", "cpu:0"}));
}

TEST(conformance_BadInput, CompileOnlyBadBackendAndArch) {
  EXPECT_TRUE(
      throws<kiln::unsupported>([] { kiln::compile_only("", "sm_90", ints_source); }, {"''"}));
  bool cuda = false;
  for (const kiln::backend_status& b : kiln::backends()) cuda |= b.name == "cuda" && b.loaded;
  if (!cuda) GTEST_SKIP() << "the CUDA backend (NVRTC) is not loaded here";
  EXPECT_TRUE(throws<kiln::invalid_argument>([] { kiln::compile_only("cuda", "", ints_source); },
                                             {"arch"}));
  EXPECT_TRUE(throws<kiln::invalid_argument>([] { kiln::compile_only("cuda", "sm_90", ""); },
                                             {"KILN_KERNEL"}));
}

}  // namespace
}  // namespace conformance
