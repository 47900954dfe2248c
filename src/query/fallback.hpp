// Queries under kiln::fallback_scope (include/kiln/fallback.hpp).
#pragma once

#include <functional>

#include "kiln/fallback.hpp"
#include "kiln/query/desc.hpp"

namespace kiln::detail::q {

// Runs run(d); when it fails with an error that moves and d's device has a successor in
// `chain`, runs it again there with d's device inputs copied over, and so on.
void run_falling_back(query_desc& d, const fallback& chain,
                      const std::function<void(query_desc&)>& run);

}  // namespace kiln::detail::q
