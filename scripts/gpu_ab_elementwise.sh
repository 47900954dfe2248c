#!/usr/bin/env bash
# A/B of the generated elementwise and reduction kernels on the GPU machine: bench_tensor's
# elementwise rows (--filter, default the bf16 chain and argmax) with an older libkiln ($2, a
# folder holding libkiln.so.0, found first through LD_LIBRARY_PATH) and the build's own, in
# alternating rounds ($3, default 2). Run from the repository root; build folder $1.
set -u
build=${1:-build-run}
old=${2:-$build/lib-old}
rounds=${3:-2}
filter=${FILTER:-relu,argmax}
. scripts/gpu_env.sh "$build" >/dev/null
base=$PWD/$build/lib:${LD_LIBRARY_PATH:-}
for r in $(seq "$rounds"); do
  for which in old new; do
    lib=$base
    [ "$which" = old ] && lib=$PWD/$old:$base
    LD_LIBRARY_PATH=$lib timeout 150 "$build"/bin/bench_tensor --device cuda:0 --runs 20 \
      --only elementwise --no-compile --no-torch --filter "$filter" 2>&1 |
      grep -E 'GB/s' | grep -v '^ *torch' | sed "s/^/round $r $which: /"
  done
done
