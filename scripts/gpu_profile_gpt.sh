#!/bin/bash
# The GPT step's kernels, one by one (issue 25): ncu times every kernel of two bf16 steps of
# bench_gpt (the second is kept by scripts/ncu_summary.py), with Kiln's trace log beside it to
# name the tensor-engine kernels, then bench/torch_gpt.py --profile for PyTorch's kernels.
# Usage on the GPU machine: bash scripts/gpu_profile_gpt.sh [build-run] [bf16|fp32]
build=${1:-build-run}
precision=${2:-bf16}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
ncu --clock-control none --nvtx --metrics gpu__time_duration.sum --csv --page raw \
  --log-file "$out/ncu_$precision.csv" \
  env KILN_LOG=trace "$build/bin/bench_gpt" --precision "$precision" --warmup 1 --runs 1 \
  2> "$out/trace_$precision.log" | tail -3
python3 bench/torch_gpt.py --precision "$precision" --runs 10 --profile > "$out/torch_$precision.txt" 2>&1
head -3 "$out/torch_$precision.txt"
