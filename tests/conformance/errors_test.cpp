// Every bad input gets the right exception type and a message naming the problem.
#include <cxxabi.h>

#include <algorithm>
#include <memory>

#include "conformance/backends.hpp"

namespace conformance {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

template <class E>
std::string type_name_of() {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> name(
      abi::__cxa_demangle(typeid(E).name(), nullptr, nullptr, &status), std::free);
  return status == 0 ? name.get() : typeid(E).name();
}

// Runs f and returns the message of the E it throws; anything else (another type, nothing)
// is a test failure, and the returned text then says what happened instead.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const kiln::error& e) {
    ADD_FAILURE() << "expected " << type_name_of<E>()
                  << ", got kiln::" << kiln::to_string(e.category()) << ": " << e.what();
    return "<wrong exception type>";
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected " << type_name_of<E>() << ", got a non-kiln exception: " << e.what();
    return "<wrong exception type>";
  }
  ADD_FAILURE() << "expected " << type_name_of<E>() << ", nothing was thrown";
  return "<nothing thrown>";
}

class ErrorsTest : public DeviceTest {};
KILN_INSTANTIATE_PER_DEVICE(ErrorsTest);

constexpr const char* launch_source = R"(
KILN_KERNEL void axpy(KILN_GLOBAL float* y, KILN_GLOBAL const float* x, float a) {
  const uint64_t i = kiln_global_id(0);
  y[i] = a * x[i] + y[i];
}
KILN_KERNEL void ints(KILN_GLOBAL int32_t* y, int32_t v) {
  y[kiln_global_id(0)] = v;
})";

TEST_P(ErrorsTest, CopySizeMismatch) {
  kiln::buffer<float> b(dev(), 10), b11(dev(), 11);
  std::vector<float> v9(9, 1.0f), v11(11, 1.0f);
  kiln::queue& q = dev().default_queue();
  EXPECT_THAT(
      message_of<kiln::invalid_argument>([&] { b.copy_from(v9); }),
      AllOf(HasSubstr("copy_from"), HasSubstr("sizes differ"), HasSubstr("9"), HasSubstr("10")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { b.copy_to(v11); }),
              AllOf(HasSubstr("copy_to"), HasSubstr("sizes differ"), HasSubstr("11")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { q.copy(b, b11); }),
              AllOf(HasSubstr("queue::copy"), HasSubstr("sizes differ")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { q.copy(v9, b); }), HasSubstr("queue::copy"));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { q.copy(b, v11); }),
              HasSubstr("queue::copy"));
}

TEST_P(ErrorsTest, SubviewOutOfRange) {
  kiln::buffer<float> b(dev(), 10);
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { (void)b.subview(5, 6); }),
              AllOf(HasSubstr("subview"), HasSubstr("10 elements")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { (void)b.subview(11, 0); }),
              HasSubstr("subview"));
  // offset + count would wrap around: must not pass as a small range.
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { (void)b.subview(2, UINT64_MAX); }),
              HasSubstr("subview"));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { (void)b.subview(2, 5).subview(1, 5); }),
              AllOf(HasSubstr("subview"), HasSubstr("5 elements")));
}

