#!/bin/bash
# Session 42 on the 2-GPU machine: this session's tests on cpu, cuda:0, cuda:1, opencl:0 and
# opencl:1 (PoCL, opencl:2 there, runs in CI), four test processes at once as `ctest -j 4` would.
build=${1:-build-run}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
X='-*opencl_2*'
F='*StridedLanes*:*ReduceTest*:*ReduceFusion*:*TensorLinalg*:*Indexing*:TensorCodegen.*:*ReducedPrecision*'
t0=$SECONDS
timeout 420 $build/bin/tensor_test --gtest_filter="$F:$X" > "$out/t1.txt" 2>&1 & p1=$!
timeout 420 $build/bin/tensor_test --gtest_filter="*Attention*:*LayerNorm*:*Fusion*:$X" > "$out/t2.txt" 2>&1 & p2=$!
timeout 420 $build/bin/autograd_test --gtest_filter="$X" > "$out/a.txt" 2>&1 & p3=$!
timeout 420 $build/bin/nn_test --gtest_filter="$X" > "$out/n.txt" 2>&1 & p4=$!
wait $p1; r1=$?; wait $p2; r2=$?; wait $p3; r3=$?; wait $p4; r4=$?
summary tensor_test_changed "$out/t1.txt" $r1 $((SECONDS - t0))
summary tensor_test_attention_norm "$out/t2.txt" $r2 $((SECONDS - t0))
summary autograd_test "$out/a.txt" $r3 $((SECONDS - t0))
summary nn_test "$out/n.txt" $r4 $((SECONDS - t0))
grep -h "devices:" "$out/t1.txt" | head -1
for d in cuda_0 cuda_1 opencl_0 opencl_1; do echo "$d: $(cat "$out"/*.txt | grep -c "OK .*/$d ") passed"; done
grep -hE '^\[  FAILED  \]' "$out"/*.txt | head -20
