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
  // Every node in order, operands as node numbers: linear in the size of a DAG whose shared
  // subexpressions the prefix form above would repeat (tensor expressions).
  hasher& add_nodes(const graph& g);
  // Rank and strides: they choose the indexing code. Dims are run-time sizes.
  hasher& add(const layout& l);
  // A load leaf's input: its type, rank, and whether it is flat, else each dimension's stride
  // class (ir/layout.hpp): a new size or general stride value keeps the hash.
  hasher& add_input(const input& in);
  std::uint64_t value() const;

 private:
  void flush();
  void add_node(const graph& g, const node& n);  // op, dtype; a leaf's slot and what it names
  std::uint64_t h_ = 0x6b696c6e;                 // "kiln"
  std::array<std::uint64_t, 32> buf_{};
  std::size_t used_ = 0;
};

std::uint64_t structural_hash(const graph& g, node_id root);
// Every root, in order, and every capture slot's type.
std::uint64_t structural_hash(const graph& g);

}  // namespace kiln::ir
