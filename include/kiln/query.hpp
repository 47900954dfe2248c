// kiln::query: lazy, std::ranges-style pipelines over device (or host) data, fused into one
// generated kernel per query and compiled and cached through the runtime (docs/query.md).
//
//   using namespace kiln::placeholders;
//   kiln::device dev = kiln::device::best();
//   kiln::buffer<float> xs = kiln::to_device(dev, host);
//   std::vector<float> ys = xs | kiln::transform(_1 * 2.f) | kiln::filter(_1 > 1000.f)
//                              | kiln::transform(_1 + 100.f) | kiln::to_vector();  // one kernel
//   float s = xs | kiln::transform(kiln::sqrt(_1)) | kiln::sum();
//   std::uint64_t n = kiln::zip(xs, ws) | kiln::filter(_2 != 0) | kiln::count();
//   std::optional<float> m = host | kiln::on(dev) | kiln::max();  // host range in, value out
//   kiln::query_stats st = kiln::last_query_stats();                // launches, bytes moved
//   kiln::pending<float> p = xs | kiln::async(kiln::sum(), q);      // enqueued on q, no wait
//   float later = p.get();                                          // query/async.hpp
#pragma once

#include "kiln/query/async.hpp"
#include "kiln/query/expr.hpp"
#include "kiln/query/group.hpp"
#include "kiln/query/join.hpp"
#include "kiln/query/pipeline.hpp"
#include "kiln/query/sort.hpp"
#include "kiln/query/terminals.hpp"
