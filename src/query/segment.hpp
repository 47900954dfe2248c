// One fused kernel's worth of a query: device inputs, the stages it runs per element, and
// what it ends in. run.cpp cuts a query into segments; codegen renders each into a kernel.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kiln/query/desc.hpp"

namespace kiln::detail::q {

enum class segment_end : std::uint8_t {
  collect,  // write every component (map, or compaction after a filter)
  reduce,   // one value
  scan,     // collect with one scan stage inside
};

struct segment_input {
  std::shared_ptr<memory_impl> mem;
  std::uint64_t offset = 0;  // elements
  std::string name;          // the component it defines
  scalar_type type = scalar_type::f32;
};

struct segment {
  std::vector<segment_input> inputs;
  std::uint64_t n = 0;
  std::vector<stage> stages;           // map, filter, enumerate, at most one scan
  std::vector<std::string> out_names;  // components at the end
  std::vector<scalar_type> out_types;
  segment_end end = segment_end::collect;

  bool has_filter() const {
    for (const stage& s : stages)
      if (s.kind == stage_kind::filter) return true;
    return false;
  }
  int scan_index() const {
    for (std::size_t i = 0; i < stages.size(); ++i)
      if (stages[i].kind == stage_kind::scan) return static_cast<int>(i);
    return -1;
  }
};

}  // namespace kiln::detail::q
