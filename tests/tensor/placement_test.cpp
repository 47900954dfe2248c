// kiln::automatic tensors (docs/placement.md): creation on the host, results against host
// references whatever device runs them, the rule's device under forced thresholds (a GPU's
// half skips without one), per-class overrides and the environment, last_placement's class,
// work and bytes, the thresholds' store in placement.txt (beside the query crossover), and
// bad input: unknown classes, malformed settings, fixed operands on two devices.
#include "tensor/placement.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "query/host_input.hpp"
#include "tensor/tensor_fixture.hpp"

namespace tensor_test {
namespace {

using kiln::op_class;
using kiln::tensor;

// A variable set for one scope, restored after (tests run on one thread).
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* v = std::getenv(name)) old_ = v;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~scoped_env() {
    if (old_)
      ::setenv(name_, old_->c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

class PlacementTest : public ::testing::Test {
 protected:
  void SetUp() override { kiln::reset_placement_thresholds(); }
  void TearDown() override { kiln::reset_placement_thresholds(); }
  static const kiln::device& gpu() { return kiln::detail::automatic_gpu(); }
  static bool have_gpu() { return gpu().impl() != nullptr; }
  static kiln::device cpu() { return kiln::device::host(); }
  // The settings the environment may hold, cleared for the test.
  scoped_env e1{"KILN_PLACE_ELEMENTWISE", nullptr}, e2{"KILN_PLACE_REDUCTION", nullptr},
      e3{"KILN_PLACE_GEMM", nullptr}, e4{"KILN_PLACE_CONV", nullptr};
};

// A device other than the host CPU (a GPU, PoCL's OpenCL CPU device), if any.
std::optional<kiln::device> other_device() {
  for (const kiln::device& d : kiln::device::all())
    if (!(d == kiln::device::host())) return d;
  return std::nullopt;
}

std::vector<float> relu_fma(const host<float>& a, const host<float>& b, const host<float>& c) {
  const host<float> ab = map2<float>(a, b, [](float x, float y) { return x * y; });
  const host<float> r = map2<float>(ab, c, [](float x, float y) { return std::max(x + y, 0.f); });
  return r.v;
}

TEST_F(PlacementTest, CreationIsAutomaticOnTheHost) {
  const std::vector<float> v{1, -2, 3, -4, 5, -6};
  const tensor a = tensor::from(kiln::automatic, v, {2, 3});
  EXPECT_TRUE(a.is_automatic());
  EXPECT_EQ(a.get_device(), cpu());
  EXPECT_EQ(a.to_vector<float>(), v);
  EXPECT_TRUE(tensor::from(kiln::automatic, v).is_automatic());
  EXPECT_EQ(tensor::from(kiln::automatic, std::span<const float>(v)).shape(), (shape_t{6}));
  EXPECT_FALSE(tensor::from(cpu(), v).is_automatic());

  const auto same = [&](const tensor& x, const tensor& ref) {
    EXPECT_TRUE(x.is_automatic());
    EXPECT_EQ(x.get_device(), cpu());
    EXPECT_EQ(x.shape(), ref.shape());
    EXPECT_EQ(x.to_vector<float>(), ref.to_vector<float>());
  };
  same(tensor::zeros(kiln::automatic, {2, 2}), tensor::zeros(cpu(), {2, 2}));
  same(tensor::ones(kiln::automatic, {3}), tensor::ones(cpu(), {3}));
  same(tensor::full(kiln::automatic, {2}, kiln::scalar_type::f32, 2.5),
       tensor::full(cpu(), {2}, kiln::scalar_type::f32, 2.5));
  same(tensor::arange(kiln::automatic, 0, 5), tensor::arange(cpu(), 0, 5));
  same(tensor::linspace(kiln::automatic, 0, 1, 5), tensor::linspace(cpu(), 0, 1, 5));
  same(tensor::rand(kiln::automatic, {4}, 7), tensor::rand(cpu(), {4}, 7));
  same(tensor::randn(kiln::automatic, {4}, 7), tensor::randn(cpu(), {4}, 7));
  EXPECT_TRUE(tensor::empty(kiln::automatic, {3}).is_automatic());

  // to(automatic): a new handle on the same elements; the original stays fixed.
  const tensor f = tensor::from(cpu(), v, {3, 2});
  const tensor fa = f.to(kiln::automatic);
  EXPECT_TRUE(fa.is_automatic());
  EXPECT_FALSE(f.is_automatic());
  EXPECT_EQ(fa.to_vector<float>(), v);
  const tensor lazy = (f * 2.f).to(kiln::automatic);  // evaluated first, where f is
  EXPECT_TRUE(lazy.is_automatic());
  EXPECT_FALSE(lazy.is_lazy());
  // Views and results of automatic tensors are automatic.
  EXPECT_TRUE(a.t().is_automatic());
  EXPECT_TRUE(a.slice(1, 0, 2).is_automatic());
  EXPECT_TRUE((a + 1.f).is_automatic());
  EXPECT_TRUE(a.sum(1).is_automatic());
}

// The same expressions give the host reference's values with the GPU forced, the CPU forced,
// and the defaults.
TEST_F(PlacementTest, ResultsMatchTheHostReferenceWhereverTheyRun) {
  const host<float> ha = random_host<float>({33, 17}, 1), hb = random_host<float>({17}, 2),
                    hc = random_host<float>({33, 1}, 3);
  for (const std::uint64_t t : {std::uint64_t(0), kiln::placement_never, std::uint64_t(1) << 20}) {
    SCOPED_TRACE("threshold " + std::to_string(t));
    for (int c = 0; c < kiln::op_class_count; ++c)
      kiln::set_placement_threshold(static_cast<op_class>(c), t);
    const tensor a = tensor::from(kiln::automatic, ha.v, ha.shape);
    const tensor b = tensor::from(kiln::automatic, hb.v, hb.shape);
    const tensor c = tensor::from(kiln::automatic, hc.v, hc.shape);
    const tensor r = kiln::relu(a * b + c);
    EXPECT_TRUE(r.is_automatic());
    EXPECT_TRUE(matches(r, host<float>{{33, 17}, relu_fma(ha, hb, hc)}));

    // Reductions: a row sum, and softmax (row fusion), over the same (now moved) inputs.
    host<float> sums{{33}, std::vector<float>(33, 0.f)};
    for (int i = 0; i < 33; ++i)
      for (int j = 0; j < 17; ++j) sums.v[i] += ha.v[i * 17 + j];
    EXPECT_TRUE(matches(a.sum(1), sums, 1e-5));
    const std::vector<float> sm = a.softmax(1).to_vector<float>();
    for (int i = 0; i < 33; ++i) {
      float s = 0;
      for (int j = 0; j < 17; ++j) s += sm[i * 17 + j];
      EXPECT_NEAR(s, 1.f, 1e-5) << "row " << i;
    }

    // Products: matmul against a triple loop; gemm into an automatic c; gemv.
    const host<float> hw = random_host<float>({17, 5}, 4);
    const tensor w = tensor::from(kiln::automatic, hw.v, hw.shape);
    host<float> want{{33, 5}, std::vector<float>(33 * 5, 0.f)};
    for (int i = 0; i < 33; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 17; ++k) want.v[i * 5 + j] += ha.v[i * 17 + k] * hw.v[k * 5 + j];
    const tensor m = kiln::matmul(a, w);
    EXPECT_TRUE(m.is_automatic());
    EXPECT_TRUE(matches(m, want, 1e-5));
    const tensor cc = tensor::zeros(kiln::automatic, {33, 5});
    kiln::gemm(a, w, cc);
    EXPECT_TRUE(matches(cc, want, 1e-5));
    const tensor y = tensor::zeros(kiln::automatic, {33});
    kiln::gemv(a, tensor::ones(kiln::automatic, {17}), y);
    EXPECT_TRUE(matches(y, sums, 1e-5));
  }
}

TEST_F(PlacementTest, ForcedThresholdsRunWhereTheRuleSays) {
  if (!have_gpu()) {
    // Without a GPU every automatic operation runs on the host CPU, whatever the threshold.
    kiln::set_placement_threshold(op_class::elementwise, 0);
    const tensor a = tensor::ones(kiln::automatic, {16});
    const tensor r = (a + 1.f).eval();
    EXPECT_EQ(r.get_device(), cpu());
    EXPECT_EQ(kiln::last_placement().dev, cpu());
    EXPECT_NE(kiln::last_placement().reason.find("no GPU"), std::string::npos);
    GTEST_SKIP() << "no GPU device: the GPU half of the rule was not exercised";
  }
  const host<float> ha = random_host<float>({1000}, 5);
  const tensor a = tensor::from(kiln::automatic, ha.v, ha.shape);
  // Threshold 1000: work 1000 with every byte on the host reaches it.
  kiln::set_placement_threshold(op_class::elementwise, 1000);
  const tensor r = (a * 2.f).eval();
  EXPECT_EQ(r.get_device(), gpu());
  EXPECT_EQ(a.get_device(), gpu()) << "the input moved with the work, and stays";
  EXPECT_EQ(kiln::last_placement().bytes_moved, 4000u);
  // 1001: just below.
  const tensor b = tensor::from(kiln::automatic, ha.v, ha.shape);
  kiln::set_placement_threshold(op_class::elementwise, 1001);
  EXPECT_EQ((b * 2.f).eval().get_device(), cpu());
  // Data on the GPU lowers the bar by its share: a (4000 bytes, on the GPU) + b (12000 bytes,
  // host), work 3000: 3000 >= 4000 x 75% picks the GPU, 4001 x 75% does not.
  const host<float> hb = random_host<float>({3, 1000}, 6);
  const tensor b3 = tensor::from(kiln::automatic, hb.v, hb.shape);
  kiln::set_placement_threshold(op_class::elementwise, 4000);
  const tensor s = (a + b3).eval();
  EXPECT_EQ(s.get_device(), gpu());
  EXPECT_EQ(kiln::last_placement().bytes_moved, 12000u);  // b3 only
  EXPECT_EQ(kiln::last_placement().bytes_total, 16000u);
  EXPECT_TRUE(matches(s, map2<float>(ha, hb, [](float x, float y) { return x + y; })));
  const tensor c3 = tensor::from(kiln::automatic, hb.v, hb.shape);
  kiln::set_placement_threshold(op_class::elementwise, 4001);
  EXPECT_EQ((a + c3).eval().get_device(), cpu());
  EXPECT_EQ(a.get_device(), cpu()) << "a moved back to the host";
  // At least half of the bytes on the GPU: the GPU, whatever the threshold (never included).
  const tensor g = (b3 * 3.f).eval();
  ASSERT_EQ(g.get_device(), gpu());
  kiln::set_placement_threshold(op_class::elementwise, kiln::placement_never);
  EXPECT_EQ((g + 1.f).eval().get_device(), gpu());
  EXPECT_EQ(kiln::last_placement().bytes_moved, 0u);
  EXPECT_EQ((g + a).eval().get_device(), gpu());  // 12000 of 16000 bytes there
  EXPECT_EQ(a.get_device(), gpu());
  // never: host-resident inputs stay on the host, however large the work.
  const tensor h = tensor::from(kiln::automatic, hb.v, hb.shape);
  EXPECT_EQ((h * 2.f).eval().get_device(), cpu());
  // Per class: a gemm at 2 m n k = 2 * 8 * 8 * 8 flops.
  const tensor m = tensor::ones(kiln::automatic, {8, 8});
  kiln::set_placement_threshold(op_class::gemm, 1024);
  EXPECT_EQ(kiln::matmul(m, m).get_device(), gpu());
  const tensor m2 = tensor::ones(kiln::automatic, {8, 8});
  kiln::set_placement_threshold(op_class::gemm, 1025);
  EXPECT_EQ(kiln::matmul(m2, m2).get_device(), cpu());
  EXPECT_TRUE(matches(kiln::matmul(m2, m2), host<float>{{8, 8}, std::vector<float>(64, 8.f)}));
}

// docs/placement.md's example: a large product goes to the GPU, and the elementwise work
// after it follows its result there (rule 2), host bias and all, even under "never".
TEST_F(PlacementTest, WorkFollowsDataOnTheGpu) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU device";
  kiln::set_placement_threshold(op_class::gemm, 0);
  kiln::set_placement_threshold(op_class::elementwise, kiln::placement_never);
  const host<float> ha = random_host<float>({64, 48}, 7), hw = random_host<float>({48, 32}, 8);
  const tensor a = tensor::from(kiln::automatic, ha.v, ha.shape);
  const tensor w = tensor::from(kiln::automatic, hw.v, hw.shape);
  const tensor bias = tensor::ones(kiln::automatic, {32});
  const tensor m = kiln::matmul(a, w);
  EXPECT_EQ(m.get_device(), gpu());
  EXPECT_EQ(kiln::last_placement().bytes_moved, (64u * 48 + 48 * 32) * 4);
  const tensor y = kiln::relu(m + bias);
  y.eval();
  EXPECT_EQ(y.get_device(), gpu());
  EXPECT_EQ(kiln::last_placement().cls, op_class::elementwise);
  EXPECT_EQ(kiln::last_placement().bytes_moved, 32u * 4);  // the bias only
  host<float> want{{64, 32}, std::vector<float>(64 * 32, 0.f)};
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 32; ++j) {
      float acc = 0;
      for (int k = 0; k < 48; ++k) acc += ha.v[i * 48 + k] * hw.v[k * 32 + j];
      want.v[i * 32 + j] = std::max(acc + 1.f, 0.f);
    }
  EXPECT_TRUE(matches(y, want, 1e-5));
}

TEST_F(PlacementTest, OverridesPerClassAndReset) {
  const std::uint64_t before[] = {kiln::placement_threshold(op_class::elementwise),
                                  kiln::placement_threshold(op_class::reduction),
                                  kiln::placement_threshold(op_class::gemm),
                                  kiln::placement_threshold(op_class::conv)};
  kiln::set_placement_threshold(op_class::gemm, 123);
  EXPECT_EQ(kiln::placement_threshold(op_class::gemm), 123u);
  EXPECT_EQ(kiln::placement_threshold(op_class::elementwise), before[0]);
  EXPECT_EQ(kiln::placement_threshold(op_class::conv), before[3]);
  kiln::set_placement_threshold(op_class::reduction, kiln::placement_never);
  EXPECT_EQ(kiln::placement_threshold(op_class::reduction), kiln::placement_never);
  kiln::reset_placement_threshold(op_class::gemm);
  EXPECT_EQ(kiln::placement_threshold(op_class::gemm), before[2]);
  EXPECT_EQ(kiln::placement_threshold(op_class::reduction), kiln::placement_never);
  kiln::reset_placement_thresholds();
  EXPECT_EQ(kiln::placement_threshold(op_class::reduction), before[1]);

  // The environment: under an override, over the calibrated value and the default.
  {
    scoped_env e("KILN_PLACE_REDUCTION", "5e3");
    EXPECT_EQ(kiln::placement_threshold(op_class::reduction), 5000u);
    EXPECT_EQ(kiln::detail::resolve_threshold(op_class::reduction, gpu()).source,
              kiln::detail::threshold_source::environment);
    kiln::set_placement_threshold(op_class::reduction, 7);
    EXPECT_EQ(kiln::placement_threshold(op_class::reduction), 7u);
    kiln::reset_placement_threshold(op_class::reduction);
    scoped_env n("KILN_PLACE_GEMM", "never");
    EXPECT_EQ(kiln::placement_threshold(op_class::gemm), kiln::placement_never);
  }
  EXPECT_EQ(kiln::placement_threshold(op_class::reduction), before[1]);
  EXPECT_STREQ(kiln::to_string(op_class::elementwise), "elementwise");
  EXPECT_STREQ(kiln::to_string(op_class::conv), "conv");
}

TEST_F(PlacementTest, LastPlacementReportsClassWorkAndBytes) {
  kiln::set_placement_threshold(op_class::elementwise, kiln::placement_never);
  kiln::set_placement_threshold(op_class::reduction, kiln::placement_never);
  kiln::set_placement_threshold(op_class::gemm, kiln::placement_never);
  const tensor a = tensor::ones(kiln::automatic, {64, 32});
  const tensor b = tensor::ones(kiln::automatic, {32});
  (a + b).eval();
  kiln::placement_info p = kiln::last_placement();
  EXPECT_EQ(p.cls, op_class::elementwise);
  EXPECT_EQ(p.dev, cpu());
  EXPECT_EQ(p.work, 64.0 * 32);
  EXPECT_EQ(p.bytes_total, (64u * 32 + 32) * 4);
  EXPECT_EQ(p.bytes_moved, 0u);
  EXPECT_EQ(p.threshold, have_gpu() ? kiln::placement_never : 0u);
  EXPECT_FALSE(p.reason.empty());

  // A reduction counts the elements it folds; a view counts the span it reads, and one
  // storage read twice counts once.
  (a * 2.f).sum(1).eval();
  p = kiln::last_placement();
  EXPECT_EQ(p.cls, op_class::reduction);
  EXPECT_EQ(p.work, 64.0 * 32);
  (a.slice(0, 0, 10) + a.slice(0, 5, 15)).eval();
  p = kiln::last_placement();
  EXPECT_EQ(p.work, 10.0 * 32);
  EXPECT_EQ(p.bytes_total, 15u * 32 * 4);

  const tensor w = tensor::ones(kiln::automatic, {32, 8});
  (void)kiln::matmul(a, w);
  p = kiln::last_placement();
  EXPECT_EQ(p.cls, op_class::gemm);
  EXPECT_EQ(p.work, 2.0 * 64 * 8 * 32);
  EXPECT_EQ(p.bytes_total, (64u * 32 + 32 * 8) * 4);

  // Fixed tensors alone place nothing: the record stays.
  const tensor f = tensor::ones(cpu(), {4});
  (f + 1.f).eval();
  EXPECT_EQ(kiln::last_placement().cls, op_class::gemm);

  if (have_gpu()) {  // moving to the GPU counts the bytes copied
    kiln::set_placement_threshold(op_class::elementwise, 0);
    const tensor c = tensor::ones(kiln::automatic, {100});
    (c * 2.f).eval();
    EXPECT_EQ(kiln::last_placement().dev, gpu());
    EXPECT_EQ(kiln::last_placement().bytes_moved, 400u);
  }
}

// A fixed operand pins the device: automatic operands move to it, the result is fixed.
TEST_F(PlacementTest, FixedOperandsPinAndMismatchesThrow) {
  const tensor a = tensor::from(kiln::automatic, std::vector<float>{1, 2, 3});
  const tensor f = tensor::from(cpu(), std::vector<float>{10, 20, 30});
  const tensor r = a + f;
  EXPECT_FALSE(r.is_automatic());
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{11, 22, 33}));
  EXPECT_EQ(kiln::last_placement().reason.find("pinned"), 0u) << kiln::last_placement().reason;

  const auto other = other_device();
  if (!other) GTEST_SKIP() << "one device only: no second device to pin to";
  const tensor g = tensor::from(*other, std::vector<float>{1, 1, 1});
  kiln::set_placement_threshold(op_class::elementwise, kiln::placement_never);  // pin wins
  const tensor s = (a * g).eval();
  EXPECT_EQ(s.get_device(), *other);
  EXPECT_FALSE(s.is_automatic());
  EXPECT_EQ(a.get_device(), *other);  // a moved to the pinning device
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{1, 2, 3}));
  const tensor w = tensor::from(kiln::automatic, std::vector<float>{1, 0, 0, 1, 1, 1}, {3, 2});
  const tensor m = kiln::matmul(g.unsqueeze(0), w);
  EXPECT_EQ(m.get_device(), *other);
  EXPECT_EQ(m.to_vector<float>(), (std::vector<float>{2, 2}));

  // Two fixed operands on two devices stay an error, automatic ones between them or not.
  const tensor h = tensor::from(cpu(), std::vector<float>{1, 1, 1});
  const tensor b = tensor::from(kiln::automatic, std::vector<float>{1, 1, 1});
  EXPECT_THROW((void)(g + b + h), kiln::device_mismatch);
  EXPECT_THROW((void)kiln::where(b > 0.f, g, h), kiln::device_mismatch);
  EXPECT_THROW((void)kiln::matmul(g.unsqueeze(0), h.unsqueeze(1)), kiln::device_mismatch);
  EXPECT_THROW((void)kiln::gemm(g.unsqueeze(0), b.unsqueeze(1), h.view({1, 3}).slice(1, 0, 1)),
               kiln::device_mismatch);
}

