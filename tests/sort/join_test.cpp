// Filled in by its owner this session.
#include <gtest/gtest.h>
