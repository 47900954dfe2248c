#!/usr/bin/env bash
# Session 40's GPU checks (issue 25's fused attention, issue 24's 16-bit paths): run from the
# repository root on the GPU machine, build folder $1 (default build-run), then the parts to
# run (default all): tests (the tests these changes touch, every device), attention
# (bench_attention beside torch_attention.py), elementwise (bench_tensor's bf16 chain, argmax
# and softmax rows beside PyTorch), gpt (the GPT step, both attention paths, beside
# torch_gpt.py). Each part's output goes to $OUT (or /tmp); a short summary is printed.
set -u
build=${1:-build-run}
shift || true
parts=${*:-tests attention elementwise gpt}
out=${OUT:-/tmp}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
for part in $parts; do
  t0=$SECONDS
  case $part in
    tests)
      timeout 300 "$build"/bin/tensor_test --gtest_filter='*Attention*:*EveryPattern*:*LargeOutputsAreEvaluatedWhole*:*TensorLinalgTest*:*NanWins*:*ReduceTest*' >"$out/tests_tensor.txt" 2>&1
      summary tensor_test "$out/tests_tensor.txt" $? $((SECONDS - t0))
      t0=$SECONDS
      timeout 120 "$build"/bin/linalg_test --gtest_filter='*SixteenBit*' >"$out/tests_linalg.txt" 2>&1
      summary linalg_test "$out/tests_linalg.txt" $? $((SECONDS - t0))
      t0=$SECONDS
      timeout 200 "$build"/bin/nn_test --gtest_filter='*ttention*:*ransformer*:*Gpt*:*GPT*' >"$out/tests_nn.txt" 2>&1
      summary nn_test "$out/tests_nn.txt" $? $((SECONDS - t0))
      grep -hE '^\[  FAILED  \]' "$out"/tests_*.txt | head -20
      ;;
    attention)
      timeout 200 "$build"/bin/bench_attention --device cuda:0 --runs 20 >"$out/bench_attention.txt" 2>&1
      python3 bench/torch_attention.py --runs 20 >"$out/torch_attention.txt" 2>&1
      cat "$out/bench_attention.txt" "$out/torch_attention.txt" | grep -vE '^\[ kiln'
      ;;
    elementwise)
      timeout 200 "$build"/bin/bench_tensor --device cuda:0 --runs 20 --only elementwise --no-compile \
        --filter 'relu,argmax,softmax rows [65536' >"$out/bench_elementwise.txt" 2>&1
      grep -vE '^\[ kiln' "$out/bench_elementwise.txt" | tail -25
      ;;
    gpt)
      for path in composed fused; do
        KILN_ATTENTION=$path timeout 120 "$build"/bin/bench_gpt --device cuda:0 --runs 10 2>&1 |
          grep step | sed "s/^/$path: /"
      done
      timeout 150 python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
      ;;
  esac
done
