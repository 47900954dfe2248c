#!/bin/bash
# Session 42's second GPU call: the split-gradient change's tests (indexing, autograd, nn) on
# cuda:0 and NVIDIA OpenCL, the GPT step beside PyTorch, the elementwise/row/norm rows beside
# PyTorch, one profiled bf16 step.
build=${1:-build-run}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
X='-*opencl_1*:*opencl_2*'
$build/bin/tensor_test --gtest_filter="*Indexing*:*StridedLanes*:$X" --gtest_brief=1 2>&1 | tail -3
$build/bin/autograd_test --gtest_filter="$X" --gtest_brief=1 2>&1 | tail -3
$build/bin/nn_test --gtest_filter="$X" --gtest_brief=1 2>&1 | tail -3
$build/bin/bench_gpt --runs 10 2>&1 | tail -2
python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
timeout 230 $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile --runs 20 > "$out/bench_tensor.txt" 2>&1
bash scripts/gpu_profile_gpt.sh "$build" bf16 >/dev/null 2>&1
python3 scripts/ncu_summary.py "$out/ncu_bf16.csv" --top 14 2>/dev/null | head -18