TEST_P(ErrorsTest, WrongArgumentCountAndTypes) {
  const kiln::program prog = compile(launch_source);
  const kiln::kernel axpy = prog.get_kernel("axpy"), ints = prog.get_kernel("ints");
  kiln::buffer<float> y(dev(), 16), x(dev(), 16);
  kiln::buffer<std::int32_t> iy(dev(), 16);
  y.fill(-2.5f);
  x.fill(1.0f);
  kiln::queue& q = dev().default_queue();
  const kiln::range r(16);
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { axpy.launch(q, r, y, x); }),
              AllOf(HasSubstr("axpy"), HasSubstr("takes 3 arguments, 2 were given")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { ints.launch(q, r, y, 1); }),
              AllOf(HasSubstr("argument 1 ('y')"), HasSubstr("int32_t*"), HasSubstr("float")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { axpy.launch(q, r, 1.0f, x, 2.0f); }),
              AllOf(HasSubstr("argument 1 ('y')"), HasSubstr("expected a buffer")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { axpy.launch(q, r, y, x, y); }),
              AllOf(HasSubstr("argument 3 ('a')"), HasSubstr("expected a scalar")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { axpy.launch(q, r, y, x, 2.0); }),
              AllOf(HasSubstr("argument 3 ('a')"), HasSubstr("expected float, got double")));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { axpy.launch(q, r, y, x, 2); }),
              AllOf(HasSubstr("argument 3 ('a')"), HasSubstr("got int32_t")));
  const kiln::buffer_view<const float> ro = y;
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { axpy.launch(q, r, ro, x, 2.0f); }),
              AllOf(HasSubstr("argument 1 ('y')"), HasSubstr("const")));
  // Nothing ran: y is untouched.
  EXPECT_TRUE(elements_equal(y.to_vector(), std::vector<float>(16, -2.5f)));
  EXPECT_NO_THROW(axpy.launch(q, r, y, ro.subview(0, 16), 2.0f))
      << "a const view for a const param is fine";
}

TEST_P(ErrorsTest, MissingKernelNameListsTheKernels) {
  const kiln::program prog = compile(launch_source);
  EXPECT_THAT(message_of<kiln::not_found>([&] { (void)prog.get_kernel("axpby"); }),
              AllOf(HasSubstr("'axpby'"), HasSubstr("axpy, ints")));
}

TEST_P(ErrorsTest, BadLaunchRangesAndLocalSizes) {
  const kiln::kernel k = compile(launch_source).get_kernel("ints");
  kiln::buffer<std::int32_t> y(dev(), 4096);
  kiln::queue& q = dev().default_queue();
  const kiln::device_info& info = dev().info();
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { k.launch(q, kiln::range(0), y, 1); }),
              HasSubstr("dimension 0 is zero"));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { k.launch(q, kiln::range(4, 0), y, 1); }),
              HasSubstr("dimension 1 is zero"));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { k.launch(q, kiln::range(2, 3, 0), y, 1); }),
              HasSubstr("dimension 2 is zero"));
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(16), kiln::local_size(0), y, 1); }),
              AllOf(HasSubstr("work-group size 0"), HasSubstr("dimension 0")));
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(4, 4), kiln::local_size(4, 0), y, 1); }),
              AllOf(HasSubstr("work-group size 0"), HasSubstr("dimension 1")));
  const std::uint64_t too_wide = std::uint64_t(info.max_work_item_sizes[0]) + 1;
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(too_wide), kiln::local_size(too_wide), y, 1); }),
              AllOf(HasSubstr(std::to_string(too_wide)),
                    HasSubstr(std::to_string(info.max_work_item_sizes[0])), HasSubstr(dev().id())));
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(64, 64, 2), kiln::local_size(64, 64, 2), y, 1); }),
              AllOf(HasSubstr("8192"), HasSubstr("limit")));
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(10, 10), kiln::local_size(5), y, 1); }),
              HasSubstr("dimensions"));
}

TEST_P(ErrorsTest, BarrierKernelNeedsRangeMultipleOfLocalSize) {
  const char* src = R"(
KILN_KERNEL void shift(KILN_GLOBAL int32_t* y) {
  KILN_LOCAL int32_t t[256];
  t[kiln_local_id(0)] = (int32_t)kiln_global_id(0);
  kiln_barrier();
  y[kiln_global_id(0)] = t[(kiln_local_id(0) + 1) % kiln_local_size(0)];
})";
  compile_everywhere(src);
  KILN_REQUIRE_FEATURE(dev(), barrier, "the kernel uses kiln_barrier()");
  const kiln::kernel k = compile(src).get_kernel("shift");
  kiln::buffer<std::int32_t> y(dev(), 1024);
  kiln::queue& q = dev().default_queue();
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(1000), kiln::local_size(256), y); }),
              AllOf(HasSubstr("kiln_barrier()"), HasSubstr("1000"), HasSubstr("multiple"),
                    HasSubstr("256")));
  EXPECT_THAT(message_of<kiln::invalid_argument>(
                  [&] { k.launch(q, kiln::range(32, 20), kiln::local_size(16, 16), y); }),
              AllOf(HasSubstr("dimension 1"), HasSubstr("multiple")));
  EXPECT_NO_THROW(k.launch(q, kiln::range(1024), kiln::local_size(256), y));
}

