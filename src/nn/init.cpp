// Initialisation: values drawn with kiln::tensor::rand / randn (Philox, keyed by the seed),
// scaled, and copied into the tensor in place.
#include "kiln/nn/init.hpp"

#include <atomic>
#include <cmath>

#include "kiln/tensor/inplace.hpp"

namespace kiln::nn {
namespace {
// Process-wide: for threads that never called manual_seed.
std::atomic<std::uint64_t> g_seed{0x5EED};
std::atomic<std::uint64_t> g_drawn{0};
// The calling thread's own sequence, once it called manual_seed.
thread_local bool t_seeded = false;
thread_local std::uint64_t t_seed = 0, t_drawn = 0;
}  // namespace

void manual_seed(std::uint64_t seed) {
  g_seed = seed;
  g_drawn = 0;
  t_seeded = true;
  t_seed = seed;
  t_drawn = 0;
}

std::uint64_t next_seed() {
  // splitmix64 of (seed, draw index): distinct, well-mixed keys for consecutive layers.
  const std::uint64_t seed = t_seeded ? t_seed : g_seed.load();
  const std::uint64_t drawn = t_seeded ? ++t_drawn : ++g_drawn;
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * drawn;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

namespace init {
namespace {

const tensor& checked(const tensor& t, const char* fn) {
  if (!t.defined())
    throw invalid_argument(std::string("kiln::nn::init::") + fn + ": undefined tensor");
  if (t.dtype() != scalar_type::f32 && t.dtype() != scalar_type::f64)
    throw dtype_error(std::string("kiln::nn::init::") + fn + ": expects f32 or f64, got " +
                      type_name(t.dtype()));
  return t;
}

tensor write(const tensor& t, const tensor& v) {
  no_grad off;
  copy_(t, v);
  return t;
}

double fan(const tensor& t, const std::string& mode, const char* fn) {
  const auto [in, out] = fans(t);
  if (mode == "fan_in") return in;
  if (mode == "fan_out") return out;
  throw invalid_argument(std::string("kiln::nn::init::") + fn +
                         ": mode must be \"fan_in\" or \"fan_out\", not \"" + mode + "\"");
}

}  // namespace

std::pair<double, double> fans(const tensor& t) {
  if (t.dim() < 2)
    throw shape_error("kiln::nn::init: fan in and fan out need at least 2 dimensions, got " +
                      to_string(t.shape()));
  double field = 1;
  for (int d = 2; d < t.dim(); ++d) field *= double(t.size(d));
  return {double(t.size(1)) * field, double(t.size(0)) * field};
}

double gain(const std::string& nonlinearity, double a) {
  if (nonlinearity == "linear" || nonlinearity == "conv2d" || nonlinearity == "sigmoid") return 1;
  if (nonlinearity == "tanh") return 5.0 / 3;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") return std::sqrt(2.0 / (1 + a * a));
  if (nonlinearity == "selu") return 0.75;
  throw invalid_argument("kiln::nn::init::gain: unknown nonlinearity \"" + nonlinearity + "\"");
}

tensor uniform_(const tensor& t, double lo, double hi, std::uint64_t seed) {
  checked(t, "uniform_");
  const tensor u = tensor::rand(t.get_device(), t.shape(), seed, t.dtype());
  return write(t, u * (hi - lo) + lo);
}

tensor normal_(const tensor& t, double mean, double std, std::uint64_t seed) {
  checked(t, "normal_");
  const tensor n = tensor::randn(t.get_device(), t.shape(), seed, t.dtype());
  return write(t, n * std + mean);
}

tensor constant_(const tensor& t, double value) {
  checked(t, "constant_");
  no_grad off;
  copy_(t, value);
  return t;
}
tensor zeros_(const tensor& t) { return constant_(t, 0); }
tensor ones_(const tensor& t) { return constant_(t, 1); }

tensor xavier_uniform_(const tensor& t, std::uint64_t seed, double g) {
  const auto [in, out] = fans(checked(t, "xavier_uniform_"));
  const double bound = g * std::sqrt(6.0 / (in + out));
  return uniform_(t, -bound, bound, seed);
}

tensor xavier_normal_(const tensor& t, std::uint64_t seed, double g) {
  const auto [in, out] = fans(checked(t, "xavier_normal_"));
  return normal_(t, 0, g * std::sqrt(2.0 / (in + out)), seed);
}

tensor kaiming_uniform_(const tensor& t, std::uint64_t seed, double a, const std::string& mode,
                        const std::string& nonlinearity) {
  const double f = fan(checked(t, "kaiming_uniform_"), mode, "kaiming_uniform_");
  const double bound = gain(nonlinearity, a) * std::sqrt(3.0 / f);
  return uniform_(t, -bound, bound, seed);
}

tensor kaiming_normal_(const tensor& t, std::uint64_t seed, double a, const std::string& mode,
                       const std::string& nonlinearity) {
  const double f = fan(checked(t, "kaiming_normal_"), mode, "kaiming_normal_");
  return normal_(t, 0, gain(nonlinearity, a) / std::sqrt(f), seed);
}

}  // namespace init
}  // namespace kiln::nn
