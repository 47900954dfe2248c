// Kiln: data-parallel C++ on GPUs and CPUs from one code base. Include this for everything.
#pragma once
#include "kiln/buffer.hpp"
#include "kiln/device.hpp"
#include "kiln/error.hpp"
#include "kiln/fallback.hpp"
#include "kiln/kernel.hpp"
#include "kiln/linalg.hpp"
#include "kiln/queue.hpp"
#include "kiln/scalar_type.hpp"
#include "kiln/query.hpp"
#include "kiln/ring.hpp"
#include "kiln/tensor.hpp"
#include "kiln/version.hpp"
