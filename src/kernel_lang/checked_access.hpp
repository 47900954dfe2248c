// Checked mode (docs/kernel_language.md, "Checked mode"): rewrites each `name[expr]` on a
// pointer parameter inside a KILN_KERNEL body into a call that checks the index against the
// buffer's element count:
//
//   y[i] = x[i];   ->   (*kiln__ck(y, (i), kiln__n0, kiln__err, 0u, 3u)) = (*kiln__ck(x, ...));
//
// kiln__ck (each target's checked prelude) returns the element's address, or, out of range,
// records the first violation (argument, index, line) in the hidden error buffer kiln__err and
// returns a dummy slot inside that buffer. The rewrite adds text only within lines, so every
// line number of the user's source is kept. Not covered: pointer arithmetic (`*(x + i)`),
// accesses in KILN_FUNC helpers or through macros defined outside the kernel, and parameters
// the kernel body assigns to (`x += 4`): those keep their plain accesses.
#pragma once

#include <string>
#include <string_view>

#include "kernel_lang/parser.hpp"

namespace kiln::kernel_lang {

// Words of the hidden error buffer the checked prelude writes: [0] set (first violation wins
// by compare-and-swap), [1] argument index (0-based), [2] the index as uint64, [3] line;
// the dummy slot that out-of-range accesses read and write starts at word 6.
inline constexpr std::size_t check_record_words = 8;

// `source` with checked accesses; `parsed` is parse(source). Parse the result again for its
// offsets: kernel declarations are unchanged, the bodies grow.
std::string rewrite_checked_accesses(std::string_view source, const parsed_source& parsed);

// Name of the hidden element count of parameter i: "kiln__n<i>".
std::string checked_count_name(std::size_t i);

}  // namespace kiln::kernel_lang
