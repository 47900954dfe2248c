// topk and multinomial per device (being written).
#include "tensor/tensor_fixture.hpp"