TEST_P(ErrorsTest, ObjectsOfAnotherDevice) {
  std::optional<kiln::device> other;
  for (const kiln::device& d : kiln::device::all())
    if (!(d == dev())) other.emplace(d);
  if (!other)
    GTEST_SKIP() << "only one device (" << dev().id()
                 << ") here: mixing devices needs two, e.g. cpu:0 and cuda:0";
  const kiln::kernel k = compile(launch_source).get_kernel("ints");
  kiln::buffer<std::int32_t> mine(dev(), 8), theirs(*other, 8);
  kiln::queue& q = dev().default_queue();
  kiln::queue& oq = other->default_queue();
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { k.launch(q, kiln::range(8), theirs, 1); }),
              AllOf(HasSubstr("argument 1"), HasSubstr(other->id()), HasSubstr(dev().id())));
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { k.launch(oq, kiln::range(8), mine, 1); }),
              AllOf(HasSubstr("compiled for " + dev().id()), HasSubstr(other->id())));
  // Buffers of two devices copy on a queue of either (peer or staged: tests/collective/).
  theirs.fill(3);
  q.copy(theirs, mine);
  q.finish();
  EXPECT_EQ(mine.to_vector(), std::vector<std::int32_t>(8, 3));
  const kiln::event e = oq.record();
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { q.wait(e); }), HasSubstr(other->id()));
  const kiln::event mine_e = q.record();
  e.wait();
  mine_e.wait();
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { (void)kiln::elapsed_ms(mine_e, e); }),
              HasSubstr("different devices"));
}

TEST_P(ErrorsTest, AllocationLargerThanDeviceMemory) {
  const std::uint64_t mem = dev().info().global_mem_bytes;
  ASSERT_GT(mem, 0u);
  const std::uint64_t n = mem / sizeof(float) + (std::uint64_t(1) << 28);
  EXPECT_THAT(message_of<kiln::out_of_memory>([&] { kiln::buffer<float> b(dev(), n); }),
              AllOf(HasSubstr("cannot allocate"), HasSubstr(std::to_string(n * sizeof(float))),
                    HasSubstr(dev().id())));
}

TEST_P(ErrorsTest, BarrierAndLocalMemoryUnsupportedWithoutTheFeature) {
  const char* barrier_src =
      "\nKILN_KERNEL void b(KILN_GLOBAL float* y) {\n  y[0] = 1.0f;\n  kiln_barrier();\n}\n";
  const char* local_src =
      "\nKILN_KERNEL void l(KILN_GLOBAL float* y) {\n  KILN_LOCAL float t[64];\n  t[0] = 1.0f;\n  "
      "y[0] = t[0];\n}\n";
  compile_everywhere(barrier_src);
  compile_everywhere(local_src);
  if (dev().supports(kiln::feature::barrier))
    GTEST_SKIP() << dev().id() << " supports barriers: nothing to refuse";
  EXPECT_THAT(message_of<kiln::unsupported>([&] { kiln::program::compile(dev(), barrier_src); }),
              AllOf(HasSubstr("kiln_barrier()"), HasSubstr("line 4"), HasSubstr(dev().id())));
  EXPECT_THAT(message_of<kiln::unsupported>([&] { kiln::program::compile(dev(), local_src); }),
              AllOf(HasSubstr("KILN_LOCAL"), HasSubstr("line 3"), HasSubstr(dev().id())));
}

