// Seeded property test: random chains of transforms (a table of expression shapes with random
// constants), filters (random thresholds), take/skip, enumerate and scans, ended by a random
// terminal, run on the device and by a host reference interpreter (std::views semantics:
// positions after a filter count the survivors).
//
// Each random chain *shape* is run several times with fresh constants, thresholds, counts and
// sizes: constants are kernel parameters, so the repeats reuse one compiled program (and would
// catch a constant baked into a cached kernel), while each shape costs one host-compiler run
// on the CPU device. Three element families keep every step exact: int64 (magnitudes bounded so
// nothing overflows), uint8 (wrapping by conversion, exact by definition), and integer-valued
// float (exact below 2^24; only float sums get a tolerance). Launch counts are checked against
// the spec's promises where it makes one. Failures print the chain, its size and its seed.
// KILN_QUERY_FUZZ_SEED=<n> explores other chains; KILN_QUERY_FUZZ_VERBOSE=1 prints every chain.
#include <array>
#include <functional>
#include <iostream>
#include <numeric>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

enum class kind { map, filter, take, skip, enumerate_map, scan };
enum class term { to_vector, count, sum, min, max, argmin, argmax, any, all, average, reduce };
constexpr int term_count = 11;

struct step {
  kind k;
  int variant;
};
struct shape {
  int family;  // 0: int64, 1: uint8, 2: float
  std::vector<step> steps;
  term t;
};

const char* term_name(term t) {
  static const char* names[] = {"to_vector", "count", "sum", "min",     "max",   "argmin",
                                "argmax",    "any",   "all", "average", "reduce"};
  return names[static_cast<int>(t)];
}

shape random_shape(std::mt19937_64& rng, int family) {
  shape s{family, {}, static_cast<term>(rng() % term_count)};
  const int len = 1 + static_cast<int>(rng() % 5);
  bool scanned = false;
  for (int i = 0; i < len; ++i) {
    const int r = static_cast<int>(rng() % 20);
    kind k = r < 8    ? kind::map
             : r < 13 ? kind::filter
             : r < 15 ? kind::take
             : r < 17 ? kind::skip
             : r < 18 ? kind::enumerate_map
                      : kind::scan;
    if (k == kind::scan && scanned) k = kind::map;  // one scan at most: magnitudes stay bounded
    scanned |= k == kind::scan;
    s.steps.push_back({k, static_cast<int>(rng() % 8)});
  }
  return s;
}

// What the spec promises about kernel launches for a shape (given a non-empty result): an
// exact count, "at least 2" (positions needed after a filter), or nothing.
struct launch_promise {
  enum { exact, at_least_two, none } what = none;
  std::uint64_t count = 0;
};
launch_promise promise(const shape& s, bool gpu) {
  bool filtered = false, scanned = false, positional_after_filter = false, unknown = false;
  for (const step& st : s.steps) {
    const bool positional = st.k == kind::take || st.k == kind::skip ||
                            st.k == kind::enumerate_map || st.k == kind::scan ||
                            (st.k == kind::map && st.variant == 5) ||
                            (st.k == kind::filter && st.variant % 3 == 2);
    positional_after_filter |= filtered && positional;
    unknown |= scanned && st.k != kind::map && st.k != kind::enumerate_map;
    filtered |= st.k == kind::filter;
    scanned |= st.k == kind::scan;
  }
  positional_after_filter |= filtered && (s.t == term::argmin || s.t == term::argmax);
  if (positional_after_filter) return {launch_promise::at_least_two, 2};
  if (unknown || (scanned && s.t != term::to_vector)) return {};
  const bool two_pass = filtered || scanned || s.t != term::to_vector;
  return {launch_promise::exact, gpu || !two_pass ? 1u : 2u};
}

template <class T>
std::string str(T v) {
  return show(v);
}

// Runs one chain on the device and on the host; returns an empty string or what went wrong.
template <class T>
class chain {
 public:
  chain(const kiln::device& dev, std::mt19937_64& rng, std::uint64_t n)
      : dev_(dev), rng_(rng), cur_(initial(n)), buf_(upload(dev, cur_)), q_(kiln::zip(buf_)) {}

