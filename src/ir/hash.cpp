#include "ir/hash.hpp"

#define XXH_INLINE_ALL
#include <xxhash.h>

namespace kiln::ir {

void hasher::flush() {
  if (used_) h_ = XXH3_64bits_withSeed(buf_.data(), used_ * sizeof buf_[0], h_);
  used_ = 0;
}

std::uint64_t hasher::value() const {
  return used_ ? XXH3_64bits_withSeed(buf_.data(), used_ * sizeof buf_[0], h_) : h_;
}

hasher& hasher::add(std::uint64_t v) {
  if (used_ == buf_.size()) flush();
  buf_[used_++] = v;
  return *this;
}

hasher& hasher::add(std::string_view s) {
  add(s.size());
  flush();
  h_ = XXH3_64bits_withSeed(s.data(), s.size(), h_);
  return *this;
}

hasher& hasher::add(const graph& g, node_id root) {
  const node& n = g[root];
  add(static_cast<std::uint64_t>(n.o) << 8 | static_cast<std::uint64_t>(n.dtype));
  if (info(n.o).cls == op_class::leaf) {
    add(static_cast<std::uint64_t>(n.slot));
    // A capture's type is structure (the kernel parameter's type); its value is not.
    if (n.o == op::capture) add(static_cast<std::uint64_t>(g.captures[n.slot].type));
  }
  for (int k = 0; k < info(n.o).arity; ++k) add(g, n.operands[k]);
  return *this;
}

hasher& hasher::add(const layout& l) {
  add(l.rank);
  for (int k = 0; k < l.rank; ++k) add(static_cast<std::uint64_t>(l.strides[k]));
  return *this;
}

std::uint64_t structural_hash(const graph& g, node_id root) {
  return hasher().add(g, root).value();
}

std::uint64_t structural_hash(const graph& g) {
  hasher h;
  h.add(g.roots.size());
  for (node_id r : g.roots) h.add(g, r);
  h.add(g.captures.size());
  for (const capture& c : g.captures) h.add(static_cast<std::uint64_t>(c.type));
  return h.value();
}

}  // namespace kiln::ir