// A compile_error for `source` from the device's backend and, where the CUDA backend is
// loaded, from NVRTC: what() shows the offending line, numbered and marked; log() is non-empty.
void expect_compile_error(const kiln::device& dev, const std::string& source, int line,
                          std::string_view code, std::string_view message) {
  auto check = [&](const char* where, auto compile_fn) {
    SCOPED_TRACE(where);
    try {
      compile_fn();
      ADD_FAILURE() << "compiled without error";
    } catch (const kiln::compile_error& e) {
      EXPECT_TRUE(has_marked_line(e.what(), line, code))
          << "no line '> " << line << " | " << code << "' in:\n"
          << e.what();
      EXPECT_THAT(e.what(), HasSubstr(std::string(message)));
      EXPECT_FALSE(e.log().empty());
      EXPECT_TRUE(has_marked_line(e.excerpt(), line, code)) << e.excerpt();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "expected kiln::compile_error, got: " << e.what();
    }
  };
  check("device", [&] { kiln::program::compile(dev, source); });
  for (const kiln::backend_status& b : kiln::backends())
    if (b.name == "cuda" && b.loaded)
      check("NVRTC", [&] { kiln::compile_only("cuda", cuda_check_arch, source); });
}

TEST_P(ErrorsTest, BrokenSourceGivesCompileErrorWithLine) {
  // The error sits in the last of three kernels, so line numbers must survive rendering.
  const std::string src = std::string(launch_source) + R"(
KILN_KERNEL void broken(KILN_GLOBAL float* y) {
  y[0] = undeclared_name * 2.0f;
})";
  const std::string code = "y[0] = undeclared_name * 2.0f;";
  const int line = 1 + int(std::count(src.begin(), src.begin() + long(src.find(code)), '\n'));
  expect_compile_error(dev(), src, line, code, "undeclared_name");
}

TEST_P(ErrorsTest, MalformedKernelParametersNameTheLine) {
  expect_compile_error(dev(), "\nKILN_KERNEL void k(KILN_GLOBAL float x) {}\n", 2,
                       "KILN_GLOBAL float x", "must be a pointer");
  expect_compile_error(dev(), "\n\nKILN_KERNEL void k(float* p) { p[0] = 1.0f; }\n", 3, "float* p",
                       "KILN_GLOBAL");
  expect_compile_error(dev(),
                       "struct pair { float a, b; };\nKILN_KERNEL void k(struct pair p) {}\n", 2,
                       "struct pair p", "not a scalar type");
  expect_compile_error(dev(), "\nKILN_KERNEL void k(KILN_GLOBAL float** p) {}\n", 2, "float** p",
                       "pointer to pointer");
  expect_compile_error(dev(), "\nKILN_KERNEL int k(KILN_GLOBAL float* p) { return 0; }\n", 2,
                       "KILN_KERNEL int k", "must return void");
  expect_compile_error(dev(),
                       "KILN_KERNEL void k(KILN_GLOBAL float* p) {}\n\nKILN_KERNEL void "
                       "k(KILN_GLOBAL float* q) {}\n",
                       3, "KILN_KERNEL void k(KILN_GLOBAL float* q)", "defined twice");
}

// One parameter per line is a common style: the error must point at the parameter's own line.
TEST_P(ErrorsTest, MalformedParameterOnContinuationLineNamesItsOwnLine) {
  expect_compile_error(dev(),
                       "struct pair { float a, b; };\n"
                       "KILN_KERNEL void k(KILN_GLOBAL float* y,\n"
                       "                   struct pair p) {\n"
                       "}\n",
                       3, "struct pair p", "line 3");
}

TEST_P(ErrorsTest, SourceWithoutKernelIsInvalidArgument) {
  const char* src = "KILN_FUNC float twice(float x) { return 2.0f * x; }\n";
  EXPECT_THAT(message_of<kiln::invalid_argument>([&] { kiln::program::compile(dev(), src); }),
              HasSubstr("KILN_KERNEL"));
  if (cuda_compile_only()) {
    EXPECT_THAT(message_of<kiln::invalid_argument>([&] { compile_everywhere(src); }),
                HasSubstr("KILN_KERNEL"));
  }
}

TEST(conformance_Errors, UnknownDeviceStrings) {
  EXPECT_THAT(message_of<kiln::not_found>([] { (void)kiln::device::get("nope"); }),
              AllOf(HasSubstr("'nope'"), HasSubstr("cpu:0")));  // names the devices there are
  EXPECT_THAT(message_of<kiln::not_found>([] { (void)kiln::device::get("cuda:99"); }),
              HasSubstr("'cuda:99'"));
  EXPECT_THAT(message_of<kiln::not_found>([] { (void)kiln::device::get("cpu:1"); }),
              HasSubstr("'cpu:1'"));
  EXPECT_THAT(message_of<kiln::not_found>([] { (void)kiln::device::get(""); }), HasSubstr("cpu:0"));
  for (const char* bad : {"cpu:x", "cpu:", "cpu:-1", "cuda:0x1"})
    EXPECT_THAT(message_of<kiln::invalid_argument>([&] { (void)kiln::device::get(bad); }),
                AllOf(HasSubstr(std::string("'") + bad + "'"), HasSubstr("<backend>:<index>")));
}

