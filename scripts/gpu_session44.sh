#!/bin/bash
# Session 44's GPU calls (docs/benchmarks.md "Session 44"): the tests around the session-43
# review refactor (cuDNN graph plans shared by convolutions and attention), layer norm profiles
# (ncu) and the norm rows of bench_tensor beside PyTorch, A/B runs of libraries.
# Usage on the GPU machine: bash scripts/gpu_session44.sh [build-run] [parts]
#   parts: tests, final (this session's test sets, four processes), lntests, dnn (CudaDnn*),
#   vartests (norm tests with $build/$VARLIB), lnprof / bwdprof (ncu), lnbench (beside
#   PyTorch), lnab (the norm rows for each library in $LIBS, default "lib_old lib", alternated
#   twice), host (bench_tensor_host for each of $HOSTLIBS), gpt (bench_gpt for each of
#   $GPTLIBS, twice over, then torch_gpt.py). Default: tests lnprof lnbench.
#   EXCLUDE: the gtest exclusion of PoCL's device (opencl_1 on a 1x machine, opencl_2 on 2x).
build=${1:-build-run}
parts=${2:-tests lnprof lnbench}
. scripts/gpu_env.sh "$build" >/dev/null
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
out=${OUT:-/tmp}
X=${EXCLUDE:-'-*opencl_1*:*opencl_2*'}  # PoCL (runs in CI): opencl_1 on 1x, opencl_2 on 2x
summary() { echo "$1: $(grep -cE '^\[       OK \]' "$2") passed, $(grep -cE '^\[  FAILED  \].*\(' "$2") failed, $(grep -cE '^\[  SKIPPED \]' "$2") skipped, ${4}s"; }
for part in $parts; do
  t0=$SECONDS
  case $part in
    tests)
      timeout 420 $build/bin/tensor_test \
        --gtest_filter="*Attention*:*ConvGraph*:*Conv*:*LayerNorm*:*RmsNorm*:*Norm*:*Pool*:$X" \
        >"$out/tests_tensor.txt" 2>&1 &
      timeout 420 $build/bin/nn_test \
        --gtest_filter="*ttention*:*ransformer*:*Gpt*:*GPT*:*StepGraph*:*Conv*:*LeNet*:$X" \
        >"$out/tests_nn.txt" 2>&1 &
      wait
      summary tensor_test "$out/tests_tensor.txt" - $((SECONDS - t0))
      summary nn_test "$out/tests_nn.txt" - $((SECONDS - t0))
      grep -hE '^\[  FAILED  \]' "$out"/tests_*.txt | head -20
      grep -hB3 -A12 'Failure' "$out"/tests_*.txt | head -60 | cut -c1-300
      ;;
    lnprof)  # ncu over the norm kernels at [65536, 1024] (f32, bf16), one run each
      timeout 300 ncu --clock-control none --kernel-name regex:kt_ln --launch-count 24 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis \
        $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile --no-torch \
        --runs 1 --warmup 0 --filter '65536' >"$out/ncu_ln.txt" 2>&1
      echo "ncu rc $?"
      grep -E '^  kt_ln|Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit Reg|Grid Size|Warp Cycles Per Issued|Memory Throughput|Shared Memory Configuration Size' \
        "$out/ncu_ln.txt" | cut -c1-110 | head -200
      ;;
    final)  # this session's test sets on every GPU device, four processes at once
      timeout 330 $build/bin/tensor_test \
        --gtest_filter="*Attention*:*ConvGraph*:*LayerNorm*:*RmsNorm*:*Norm*:$X" \
        >"$out/final_tensor.txt" 2>&1 &
      timeout 330 $build/bin/nn_test \
        --gtest_filter="*ttention*:*ransformer*:*Gpt*:*GPT*:*StepGraph*:*orm*:$X" \
        >"$out/final_nn.txt" 2>&1 &
      timeout 330 $build/bin/autograd_test --gtest_filter="*orm*:$X" >"$out/final_ag.txt" 2>&1 &
      timeout 330 $build/bin/cuda_plugin_test --gtest_filter='CudaDnn*' >"$out/final_dnn.txt" 2>&1 &
      wait
      for f in final_tensor final_nn final_ag final_dnn; do
        summary $f "$out/$f.txt" - $((SECONDS - t0))
        echo "  cuda_1: $(grep -cE '^\[       OK \].*cuda_1' "$out/$f.txt"), opencl_1: $(grep -cE '^\[       OK \].*opencl_1' "$out/$f.txt")"
      done
      grep -hE '^\[  FAILED  \]' "$out"/final_*.txt | head -20
      grep -hB3 -A12 'Failure' "$out"/final_*.txt | head -60 | cut -c1-300
      ;;
    lntests)  # the norm tests on every GPU device, and autograd's and nn's around them
      timeout 400 $build/bin/tensor_test --gtest_filter="*LayerNorm*:*RmsNorm*:*Norm*:$X" \
        >"$out/tests_ln.txt" 2>&1 &
      timeout 400 $build/bin/autograd_test --gtest_filter="*orm*:$X" >"$out/tests_ln_ag.txt" 2>&1 &
      timeout 400 $build/bin/nn_test --gtest_filter="*Gpt*:*GPT*:*orm*:*ransformer*:$X" \
        >"$out/tests_ln_nn.txt" 2>&1 &
      wait
      for f in tests_ln tests_ln_ag tests_ln_nn; do summary $f "$out/$f.txt" - $((SECONDS - t0)); done
      grep -hE '^\[  FAILED  \]' "$out"/tests_ln*.txt | head -20
      grep -hB3 -A12 'Failure' "$out"/tests_ln*.txt | head -60 | cut -c1-300
      ;;
    bwdprof)  # ncu over the backward kernels at [65536, 1024] f32 and bf16
      timeout 300 ncu --clock-control none --kernel-name regex:kt_ln --launch-count 40 \
        --section SpeedOfLight --section Occupancy --section LaunchStats \
        $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile --no-torch \
        --runs 1 --warmup 0 --filter 'layer_norm backward [65536' >"$out/ncu_bwd.txt" 2>&1
      python3 - "$out/ncu_bwd.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