TEST_F(PlacementTest, BadClassValuesAndSettingsThrow) {
  const auto bad = static_cast<op_class>(7);
  EXPECT_THROW(kiln::set_placement_threshold(bad, 1), kiln::invalid_argument);
  EXPECT_THROW(kiln::reset_placement_threshold(bad), kiln::invalid_argument);
  EXPECT_THROW((void)kiln::placement_threshold(bad), kiln::invalid_argument);
  EXPECT_THROW((void)kiln::to_string(bad), kiln::invalid_argument);
  try {
    (void)kiln::placement_threshold(bad);
  } catch (const kiln::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("op_class value 7"), std::string::npos) << e.what();
  }
  scoped_env e("KILN_PLACE_GEMM", "lots");
  try {
    (void)kiln::placement_threshold(op_class::gemm);
    ADD_FAILURE() << "a malformed KILN_PLACE_GEMM was accepted";
  } catch (const kiln::invalid_argument& x) {
    EXPECT_NE(std::string(x.what()).find("KILN_PLACE_GEMM='lots'"), std::string::npos) << x.what();
  }
  scoped_env neg("KILN_PLACE_CONV", "-5");
  EXPECT_THROW((void)kiln::placement_threshold(op_class::conv), kiln::invalid_argument);
}

// kiln calibrate's store: one named line per class and device beside the query's crossover
// line, replaced (not repeated) by a new measurement, read back as the calibrated threshold.
TEST_F(PlacementTest, StoredThresholdsRoundTrip) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kiln_placement_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  scoped_env cache_dir("KILN_CACHE_DIR", dir.c_str());
  scoped_env cache_on("KILN_CACHE", nullptr);
  const kiln::device d = cpu();  // any device keys the store; kiln calibrate stores GPUs'
  EXPECT_FALSE(kiln::detail::calibrated_threshold(op_class::gemm, d));
  kiln::detail::q::store_crossover(d, 12345);
  kiln::detail::store_threshold(op_class::gemm, d, 777);
  kiln::detail::store_threshold(op_class::elementwise, d, 4096);
  kiln::detail::store_threshold(op_class::gemm, d, 888);  // replaces 777
  kiln::detail::store_threshold(op_class::conv, d, kiln::placement_never);
  EXPECT_EQ(kiln::detail::calibrated_threshold(op_class::gemm, d), 888u);
  EXPECT_EQ(kiln::detail::calibrated_threshold(op_class::elementwise, d), 4096u);
  EXPECT_EQ(kiln::detail::calibrated_threshold(op_class::conv, d), kiln::placement_never);
  EXPECT_FALSE(kiln::detail::calibrated_threshold(op_class::reduction, d));
  EXPECT_EQ(kiln::detail::q::gpu_crossover_bytes(d), 12345u);  // the query's line survives
  EXPECT_EQ(kiln::placement_threshold(op_class::gemm, d), 888u);
  EXPECT_EQ(kiln::detail::resolve_threshold(op_class::gemm, d).source,
            kiln::detail::threshold_source::calibrated);
  EXPECT_EQ(kiln::placement_threshold(op_class::reduction, d),
            kiln::detail::default_threshold(op_class::reduction));
  kiln::set_placement_threshold(op_class::gemm, 5);  // an override beats the measurement
  EXPECT_EQ(kiln::placement_threshold(op_class::gemm, d), 5u);

  // The file: one line per value, the crossover's in its original two-field form.
  std::ifstream in(dir / "placement.txt");
  std::stringstream text;
  text << in.rdbuf();
  const std::string s = text.str();
  int lines = 0, gemm_lines = 0, bare = 0;
  std::istringstream ls(s);
  for (std::string line; std::getline(ls, line); ++lines) {
    std::istringstream f(line);
    std::vector<std::string> w;
    for (std::string x; f >> x;) w.push_back(x);
    if (w.size() == 2) ++bare;
    if (w.size() == 3 && w[1] == "gemm") ++gemm_lines;
  }
  EXPECT_EQ(lines, 4) << s;
  EXPECT_EQ(bare, 1) << s;
  EXPECT_EQ(gemm_lines, 1) << s;
  // A new crossover keeps the tensor lines.
  kiln::detail::q::store_crossover(d, 54321);
  EXPECT_EQ(kiln::detail::q::gpu_crossover_bytes(d), 54321u);
  EXPECT_EQ(kiln::detail::calibrated_threshold(op_class::gemm, d), 888u);
  std::filesystem::remove_all(dir);
}