  std::string run(const shape& s, const std::string& header) {
    desc_ = header;
    for (const step& st : s.steps) apply(st);
    desc_ += std::string(" | ") + term_name(s.t) + "()";
    return finish(s.t);
  }
  const std::string& desc() const { return desc_; }
  std::uint64_t final_size() const { return cur_.size(); }

 private:
  static constexpr bool is_float = std::is_floating_point_v<T>;
  static constexpr bool is_u8 = std::is_same_v<T, std::uint8_t>;

  std::vector<T> initial(std::uint64_t n) {
    if constexpr (is_float) {
      std::vector<T> v(n);
      for (T& x : v) x = static_cast<T>(static_cast<int>(rng_() % 2001) - 1000);
      return v;
    } else if constexpr (is_u8) {
      return conformance::random_values<T>(n, rng_());
    } else {
      return conformance::random_values<T>(n, rng_(), -1000, 1000);
    }
  }
  std::int64_t uniform(std::int64_t lo, std::int64_t hi) {
    return lo + static_cast<std::int64_t>(rng_() % static_cast<std::uint64_t>(hi - lo + 1));
  }
  // A multiplier: [-3, 3] for int64, any byte for uint8, +-1 or +-2 for float (exact).
  T mult() {
    if constexpr (is_float)
      return static_cast<T>(std::array{-2, -1, 1, 2}[rng_() % 4]);
    else if constexpr (is_u8)
      return static_cast<T>(rng_());
    else
      return static_cast<T>(uniform(-3, 3));
  }
  T addend() { return is_u8 ? static_cast<T>(rng_()) : static_cast<T>(uniform(-100, 100)); }
  T element_or_above() {
    if (cur_.empty() || rng_() % 10 == 0)
      return cur_.empty() ? T(0) : *std::max_element(cur_.begin(), cur_.end());
    return cur_[rng_() % cur_.size()];
  }
  template <class E, class F>
  void map(const E& e, F host, const std::string& text) {
    q_ = std::move(q_) | kiln::transform(kiln::cast<T>(e));
    for (std::size_t i = 0; i < cur_.size(); ++i) cur_[i] = static_cast<T>(host(cur_[i], i));
    desc_ += " | transform(cast<T>(" + text + "))";
  }
  template <class E, class F>
  void keep(const E& e, F host, const std::string& text) {
    q_ = std::move(q_) | kiln::filter(e);
    std::vector<T> out;
    for (std::size_t i = 0; i < cur_.size(); ++i)
      if (host(cur_[i], i)) out.push_back(cur_[i]);
    cur_ = std::move(out);
    desc_ += " | filter(" + text + ")";
  }
  template <class Op>
  void scan(const std::optional<T>& init, Op op, const std::string& text) {
    std::vector<T> out(cur_.size());
    T acc = init.value_or(T(0));
    for (std::size_t i = 0; i < cur_.size(); ++i) {
      if (init) {
        out[i] = acc;
        acc = static_cast<T>(op(acc, cur_[i]));
      } else {
        out[i] = acc = i ? static_cast<T>(op(acc, cur_[i])) : cur_[i];
      }
    }
    cur_ = std::move(out);
    desc_ += " | " + text;
  }

