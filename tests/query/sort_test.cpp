// kiln::sort / order_by stages (kiln/query/sort.hpp) on every device, against std::stable_sort:
// every element type both ways, floats with NaN and signed zeros, stages before and after the
// sort (filter, map, take), keys computed by order_by carrying one or several components, and
// stability among equal keys.
#include <algorithm>
#include <cmath>
#include <kiln/query/sort.hpp>

#include "query/query_fixture.hpp"

namespace query_test {
namespace {

using namespace kiln::placeholders;

class SortTest : public QueryTest {};
KILN_INSTANTIATE_QUERY_PER_DEVICE(SortTest);

// The order the stage promises: std::less/greater by value, every NaN last either way.
template <class T>
bool before(T a, T b, bool desc) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) || std::isnan(b)) return !std::isnan(a) && std::isnan(b);
    if (a == b) return std::signbit(a) != std::signbit(b) && (std::signbit(a) != desc);
  }
  return desc ? b < a : a < b;
}
template <class T>
std::vector<T> reference(std::vector<T> v, bool desc) {
  std::stable_sort(v.begin(), v.end(), [&](T a, T b) { return before(a, b, desc); });
  return v;
}
// Bit for bit (signed zeros count), except that NaNs match any NaN: a GPU's arithmetic on a NaN
// gives its canonical NaN, not the input's payload.
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](T x, T y) {
           if constexpr (std::is_floating_point_v<T>)
             if (std::isnan(x) && std::isnan(y)) return true;
           return std::memcmp(&x, &y, sizeof(T)) == 0;
         });
}

TEST_P(SortTest, EveryTypeBothWays) {
  for_each_type(types_ab{}, [&]<class T>() {
    SCOPED_TRACE(name_of<T>());
    for (std::uint64_t n : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{4097}}) {
      const auto v = tie_data<T>(n, n + 3);
      const auto b = upload(dev(), v);
      for (bool desc : {false, true}) {
        const auto got = desc ? b | kiln::sort(kiln::descending) | kiln::to_vector()
                              : b | kiln::sort() | kiln::to_vector();
        EXPECT_TRUE(same_bits(got, reference(v, desc))) << "n " << n << (desc ? " desc" : "");
      }
    }
  });
}

TEST_P(SortTest, FloatsWithNanAndSignedZerosAfterAFilterAndBeforeTake) {
  std::vector<float> v = data<float>(3000, 7);
  for (std::size_t i = 0; i < v.size(); i += 37) v[i] = std::nanf("");
  for (std::size_t i = 5; i < v.size(); i += 41) v[i] = (i % 2) ? -0.f : 0.f;
  v[11] = INFINITY;
  v[12] = -INFINITY;
  const auto b = upload(dev(), v);
  // filter and map fused before the sort; take after it.
  std::vector<float> kept;
  for (float x : v)
    if (!(x < -0.5f)) kept.push_back(x * 2.f);
  for (bool desc : {false, true}) {
    const auto want = reference(kept, desc);
    const auto got = desc ? b | kiln::filter(!(_1 < -0.5f)) | kiln::transform(_1 * 2.f) |
                                kiln::sort(kiln::descending) | kiln::to_vector()
                          : b | kiln::filter(!(_1 < -0.5f)) | kiln::transform(_1 * 2.f) |
                                kiln::sort() | kiln::to_vector();
    EXPECT_TRUE(same_bits(got, want)) << (desc ? "desc" : "asc");
    const auto top = b | kiln::filter(!(_1 < -0.5f)) | kiln::transform(_1 * 2.f) |
                     kiln::sort(kiln::descending) | kiln::take(5) | kiln::to_vector();
    const auto all_desc = reference(kept, true);
    EXPECT_TRUE(same_bits(top, std::vector<float>(all_desc.begin(), all_desc.begin() + 5)));
  }
}

TEST_P(SortTest, OrderByCarriesComponentsStably) {
  const std::uint64_t n = 20011;
  std::vector<std::int32_t> keys(n);
  std::vector<double> vals(n);
  std::vector<std::uint8_t> small(n);
  for (std::uint64_t i = 0; i < n; ++i) {
    keys[i] = static_cast<std::int32_t>((i * 7919) % 97) - 48;  // many equal keys
    vals[i] = double(i) * 0.5;
    small[i] = static_cast<std::uint8_t>(i * 13);
  }
  const auto kb = upload(dev(), keys);
  const auto vb = upload(dev(), vals);
  const auto sb = upload(dev(), small);
  std::vector<std::uint64_t> order(n);
  for (std::uint64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint64_t a, std::uint64_t b) { return keys[a] > keys[b]; });
  // One 8-byte component carried in the sort itself; the key is dropped after it.
  std::vector<double> want_v(n);
  for (std::uint64_t i = 0; i < n; ++i) want_v[i] = vals[order[i]];
  EXPECT_TRUE(elements_equal(
      kiln::zip(kb, vb) | kiln::order_by_descending(_1) | kiln::transform(_2) | kiln::to_vector(),
      want_v));
  // Three components (a permutation, then gathers), a computed key, and the index as a witness
  // of stability: equal keys keep ascending positions.
  std::vector<std::int64_t> want_i(n);
  for (std::uint64_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::uint64_t a, std::uint64_t b) {
    return std::abs(keys[a]) < std::abs(keys[b]);
  });
  for (std::uint64_t i = 0; i < n; ++i) want_i[i] = std::int64_t(order[i]);
  const auto got_i = kiln::zip(kb, vb, sb) | kiln::enumerate() | kiln::order_by(kiln::abs(_2)) |
                     kiln::transform(_1) | kiln::to_vector();
  EXPECT_TRUE(elements_equal(got_i, want_i));
  std::vector<std::uint8_t> want_s(n);
  for (std::uint64_t i = 0; i < n; ++i) want_s[i] = small[order[i]];
  EXPECT_TRUE(elements_equal(
      kiln::zip(kb, sb) | kiln::order_by(kiln::abs(_1)) | kiln::transform(_2) | kiln::to_vector(),
      want_s));
  // A reduction after the sort sees every element once.
  EXPECT_DOUBLE_EQ(kiln::zip(kb, vb) | kiln::order_by(_1) | kiln::transform(_2) | kiln::sum(),
                   ref_fsum(vals));
}

}  // namespace
}  // namespace query_test
