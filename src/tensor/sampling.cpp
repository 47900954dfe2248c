// topk and multinomial (include/kiln/tensor/sampling.hpp): being written.
#include "kiln/tensor/sampling.hpp"
