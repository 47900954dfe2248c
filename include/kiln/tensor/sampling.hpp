// Selection and sampling: topk and multinomial (being written; docs/indexing.md).
#pragma once

#include "kiln/tensor.hpp"
