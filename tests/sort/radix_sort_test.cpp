// Device radix sort (src/sort/): being written.
#include "conformance/backends.hpp"
