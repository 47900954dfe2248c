#!/bin/bash
# Session 43's GPU calls (docs/benchmarks.md "Session 43"): the vendor attention path (cuDNN's
# flash attention through the graph API) probed with cuDNN's own log, its tests and the tests
# around it on every GPU device, bench_attention beside torch_attention.py, the GPT step beside
# torch_gpt.py.
# Usage on the GPU machine: bash scripts/gpu_session43.sh [build-run] [parts]
#   parts: any of probe tests attention gpt lnab (default: the first four); lnab: the layer
#   norm rows of bench_tensor with $build/lib_old (the library before the change) and $build/lib
#   alternated, then the LayerNorm tests
build=${1:-build-run}
parts=${2:-probe tests attention gpt}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
X=${EXCLUDE:-'-*opencl_1*:*opencl_2*'}  # PoCL (runs in CI): opencl_1 on 1x, opencl_2 on 2x
for part in $parts; do
  t0=$SECONDS
  case $part in
    probe)  # the vendor tests on cuda:0 with Kiln's debug lines and cuDNN's errors and warnings
      KILN_LOG=debug CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$out/cudnn_log.txt" timeout 300 \
        $build/bin/tensor_test --gtest_filter='*AttentionTest.Vendor*cuda_0*' >"$out/probe.txt" 2>&1
      summary probe "$out/probe.txt" $? $((SECONDS - t0))
      grep -E 'cuda dnn: attention|FAILED|Failure|expected|element' "$out/probe.txt" | sort | uniq -c |
        sort -rn | head -20 | cut -c1-400
      grep -iE 'error|warn' "$out/cudnn_log.txt" 2>/dev/null | cut -c1-300 | sort | uniq -c |
        sort -rn | head -12
      ;;
    tests)
      # tensor_test and nn_test at once (the suite runs its binaries in parallel under ctest)
      timeout 400 $build/bin/tensor_test \
        --gtest_filter="*Attention*:*ConvGraph*:*LayerNorm*:*RmsNorm*:*Pool*:$X" \
        >"$out/tests_tensor.txt" 2>&1 &
      timeout 400 $build/bin/nn_test \
        --gtest_filter="*ttention*:*ransformer*:*Gpt*:*GPT*:*StepGraph*:*Conv*:$X" \
        >"$out/tests_nn.txt" 2>&1 &
      wait
      summary tensor_test "$out/tests_tensor.txt" - $((SECONDS - t0))
      summary nn_test "$out/tests_nn.txt" - $((SECONDS - t0))
      for f in "$out"/tests_tensor.txt "$out"/tests_nn.txt; do
        echo "$f: $(grep -cE '^\[       OK \].*cuda_1' "$f") passed on cuda_1"
      done
      grep -hE '^\[  FAILED  \]' "$out"/tests_*.txt | head -20
      ;;
    attention)
      timeout 240 $build/bin/bench_attention --device cuda:0 --runs 20 >"$out/bench_attention.txt" 2>&1
      timeout 120 python3 bench/torch_attention.py --runs 20 >"$out/torch_attention.txt" 2>&1
      cat "$out/bench_attention.txt" "$out/torch_attention.txt" | grep -vE '^\[ kiln'
      ;;
    lnab)
      for round in 1 2; do
        for lib in lib_old lib; do
          KILN_PLUGIN_PATH=$PWD/$build/$lib LD_LIBRARY_PATH=$PWD/$build/$lib:$LD_LIBRARY_PATH \
            timeout 200 $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile \
            --no-torch --runs 20 --filter 'layer_norm,rms_norm' >"$out/ln_${lib}_$round.txt" 2>&1
          grep -E 'norm' "$out/ln_${lib}_$round.txt" | grep -v '^\[ kiln' | sed "s/^/$lib $round: /" |
            cut -c1-150
        done
      done
      for lib in lib_old lib; do
        KILN_PLUGIN_PATH=$PWD/$build/$lib LD_LIBRARY_PATH=$PWD/$build/$lib:$LD_LIBRARY_PATH \
          timeout 100 $build/bin/bench_gpt --runs 10 --precision bf16 2>&1 | grep step |
          sed "s/^/$lib: /"
      done
      timeout 300 $build/bin/tensor_test --gtest_filter="*LayerNorm*:*RmsNorm*:*Norm*:$X" \
        >"$out/tests_ln.txt" 2>&1
      summary tensor_test_ln "$out/tests_ln.txt" $? $((SECONDS - t0))
      ;;
    gpt)
      timeout 150 $build/bin/bench_gpt --runs 10 2>&1 | grep step
      timeout 150 python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
      ;;
  esac
done
