#include "ir/hash.hpp"

#include "ir/layout.hpp"

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

void hasher::add_node(const graph& g, const node& n) {
  add(static_cast<std::uint64_t>(n.o) << 8 | static_cast<std::uint64_t>(n.dtype));
  if (info(n.o).cls == op_class::reduce) add(static_cast<std::uint64_t>(n.slot));
  if (info(n.o).cls != op_class::leaf) return;
  add(static_cast<std::uint64_t>(n.slot));
  // A capture's type is structure (the kernel parameter's type); its value is not.
  if (n.o == op::capture) add(static_cast<std::uint64_t>(g.captures[n.slot].type));
  if (n.o == op::load) add_input(g.inputs[static_cast<std::size_t>(n.slot)]);
}

hasher& hasher::add(const graph& g, node_id root) {
  const node& n = g[root];
  add_node(g, n);
  for (int k = 0; k < info(n.o).arity; ++k) add(g, n.operands[k]);
  return *this;
}

hasher& hasher::add_nodes(const graph& g) {
  add(g.nodes.size());
  for (const node& n : g.nodes) {
    add_node(g, n);
    for (int k = 0; k < info(n.o).arity; ++k) add(static_cast<std::uint64_t>(n.operands[k]));
  }
  add(g.roots.size());
  for (node_id r : g.roots) add(static_cast<std::uint64_t>(r));
  return *this;
}

hasher& hasher::add(const layout& l) {
  add(l.rank);
  for (int k = 0; k < l.rank; ++k) add(static_cast<std::uint64_t>(l.strides[k]));
  return *this;
}

hasher& hasher::add_input(const input& in) {
  const bool flat = is_flat(in.l);
  add(static_cast<std::uint64_t>(in.type) << 16 | std::uint64_t{flat} << 8 | in.l.rank);
  if (!flat)
    for (int k = 0; k < in.l.rank; ++k)
      add(static_cast<std::uint64_t>(classify(in.l.dims[k], in.l.strides[k])));
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