  void apply(const step& st) {
    switch (st.k) {
      case kind::map: return apply_map(st.variant);
      case kind::filter: {
        const int v = st.variant % 3;
        if (v == 0) {
          const T t = element_or_above();
          return keep(
              _1 > t, [&](T x, std::size_t) { return x > t; }, "_1 > " + str(t));
        }
        if (v == 2) {
          const std::int64_t m = uniform(2, 5);
          return keep(
              _i % m != 0, [&](T, std::size_t i) { return std::int64_t(i) % m != 0; },
              "_i % " + str(m) + " != 0");
        }
        if constexpr (is_float) {
          return keep(
              kiln::floor(_1 * 0.5f) * 2.f == _1,
              [](T x, std::size_t) { return std::floor(x * 0.5f) * 2.f == x; },
              "floor(_1 * 0.5f) * 2.f == _1");
        } else {
          const T m = static_cast<T>(uniform(2, 5)), r = static_cast<T>(uniform(0, 1));
          return keep(
              _1 % m != r, [&](T x, std::size_t) { return x % m != r; },
              "_1 % " + str(m) + " != " + str(r));
        }
      }
      case kind::take:
      case kind::skip: {
        const std::uint64_t k = rng_() % (cur_.size() * 6 / 5 + 2), m = std::min(k, cur_.size());
        if (st.k == kind::take) {
          q_ = std::move(q_) | kiln::take(k);
          cur_.resize(m);
        } else {
          q_ = std::move(q_) | kiln::skip(k);
          cur_.erase(cur_.begin(), cur_.begin() + m);
        }
        desc_ += std::string(st.k == kind::take ? " | take(" : " | skip(") + str(k) + ")";
        return;
      }
      case kind::enumerate_map: {
        const T a = is_u8 ? static_cast<T>(uniform(0, 9)) : mult();
        q_ = std::move(q_) | kiln::enumerate() | kiln::transform(kiln::cast<T>(_1 * a + _2));
        for (std::size_t i = 0; i < cur_.size(); ++i)
          cur_[i] = static_cast<T>(std::int64_t(i) * a + cur_[i]);
        desc_ += " | enumerate() | transform(cast<T>(_1 * " + str(a) + " + _2))";
        return;
      }
      case kind::scan: return apply_scan(st.variant % 4);
    }
  }

  void apply_map(int variant) {
    const T a = mult(), b = addend();
    const std::string sa = str(a), sb = str(b);
    switch (variant) {
      case 0:
        return map(
            _1 * a + b, [&](T x, std::size_t) { return x * a + b; }, "_1 * " + sa + " + " + sb);
      case 1:
        return map(
            kiln::select(_1 > a, _1 - b, -_1), [&](T x, std::size_t) { return x > a ? x - b : -x; },
            "select(_1 > " + sa + ", _1 - " + sb + ", -_1)");
      case 2:
        return map(
            kiln::min(_1, b), [&](T x, std::size_t) { return std::min(x, b); },
            "min(_1, " + sb + ")");
      case 3:
        return map(
            kiln::max(_1, b), [&](T x, std::size_t) { return std::max(x, b); },
            "max(_1, " + sb + ")");
      case 5:
        return map(
            _1 + _i * a, [&](T x, std::size_t i) { return x + std::int64_t(i) * a; },
            "_1 + _i * " + sa);
    }
    if constexpr (is_float) {
      const T h = rng_() % 2 ? T(0.5) : T(0.25);
      switch (variant) {
        case 4:
          return map(
              kiln::floor(_1 * h), [&](T x, std::size_t) { return std::floor(x * h); },
              "floor(_1 * " + str(h) + ")");
        case 6:
          return map(
              kiln::abs(_1) - b, [&](T x, std::size_t) { return std::abs(x) - b; },
              "abs(_1) - " + sb);
        default:
          return map(
              kiln::select(_1 < b, b, _1), [&](T x, std::size_t) { return x < b ? b : x; },
              "select(_1 < " + sb + ", " + sb + ", _1)");
      }
    } else {
      const T m = static_cast<T>(uniform(is_u8 ? 1 : 2, 50)), s = static_cast<T>(uniform(0, 3));
      const T bits = static_cast<T>(uniform(0, 255));
      switch (variant) {
        case 4:
          return map(
              _1 % m, [&](T x, std::size_t) { return x % m; }, "_1 % " + str(m));
        case 6:
          return map(
              kiln::abs(_1) ^ bits,
              [&](T x, std::size_t) { return std::abs(std::int64_t(x)) ^ bits; },
              "abs(_1) ^ " + str(bits));
        default:
          return map(
              _1 >> s, [&](T x, std::size_t) { return x >> s; }, "_1 >> " + str(s));
      }
    }
  }

