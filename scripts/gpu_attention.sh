#!/usr/bin/env bash
# Issue 25's fused attention on the GPU machine: its tests (and the 16-bit tests of issue 24
# not yet run on a GPU) on every device, then bench_attention beside torch_attention.py and
# the GPT step with the fused and the composed attention beside torch_gpt.py. Writes each
# part to $OUT (or /tmp) and prints a short table. Run from the repository root with the
# build folder as $1 (default build-run).
set -u
build=${1:-build-run}
out=${OUT:-/tmp}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
t0=$SECONDS
timeout 240 "$build"/bin/tensor_test --gtest_filter='*Attention*:*EveryPattern*' >"$out/tests_tensor.txt" 2>&1
echo "tensor_test attention + 16-bit patterns: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests_tensor.txt" | tr '\n' ' ') ($((SECONDS - t0)) s)"
t0=$SECONDS
timeout 120 "$build"/bin/linalg_test --gtest_filter='*SixteenBit*' >"$out/tests_linalg.txt" 2>&1
echo "linalg_test 16-bit: rc=$? $(grep -E '^\[  (PASSED|FAILED)' "$out/tests_linalg.txt" | tr '\n' ' ') ($((SECONDS - t0)) s)"
grep -E '^\[  FAILED  \]' "$out"/tests_*.txt | head -20
timeout 200 "$build"/bin/bench_attention --device cuda:0 --runs 20 >"$out/bench_attention.txt" 2>&1
python3 bench/torch_attention.py --runs 20 >"$out/torch_attention.txt" 2>&1
cat "$out/bench_attention.txt" "$out/torch_attention.txt" | grep -vE '^\[ kiln'
for path in fused composed; do
  KILN_ATTENTION=$path timeout 120 "$build"/bin/bench_gpt --device cuda:0 --runs 10 2>&1 | grep step | sed "s/^/$path: /"
done
timeout 120 python3 bench/torch_gpt.py --runs 10 2>&1 | tail -3