TEST(conformance_Errors, CompileOnlyReportsNvrtcErrors) {
  bool cuda_loaded = false;
  for (const kiln::backend_status& b : kiln::backends())
    cuda_loaded |= b.name == "cuda" && b.loaded;
  EXPECT_THAT(message_of<kiln::unsupported>([] { kiln::compile_only("nope", "x", launch_source); }),
              HasSubstr("'nope'"));
  if (!cuda_loaded) GTEST_SKIP() << "the CUDA backend (NVRTC) is not loaded here";
  EXPECT_THAT(
      message_of<kiln::invalid_argument>([] { kiln::compile_only("cuda", "sm_x", launch_source); }),
      HasSubstr("sm_x"));
  try {
    kiln::compile_only("cuda", cuda_check_arch,
                       "KILN_KERNEL void k(KILN_GLOBAL float* y) {\n  y[0] = nope;\n}\n");
    ADD_FAILURE() << "NVRTC accepted a broken kernel";
  } catch (const kiln::compile_error& e) {
    EXPECT_TRUE(has_marked_line(e.what(), 2, "y[0] = nope;")) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("cuda (sm_90)"));
    EXPECT_FALSE(e.log().empty());
  }
}

// The largest single allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE on OpenCL, often a quarter of
// the memory) is checked before the driver is asked.
TEST_P(ErrorsTest, AllocationBeyondTheLargestSingleAllocation) {
  const std::uint64_t max = dev().info().max_alloc_bytes;
  ASSERT_GT(max, 0u);
  EXPECT_THAT(
      message_of<kiln::out_of_memory>([&] { kiln::buffer<std::uint8_t> b(dev(), max + 1); }),
      AllOf(HasSubstr("largest allocation"), HasSubstr(std::to_string(max)),
            HasSubstr(dev().id())));
}

// A kernel whose local memory exceeds the device's: refused with a message naming the limit
// (at compile time where the compiler knows it, as NVRTC and NVIDIA's OpenCL do; at launch
// otherwise), never a failed launch without a reason.
TEST_P(ErrorsTest, LocalMemoryBeyondTheDeviceLimitIsRefused) {
  const char* src = R"(
KILN_KERNEL void big(KILN_GLOBAL float* y) {
  KILN_LOCAL float t[WORDS];
  t[kiln_local_id(0)] = y[kiln_global_id(0)];
  kiln_barrier();
  y[kiln_global_id(0)] = t[WORDS - 1 - kiln_local_id(0)];
})";
  KILN_REQUIRE_FEATURE(dev(), barrier, "local memory needs barriers");
  const std::uint64_t words = dev().info().local_mem_bytes / sizeof(float) + 1024;
  const std::string opts = "-DWORDS=" + std::to_string(words);
  kiln::buffer<float> y(dev(), 64);
  y.fill(1.0f);
  try {
    // Straight to the device (not through compile_everywhere): its own check is under test.
    kiln::program::compile(dev(), src, opts)
        .get_kernel("big")
        .launch(dev().default_queue(), kiln::range(64), kiln::local_size(64), y);
    dev().synchronize();
    ADD_FAILURE() << "a kernel with " << words * sizeof(float) << " bytes of local memory ran on "
                  << dev().id() << " (" << dev().info().local_mem_bytes << " bytes available)";
  } catch (const kiln::error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.find("local memory") != std::string::npos ||
                m.find("shared data") != std::string::npos ||
                m.find("shared memory") != std::string::npos)
        << m;
    std::cout << "[ kiln     ] " << dev().id() << ": " << m.substr(0, m.find('\n')) << "\n";
  }
}

}  // namespace
}  // namespace conformance