// Writers of one store at once, as `ctest -j` and concurrent `kiln calibrate` runs are: threads
// of this process and forked processes, each storing lines of its own names. Every line must
// survive, and no temporary may be left (one shared temporary name lost lines and made
// rename() fail with ENOENT).
TEST_F(PlacementTest, ConcurrentWritersKeepEveryLine) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("kiln_placement_race_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  scoped_env cache_dir("KILN_CACHE_DIR", dir.c_str());
  scoped_env cache_on("KILN_CACHE", nullptr);
  const kiln::device d = cpu();
  constexpr int writers = 4, stores = 20;
  // Writer w's i-th line: name "w<w>_<i>", value w * 1000 + i.
  auto name = [](int w, int i) {
    char s[32];
    std::snprintf(s, sizeof s, "w%d_%d", w, i);
    return std::string(s);
  };
  auto write = [&](int w) {  // returns the stores that threw
    int failed = 0;
    for (int i = 0; i < stores; ++i) try {
        kiln::detail::q::store_placement(d, name(w, i), std::uint64_t(w) * 1000 + i);
      } catch (const std::exception&) {
        ++failed;
      }
    return failed;
  };
  std::vector<pid_t> children;
  for (int w = writers; w < 2 * writers; ++w) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0) << "fork failed";
    if (pid == 0) ::_exit(write(w) == 0 ? 0 : 1);  // file work only, no test assertions
    children.push_back(pid);
  }
  std::vector<int> failed(writers, 0);
  {
    std::vector<std::thread> threads;
    for (int w = 0; w < writers; ++w) threads.emplace_back([&, w] { failed[w] = write(w); });
    for (auto& t : threads) t.join();
  }
  for (int w = 0; w < writers; ++w) EXPECT_EQ(failed[w], 0) << "thread " << w << "'s stores threw";
  for (const pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "a child's stores threw";
  }
  int lost = 0;
  for (int w = 0; w < 2 * writers; ++w)
    for (int i = 0; i < stores; ++i)
      lost += kiln::detail::q::stored_placement(d, name(w, i)) !=
              std::optional<std::uint64_t>(std::uint64_t(w) * 1000 + i);
  EXPECT_EQ(lost, 0) << "of " << 2 * writers * stores << " stored lines";
  for (const auto& e : std::filesystem::directory_iterator(dir))
    EXPECT_NE(e.path().extension(), ".tmp") << "left behind: " << e.path();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace tensor_test
