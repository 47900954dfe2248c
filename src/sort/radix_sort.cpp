// Device radix sort (src/sort/radix_sort.hpp): being written.
