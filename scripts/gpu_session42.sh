#!/bin/bash
# Session 42's GPU call: the changed tests on cuda:0 and NVIDIA OpenCL, the GPT step beside
# PyTorch, then one profiled bf16 step (scripts/gpu_profile_gpt.sh).
build=${1:-build-run}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
F='*StridedLanes*:*ReducedPrecision*:*ReduceTest*:*ReduceFusion*:*TensorLinalg*:*Attention*:*LayerNorm*:*Fusion*:*Elementwise*'
$build/bin/tensor_test --gtest_filter="$F:-*opencl_1*:*opencl_2*" --gtest_brief=1 2>&1 | tail -4
$build/bin/nn_test --gtest_filter="-*opencl_1*:*opencl_2*" --gtest_brief=1 2>&1 | tail -3
$build/bin/bench_gpt --runs 10 2>&1 | tail -2
python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
bash scripts/gpu_profile_gpt.sh "$build" bf16 >/dev/null 2>&1
python3 scripts/ncu_summary.py "$out/ncu_bf16.csv" --top 25 | head -30