  void apply_scan(int variant) {
    const T init = addend();
    auto mx = [](T x, T y) { return std::max(x, y); };
    auto mn = [](T x, T y) { return std::min(x, y); };
    switch (variant) {
      case 0:
        q_ = std::move(q_) | kiln::inclusive_scan(kiln::max(_1, _2));
        return scan(std::nullopt, mx, "inclusive_scan(max(_1, _2))");
      case 1:
        q_ = std::move(q_) | kiln::exclusive_scan(init, kiln::min(_1, _2));
        return scan(init, mn, "exclusive_scan(" + str(init) + ", min(_1, _2))");
    }
    if constexpr (is_float) {  // float sums would round: min/max only
      q_ = std::move(q_) | kiln::inclusive_scan(kiln::min(_1, _2));
      return scan(std::nullopt, mn, "inclusive_scan(min(_1, _2))");
    } else if constexpr (is_u8) {  // uint8 sums wrap, exactly
      if (variant == 2) {
        q_ = std::move(q_) | kiln::inclusive_scan(_1 + _2);
        return scan(std::nullopt, std::plus<int>(), "inclusive_scan(_1 + _2)");
      }
      q_ = std::move(q_) | kiln::exclusive_scan(init, _1 ^ _2);
      return scan(init, std::bit_xor<int>(), "exclusive_scan(" + str(init) + ", _1 ^ _2)");
    } else {
      if (variant == 2) {
        q_ = std::move(q_) | kiln::inclusive_scan();
        return scan(std::nullopt, std::plus<T>(), "inclusive_scan()");
      }
      q_ = std::move(q_) | kiln::exclusive_scan(init);
      return scan(init, std::plus<T>(), "exclusive_scan(" + str(init) + ")");
    }
  }

  template <class V>
  std::string expect_eq(const V& got, const V& want) {
    if (got == want) return "";
    std::ostringstream s;
    s << "got " << ::testing::PrintToString(got) << ", expected " << ::testing::PrintToString(want);
    return s.str();
  }

  std::string finish(term t) {
    const std::vector<T>& x = cur_;
    auto q = std::move(q_);
    switch (t) {
      case term::to_vector: {
        auto r = elements_equal(std::move(q) | kiln::to_vector(), x);
        return r ? "" : r.message();
      }
      case term::count: return expect_eq(std::move(q) | kiln::count(), std::uint64_t(x.size()));
      case term::sum: {
        const sum_type<T> got = std::move(q) | kiln::sum();
        if constexpr (is_float) {
          const double want = ref_fsum(x), tol = sum_tolerance<T>(x.size(), max_abs_of(x), want);
          if (std::fabs(got - want) <= tol) return "";
          return "got " + str(got) + ", expected " + str(want) + " +- " + str(tol);
        } else {
          return expect_eq(got, ref_sum(x));
        }
      }
      case term::min:
        return expect_eq(
            std::move(q) | kiln::min(),
            x.empty() ? std::nullopt : std::optional<T>(*std::min_element(x.begin(), x.end())));
      case term::max:
        return expect_eq(
            std::move(q) | kiln::max(),
            x.empty() ? std::nullopt : std::optional<T>(*std::max_element(x.begin(), x.end())));
      case term::argmin:  // the first position of the smallest value
        return expect_eq(std::move(q) | kiln::argmin(),
                         x.empty() ? std::nullopt
                                   : std::optional<std::uint64_t>(
                                         std::min_element(x.begin(), x.end()) - x.begin()));
      case term::argmax:
        return expect_eq(std::move(q) | kiln::argmax(),
                         x.empty() ? std::nullopt
                                   : std::optional<std::uint64_t>(
                                         std::max_element(x.begin(), x.end()) - x.begin()));
      case term::any:
        return expect_eq(std::move(q) | kiln::any(),
                         std::any_of(x.begin(), x.end(), [](T v) { return v != T(0); }));
      case term::all:
        return expect_eq(std::move(q) | kiln::all(),
                         std::all_of(x.begin(), x.end(), [](T v) { return v != T(0); }));
      case term::average: {
        const std::optional<double> got = std::move(q) | kiln::average();
        if (x.empty()) return expect_eq(got, std::optional<double>());
        long double s = 0;
        for (T v : x) s += v;
        const double want = double(s / x.size());
        if (got && std::fabs(*got - want) <= 1e-12 * std::max(1.0, max_abs_of(x))) return "";
        return "got " + ::testing::PrintToString(got) + ", expected " + str(want);
      }
      case term::reduce: {
        const T init = addend();
        desc_ += " [reduce init " + str(init) + "]";
        if constexpr (is_float) {
          T want = init;
          for (T v : x) want = std::max(want, v);
          return expect_eq(std::move(q) | kiln::reduce(init, kiln::max(_1, _2)), want);
        } else if constexpr (is_u8) {
          T want = init;
          for (T v : x) want = static_cast<T>(want + v);
          return expect_eq(std::move(q) | kiln::reduce(init, _1 + _2), want);
        } else {
          T want = init;
          for (T v : x) want ^= v;
          return expect_eq(std::move(q) | kiln::reduce(init, _1 ^ _2), want);
        }
      }
    }
    return "unknown terminal";
  }

