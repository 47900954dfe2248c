#!/bin/bash
# Session 42's GPU calls (docs/benchmarks.md "Session 42"): the changed tests on cuda:0 and NVIDIA
# OpenCL, the GPT step beside PyTorch, the elementwise/row/norm rows beside PyTorch, one profiled
# bf16 step (scripts/gpu_profile_gpt.sh).
# Usage on the GPU machine: bash scripts/gpu_session42.sh [build-run] [parts]
#   parts: any of tests gpt elementwise profile (default: all four)
#   FILTER: tensor_test's suites (default: those this session changed)
build=${1:-build-run}
parts=${2:-tests gpt elementwise profile}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
X='-*opencl_1*:*opencl_2*'
F=${FILTER:-'*StridedLanes*:*ReducedPrecision*:*ReduceTest*:*ReduceFusion*:*TensorLinalg*:*Attention*:*LayerNorm*:*Fusion*:*Elementwise*:*Indexing*'}
for part in $parts; do
  case $part in
    tests)
      $build/bin/tensor_test --gtest_filter="$F:$X" --gtest_brief=1 2>&1 | tail -3
      $build/bin/autograd_test --gtest_filter="$X" --gtest_brief=1 2>&1 | tail -3
      $build/bin/nn_test --gtest_filter="$X" --gtest_brief=1 2>&1 | tail -3
      ;;
    gpt)
      $build/bin/bench_gpt --runs 10 2>&1 | tail -2
      python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
      ;;
    elementwise)  # bench_tensor runs bench/torch_tensor.py beside itself
      timeout 230 $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile --runs 20 \
        > "$out/bench_tensor.txt" 2>&1
      ;;
    profile)
      bash scripts/gpu_profile_gpt.sh "$build" bf16 >/dev/null 2>&1
      python3 scripts/ncu_summary.py "$out/ncu_bf16.csv" --top 14 2>/dev/null | head -18
      ;;
  esac
done
