// Structural hashes of IR graphs: ops, dtypes, operand structure, leaf slots and capture
// types, never capture values. Equal structure gives equal hashes, so the hash names
// generated kernels and keys their cache (runtime/generated_kernels.hpp).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kiln/ir/node.hpp"

namespace kiln::ir {

// Folds values into one 64-bit hash: words are buffered and hashed 32 at a time (XXH3, seeded
// with the running value), so a key of a few dozen fields costs one or two hash calls (it is
// computed on every query).
class hasher {
 public:
  hasher& add(std::uint64_t v);
  hasher& add(std::string_view s);
  // The subtree at root, in prefix order: each op's arity fixes where its operands end.
  hasher& add(const graph& g, node_id root);
  // Rank and strides: they choose the indexing code. Dims are run-time sizes.
  hasher& add(const layout& l);
  std::uint64_t value() const;

 private:
  void flush();
  std::uint64_t h_ = 0x6b696c6e;  // "kiln"
  std::array<std::uint64_t, 32> buf_{};
  std::size_t used_ = 0;
};

std::uint64_t structural_hash(const graph& g, node_id root);
// Every root, in order, and every capture slot's type.
std::uint64_t structural_hash(const graph& g);

}  // namespace kiln::ir
