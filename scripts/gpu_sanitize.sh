#!/usr/bin/env bash
# compute-sanitizer over Kiln's conformance, query and ring suites on the CUDA backend:
# memcheck (out-of-bounds and misaligned accesses, invalid frees) and racecheck (shared-memory
# hazards), one log per (tool, binary), then a table. Each run has a time limit, and a run that
# reaches it is reported as such with its partial log. The limits add up to 735 s: two
# 10-minute device slots, ONLY=memcheck then ONLY=racecheck. docs/testing.md, "Sanitizers on
# the GPU".
#
#   cmake -S . -B build-gpu -G Ninja && ninja -C build-gpu       # here, no GPU needed
#   # on the GPU machine, from the repository root, with build-gpu carried along:
#   mkdir -p /work && [ -e /work/main ] || ln -s "$PWD" /work/main
#   scripts/gpu_sanitize.sh "$OUT/sanitize"      # BUILD=other-folder for another build
#   ONLY='memcheck conformance|racecheck query' TIME_SCALE=3 scripts/gpu_sanitize.sh ...
#     (some runs only, each with three times its limit: to spread them over several slots)
#
# Exit status: 0 when every run finished with no sanitizer error and no failed test, 1 when
# a run found errors or failed tests, 2 when the only problem is a run that hit its limit.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build-gpu}
out=${1:-${OUT:-/tmp}/kiln-sanitize}
mkdir -p "$out"

for bin in conformance_test query_test ring_test; do
  [[ -x $BUILD/bin/$bin ]] || { echo "missing $BUILD/bin/$bin: build first (see the top of $0)" >&2; exit 1; }
done
cs=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
[[ -x $cs ]] || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER)" >&2; exit 1; }

# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh "$BUILD" >/dev/null
export KILN_OPENCL_LIBRARY=none  # CUDA only: NVIDIA's OpenCL driver is not what is checked
export KILN_RING_SOAK_SECONDS=${KILN_RING_SOAK_SECONDS:-2}
export KILN_CONFORMANCE_REQUIRE=cuda  # no GPU visible: fail, not skip

# Left out everywhere: the sizes of 2^28 items and 2^31+ elements (minutes under memcheck;
# the plain GPU run covers them). Ring fault injection: its handlers trap and hang on purpose.
big='*LargeAllocationWithKernelOnGpu*:*LaunchOf2To28ItemsOnGpu*:*SizesBeyond32Bits*'
# Faults on purpose: a real trap (in a child process the sanitizer follows: minutes) and filling
# the whole GPU (every failed allocation is an API error by design).
big+=':*ARealTrap*:*FillingTheWholeGpu*'
# Ring tests that exchange few messages: a resident kernel polling mapped memory runs slowly
# under either tool, and the ring's memory use is the same in all of them.
ring_few='*OneMessageRoundTrip*cuda*:*SmallCapacitiesLoseNothing*cuda*:*FullAndEmptyBoundaries*cuda*:*HandlerStatusAndTelemetry*cuda*:*TwoStagePipeline*cuda*:*BadInput*cuda*'
# tool  binary  gtest filter  seconds
runs=(
  "memcheck conformance_test *cuda*-$big 90"
  "memcheck query_test *cuda*-$big 150"
  "memcheck ring_test $ring_few 60"
  "racecheck conformance_test *cuda*-$big 150"
  "racecheck query_test *cuda*-$big:*FuzzTest*:*ConcurrentQueries* 240"
  # Ring kernels stay resident and spin on mapped host memory; under racecheck every poll is
  # instrumented and a round trip takes seconds, so only two tests that exchange few messages
  # (the ring's shared-memory use is the same in all of them).
  "racecheck ring_test *OneMessageRoundTrip*cuda*:*SmallCapacitiesLoseNothing*cuda* 45"
)

"$cs" --version | tail -1
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
status=0
table=()
for run in "${runs[@]}"; do
  read -r tool bin filter seconds <<<"$run"
  [[ "$tool $bin" =~ ${ONLY:-.} ]] || continue
  seconds=$((seconds * ${TIME_SCALE:-1}))
  log=$out/${tool}_${bin%_test}.log
  echo "== $tool $bin ($filter, at most $seconds s) -> $log"
  start=$SECONDS
  # API errors are not reported: Kiln checks every return code itself, and the tests provoke
  # some on purpose (an event queried before it completed, out of memory).
  timeout --signal=INT --kill-after=15 "$seconds" "$cs" --tool "$tool" --leak-check no \
    --report-api-errors no \
    --error-exitcode 99 --target-processes all --print-limit 50 \
    "$BUILD/bin/$bin" --gtest_filter="$filter" >"$log" 2>&1
  rc=$?
  took=$((SECONDS - start))
  # Every process prints its own summary (the cache tests start children): add them up.
  errors=$(grep -oE '(ERROR SUMMARY: [0-9]+|\([0-9]+ errors?)' "$log" | grep -oE '[0-9]+' |
    awk '{s += $1} END {print s + 0}')
  passed=$(grep -oE '^\[  PASSED  \] [0-9]+' "$log" | awk '{s += $4} END {print s + 0}')
  failed=$(grep -E '^\[  FAILED  \] [A-Za-z]' "$log" | awk '{print $4}' | sort -u | wc -l)
  if ((rc == 124 || rc == 137)); then
    verdict="TIME LIMIT (partial)"
    ((status == 0)) && status=2
  elif ((passed == 0 && failed == 0)); then
    verdict="NO TESTS RAN (no GPU? see the log)"
    status=1
  elif ((errors > 0 || failed > 0 || rc != 0)); then
    verdict="FAIL (exit $rc)"
    status=1
  else
    verdict="clean"
  fi
  line=$(printf '%-9s %-16s %6s %6s %6s %5ss  %s' "$tool" "$bin" "$errors" "$passed" "$failed" "$took" "$verdict")
  echo "$line"
  table+=("$line")
done

{
  printf '%-9s %-16s %6s %6s %6s %6s  %s\n' tool binary errors passed failed time verdict
  printf '%s\n' "${table[@]}"
} | tee "$out/summary.txt"
exit $status