  kiln::device dev_;
  std::mt19937_64& rng_;
  std::vector<T> cur_;
  kiln::buffer<T> buf_;
  kiln::query<T> q_;
  std::string desc_;
};

class FuzzTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(FuzzTest);

TEST_P(FuzzTest, RandomChainsMatchHostInterpreter) {
  // CPU: 24 shapes x 9 runs; GPUs: 40 shapes x 5 runs, some at a million elements (each shape
  // is one NVRTC compile there).
  const int shapes = is_gpu() ? 40 : 24, runs = is_gpu() ? 5 : 9;
  std::vector<std::uint64_t> sizes = {0, 1, 2, 255, 257, 4097, 20011};
  if (is_gpu()) sizes.push_back(1000003);
  const char* seed_env = std::getenv("KILN_QUERY_FUZZ_SEED");
  const std::uint64_t base_seed = seed_env ? std::strtoull(seed_env, nullptr, 10) : 20260101;
  std::vector<std::string> wrong, launches_off;
  int chains = 0;
  std::mt19937_64 shape_rng(base_seed);
  for (int k = 0; k < shapes; ++k) {
    const shape s = random_shape(shape_rng, k % 3);
    const launch_promise p = promise(s, is_gpu());
    for (int r = 0; r < runs; ++r) {
      const std::uint64_t seed = base_seed + 1000 * k + r;
      std::mt19937_64 rng(seed);
      std::uint64_t n = sizes[rng() % sizes.size()];
      if (s.family == 2) n = std::min<std::uint64_t>(n, 100003);  // float stays below 2^24
      const std::string header = std::string(s.family == 0   ? "int64"
                                             : s.family == 1 ? "uint8"
                                                             : "float") +
                                 " n=" + std::to_string(n) + " seed=" + std::to_string(seed) + ":";
      std::string err, desc;
      std::uint64_t final_size = 0;
      try {
        auto go = [&](auto c) {
          err = c.run(s, header);
          desc = c.desc();
          final_size = c.final_size();
        };
        if (s.family == 0)
          go(chain<std::int64_t>(dev(), rng, n));
        else if (s.family == 1)
          go(chain<std::uint8_t>(dev(), rng, n));
        else
          go(chain<float>(dev(), rng, n));
      } catch (const std::exception& e) {
        err = std::string("threw: ") + e.what();
        desc = header + " (chain #" + std::to_string(k) + ")";
      }
      ++chains;
      if (std::getenv("KILN_QUERY_FUZZ_VERBOSE"))
        std::cout << desc << (err.empty() ? "" : "\n    " + err) << "  [" << stats().kernel_launches
                  << " launches]\n";
      if (!err.empty()) wrong.push_back(desc + "\n    " + err);
      const std::uint64_t got = stats().kernel_launches;
      if (err.empty() && final_size > 0 &&
          ((p.what == launch_promise::exact && got != p.count) ||
           (p.what == launch_promise::at_least_two && got < 2)))
        launches_off.push_back(desc + "\n    " + std::to_string(got) + " launches, promised " +
                               (p.what == launch_promise::exact ? "" : ">= ") +
                               std::to_string(p.count));
    }
  }
  std::cout << "[ kiln     ] " << chains << " chains of " << shapes << " shapes on " << dev().id()
            << ", seed " << base_seed << "\n";
  auto report = [](const std::vector<std::string>& v) {
    std::string s;
    for (std::size_t i = 0; i < v.size() && i < 10; ++i) s += "\n  " + v[i];
    return s + (v.size() > 10 ? "\n  ..." : "");
  };
  EXPECT_TRUE(wrong.empty()) << wrong.size() << " of " << chains
                             << " chains disagree with the host interpreter:" << report(wrong);
  EXPECT_TRUE(launches_off.empty())
      << launches_off.size() << " of " << chains
      << " chains launch a number of kernels the spec rules out:" << report(launches_off);
}

}  // namespace
}  // namespace query_test
