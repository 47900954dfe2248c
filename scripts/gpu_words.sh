#!/usr/bin/env bash
# Session 41's GPU checks (16-bit arrays moved as 16-byte words: elementwise chains and the
# layer/rms norm kernels): run from the repository root on the GPU machine, build folder $1
# (default build-run), then the parts (default all): tests (the tests the change touches, every
# device), norms (bench_tensor's norm and bf16 chain rows, an older libkiln in $build/lib-old
# and the build's own alternated, then PyTorch's same rows), gpt (the GPT step beside
# torch_gpt.py). Not in the default: tests2 (the changed tests, two binaries at once, for the
# 2-GPU machine), norms_new (the norm rows beside PyTorch, the build's libkiln only). Outputs go to $OUT (or /tmp); a short summary is printed.
set -u
build=${1:-build-run}
shift || true
parts=${*:-tests norms gpt}
out=${OUT:-/tmp}
. scripts/gpu_env.sh "$build" >/dev/null
base=$PWD/$build/lib:${LD_LIBRARY_PATH:-}
export LD_LIBRARY_PATH=$base
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1
rows=${ROWS:-'norm,relu(a * b + c) bf16,copy'}
for part in $parts; do
  t0=$SECONDS
  case $part in
    tests)
      timeout 400 "$build"/bin/tensor_test --gtest_filter='*ReducedPrecision*:*LayerNorm*:*Fusion*:*Elementwise*' >"$out/tests_tensor.txt" 2>&1
      summary tensor_test "$out/tests_tensor.txt" $? $((SECONDS - t0))
      t0=$SECONDS
      timeout 200 "$build"/bin/nn_test --gtest_filter='*ayerNorm*:*ransformer*:*Gpt*:*GPT*:*Autocast*' >"$out/tests_nn.txt" 2>&1
      summary nn_test "$out/tests_nn.txt" $? $((SECONDS - t0))
      grep -hE '^\[  FAILED  \]' "$out"/tests_*.txt | head -20
      ;;
    tests2)  # the changed tests, tensor_test and nn_test at once; SKIP: a gtest pattern to leave out
      skip=${SKIP:+-$SKIP}
      timeout 400 "$build"/bin/tensor_test --gtest_filter="*LongChains*:*WordLane*:*LayerNorm*:*FusedChains*:*ReducedPrecision*:*ReduceFusion*:*Statistics*:*RowKernels*$skip" >"$out/tests2_tensor.txt" 2>&1 &
      timeout 400 "$build"/bin/nn_test --gtest_filter="*ayerNorm*:*Gpt*:*GPT*:*Autocast*$skip" >"$out/tests2_nn.txt" 2>&1
      rc_nn=$?
      wait $!
      rc_t=$?
      summary tensor_test "$out/tests2_tensor.txt" $rc_t $((SECONDS - t0))
      summary nn_test "$out/tests2_nn.txt" $rc_nn $((SECONDS - t0))
      grep -hE '^\[  FAILED  \]' "$out"/tests2_*.txt | head -20
      grep -hoE '^\[       OK \] [^ ]*' "$out"/tests2_*.txt | sed 's|.*/||' | sort | uniq -c
      ;;
    norms_new)
      timeout 300 "$build"/bin/bench_tensor --device cuda:0 --runs 20 --only elementwise \
        --no-compile --filter "$rows" >"$out/bench_norms.txt" 2>&1
      grep -E '^\|' "$out/bench_norms.txt" | tail -30
      ;;
    norms)
      for r in 1 2; do
        for which in old new; do
          lib=$base
          [ "$which" = old ] && lib=$PWD/$build/lib-old:$base
          LD_LIBRARY_PATH=$lib timeout 200 "$build"/bin/bench_tensor --device cuda:0 --runs 20 \
            --only elementwise --no-compile --no-torch --filter "$rows" 2>&1 |
            grep -E 'GB/s' | grep -v '^|' | sed "s/^/round $r $which: /"
        done
      done
      timeout 300 "$build"/bin/bench_tensor --device cuda:0 --runs 20 --only elementwise \
        --no-compile --filter "$rows" >"$out/bench_norms.txt" 2>&1
      grep -E '^\|' "$out/bench_norms.txt" | tail -30
      ;;
    gpt)
      for which in old new; do
        lib=$base
        [ "$which" = old ] && lib=$PWD/$build/lib-old:$base
        LD_LIBRARY_PATH=$lib timeout 120 "$build"/bin/bench_gpt --device cuda:0 --runs 10 2>&1 |
          grep step | sed "s/^/$which: /"
      done
      timeout 150 python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
      ;;
  esac
done