b = re.split(r'\n  (kt_ln \([^)]*\)x\([^)]*\))', t)
for i in range(1, len(b), 2):
    def g(k):
        m = re.search(k + r'\s+\S+\s+([\d.,]+)', b[i + 1]); return m.group(1) if m else '-'
    print(b[i].split(',')[0], 'us', g('Duration'), 'dram%', g('DRAM Throughput'), 'regs',
          g('Registers Per Thread'), 'occ', g('Achieved Occupancy'))
PY
      ;;
    lnbench)
      timeout 300 $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile --runs 20 \
        --filter 'norm,copy,softmax' >"$out/lnbench.txt" 2>&1
      grep -vE '^\[ kiln' "$out/lnbench.txt" | cut -c1-160
      ;;
    lnab)  # $build/lib_old against $build/lib (and any other of $LIBS), alternated twice
      for round in 1 2; do
        for lib in ${LIBS:-lib_old lib}; do
          KILN_PLUGIN_PATH=$PWD/$build/$lib LD_LIBRARY_PATH=$PWD/$build/$lib:$LD_LIBRARY_PATH \
            timeout 200 $build/bin/bench_tensor --device cuda:0 --only elementwise --no-compile \
            --no-torch --runs 20 --filter 'norm,copy' >"$out/ln_${lib}_$round.txt" 2>&1
          grep -E 'norm|copy' "$out/ln_${lib}_$round.txt" | grep -v '^\[ kiln' |
            sed "s/^/$lib $round: /" | cut -c1-150
        done
      done
      ;;
    dnn)  # the plugin's dnn table tests (attention refusals among them)
      timeout 300 $build/bin/cuda_plugin_test --gtest_filter='CudaDnn*' >"$out/tests_dnn.txt" 2>&1
      summary cuda_plugin_test_dnn "$out/tests_dnn.txt" - $((SECONDS - t0))
      grep -hE '^\[  FAILED  \]' "$out"/tests_dnn.txt | head
      grep -hB3 -A10 'Failure' "$out"/tests_dnn.txt | head -40 | cut -c1-300
      ;;
    host)  # host cost per call at [4, 1024] (bench_tensor_host), $build/lib_old and $build/lib
      for lib in ${HOSTLIBS:-lib}; do
        KILN_PLUGIN_PATH=$PWD/$build/$lib LD_LIBRARY_PATH=$PWD/$build/$lib:$LD_LIBRARY_PATH \
          timeout 120 $build/bin/bench_tensor_host cuda:0 2>&1 | grep -v '^\[ kiln' | sed "s/^/$lib: /"
      done
      ;;
    vartests)  # the LayerNorm tests with $build/${VARLIB:-lib_var}
      KILN_PLUGIN_PATH=$PWD/$build/${VARLIB:-lib_var} \
        LD_LIBRARY_PATH=$PWD/$build/${VARLIB:-lib_var}:$LD_LIBRARY_PATH \
        timeout 300 $build/bin/tensor_test --gtest_filter="*LayerNorm*:*RmsNorm*:$X" \
        >"$out/tests_var.txt" 2>&1
      summary tests_var "$out/tests_var.txt" - $((SECONDS - t0))
      grep -hE '^\[  FAILED  \]' "$out"/tests_var.txt | head
      ;;
    gpt)
      for lib in ${GPTLIBS:-lib} ${GPTLIBS:-}; do  # twice over, alternated, where given
        for p in bf16 fp32; do
          KILN_PLUGIN_PATH=$PWD/$build/$lib LD_LIBRARY_PATH=$PWD/$build/$lib:$LD_LIBRARY_PATH \
            timeout 150 $build/bin/bench_gpt --runs 10 --precision $p 2>&1 | grep step |
            sed "s/^/$lib: /"
        done
      done
      timeout 150 python3 bench/torch_gpt.py --runs 10 2>&1 | tail -2
      ;;
  esac
  echo "== $part: $((SECONDS - t0)) s"
done
