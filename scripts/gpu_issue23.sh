#!/bin/bash
# On the 2-GPU machine (device tool, kind nvidia-h100-x2), from the repository root, with the build
# folder carried along and the MNIST digits in data/mnist:
#   bash scripts/gpu_issue23.sh <build-folder> <step...>
# Steps (issue 23; logs in $OUT, one summary line each):
#   stress    the mixed-work stress test on cuda:0, whole and with subsets of its operations
#   ordering  the randomised queue-ordering test on every device, for $ORDERING_SECONDS each
#   twodev    cuda_two_devices_test without and with the NCCL launch gate
#   hang      kiln train lenet on both GPUs; thread backtraces if it is still running at 45 s
#   tests     the changed GPU paths (loss check, exits, collectives, MPI if present)
#   suite     ctest -j 4 over the whole suite (both GPUs), twice
#   train     one GPU against two, lenet and mlp_wide, plus bench_collective's train rows
#   reduced   (issue 24) the f16/bf16 tests and GEMMs on every device
#   gemm      (issue 24) bench_gemm on cuda:0 beside PyTorch's matmul, f32/TF32/bf16/f16
#   mixed     (issue 24/27) autocast, external-memory and f16/bf16 tests on every device, and
#             kiln train mlp_wide/lenet on cuda:0 at --precision fp32/tf32/bf16/f16
#   changed   $CHANGED (default tensor_test nn_test linalg_test optim_test) whole, every device
#   python    (issue 27) the pytest suite and the tour with torch/CuPy on the GPUs, and a query
#             timed from Python and from C++
#   tests24   (issues 24, 25) this session's tests on every device (oneDNN from build/dnnl)
#   bench24   (issues 24, 25) elementwise/norm, indexing and CPU rows beside PyTorch
#   gpt       (issue 25) the GPT training step beside PyTorch, a PyTorch checkpoint's logits in
#             kiln, and kiln train gpt on cuda:0 (fortunes in data/fortunes)
#   picked    $PICKED: newline-separated "binary [gtest args]" lines, every device, 3 at a time
#   group     (issue 26) group_by / distinct / join on cuda:0 beside PyTorch's formulations
build=${1:-build}
shift
# Logs go to a scratch folder; $OUT (the device tool's) gets the summary and one tarball of them.
final=${OUT:-/tmp/kiln-issue23}
OUT=$(mktemp -d)
mkdir -p "$final"
. scripts/gpu_env.sh "$build" >/dev/null
nccl=$(python3 -c 'import site,glob; print(next(iter(sorted(sum([glob.glob(s+"/nvidia/nccl/lib/libnccl.so*") for s in site.getsitepackages()],[]))),""))' 2>/dev/null)
[ -n "$nccl" ] && export KILN_NCCL_LIBRARY=$nccl
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
B=$build/bin
t0=$(date +%s)
note() { echo "$* at $(($(date +%s) - t0))s" | tee -a "$OUT/summary.txt" "$final/progress.txt"; }
step() {  # step <name> <limit-seconds> <command...>
  local name=$1 limit=$2
  shift 2
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  note "$name rc=$?"
}

for s in "$@"; do
  case $s in
    stress)
      for ops in all 4 34 04 14 24 45 0123; do
        o=$ops; [ "$ops" = all ] && o=
        KILN_STRESS_OPS=$o step "stress_$ops" 120 $B/stress_test \
          --gtest_filter='stress/MixedWorkStressTest.*cuda_0'
        grep -E "differs|expected|wrong|grew|exception" "$OUT/stress_$ops.log" | sort | uniq -c |
          head -5 | tee -a "$OUT/summary.txt"
      done
      ;;
    ordering)
      KILN_ORDERING_SECONDS=${ORDERING_SECONDS:-20} KILN_ORDERING_MAX_N=1048576 \
        KILN_ORDERING_THREADS=16 step ordering 300 $B/stress_test \
        --gtest_filter="stress/QueueOrderingTest.*${ORDERING_DEVICES:-}*"
      grep -E "OK \]|FAILED \]|thread [0-9]+|Which is" "$OUT/ordering.log" | head -20 |
        tee -a "$OUT/summary.txt"
      ;;
    twodev)  # the cuDNN + NCCL hang: without the launch gate (expected to hang) and with it
      KILN_CCL_GATE=0 step twodev_nogate 150 $B/cuda_two_devices_test
      step twodev 150 $B/cuda_two_devices_test
      grep -hE "OK \]|FAILED \]|SKIPPED|hung" "$OUT/twodev_nogate.log" "$OUT/twodev.log" |
        tee -a "$OUT/summary.txt"
      ;;
    hang)
      timeout -k 5 90 $B/kiln train lenet --devices cuda:0,cuda:1 --epochs 1 --data data/mnist \
        > "$OUT/hang.log" 2>&1 &
      pid=$!
      for _ in $(seq 45); do kill -0 $pid 2>/dev/null || break; sleep 1; done
      if kill -0 $pid 2>/dev/null; then
        kpid=$(pgrep -P $pid -f "kiln train" || echo $pid)
        note "hang: still running at 45 s"
        if command -v gdb >/dev/null; then
          gdb -p "$kpid" -batch -ex "thread apply all bt 25" > "$OUT/hang_bt.log" 2>&1
        else
          for t in /proc/$kpid/task/*; do echo "$t $(cat $t/comm) $(cat $t/wchan)"; done \
            > "$OUT/hang_bt.log"
        fi
        kill $pid
      fi
      wait $pid
      note "hang rc=$?"
      tail -4 "$OUT/hang.log" | tee -a "$OUT/summary.txt"
      ;;
    suite)  # every test binary, 4 at a time (ctest -j 4's load; a list discovered without a
      # GPU holds no cuda cases, so the binaries run directly), $SUITE_ROUNDS times. One round
      # does not fit a 600 s device call: SUITE_ONLY / SUITE_EXCLUDE (egrep patterns of binary
      # names) split it, e.g. 'query_test|tensor_test|sort_test' in a call of their own.
      # query_test, tensor_test and sort_test did not finish in 500 s run 3 at a time on the
      # 32-core 2xH200 host: SUITE_SHARDS=N runs the binaries matching SUITE_SHARDED (default
      # those three) as N GoogleTest shards each (GTEST_TOTAL_SHARDS / GTEST_SHARD_INDEX), so
      # a call can take some shards: SUITE_SHARD_ONLY='0 1' (default all).
      export KILN_CONFORMANCE_REQUIRE=cuda,opencl
      shards=${SUITE_SHARDS:-1}
      for round in $(seq ${SUITE_ROUNDS:-1}); do
        ls $B/*_test | grep -v collective_mpi_test | grep -E "${SUITE_ONLY:-.}" |
          grep -vE "${SUITE_EXCLUDE:-^$}" | while read -r bin; do
            if [ "$shards" -gt 1 ] && basename "$bin" |
              grep -qE "^(${SUITE_SHARDED:-query_test|tensor_test|sort_test})$"; then
              for k in ${SUITE_SHARD_ONLY:-$(seq 0 $((shards - 1)))}; do echo "$bin $k $shards"; done
            else
              echo "$bin 0 1"
            fi
          done |
          xargs -P 4 -L 1 sh -c 'n=$(basename $0); [ "$2" -gt 1 ] && n=$n.$1of$2; s=$(date +%s)
            GTEST_SHARD_INDEX=$1 GTEST_TOTAL_SHARDS=$2 timeout -k 5 '"${SUITE_LIMIT:-480}"' $0 \
            --gtest_brief=1 > '"$OUT"'/suite_'"$round"'_$n.log 2>&1; echo "$n rc=$? $(( $(date +%s) - s ))s"' |
          tee -a "$OUT/progress.txt" | sort > "$OUT/suite_$round.txt"
        note "suite round $round: $(grep -vc 'rc=0' "$OUT/suite_$round.txt") of \
$(wc -l < "$OUT/suite_$round.txt") binaries failed"
        grep -v 'rc=0' "$OUT/suite_$round.txt" | tee -a "$OUT/summary.txt"
        grep -h "FAILED \]" "$OUT"/suite_"$round"_*.log | sort -u | head -30 | cut -c1-200 |
          tee -a "$OUT/summary.txt"
      done
      ;;
    train)
      step train_bench 300 $B/bench_collective --only train --model lenet,mlp_wide --batch 256 \
        --steps 100 --warmup 10
      grep -E "^\||speed-up|plain|rank" "$OUT/train_bench.log" | tail -16 | tee -a "$OUT/summary.txt"
      for m in lenet mlp_wide; do
        step "train_${m}_one" 90 $B/kiln train $m --device cuda:0 --batch 256 --epochs 3 --data data/mnist
        step "train_${m}_two" 90 $B/kiln train $m --devices cuda:0,cuda:1 --batch 256 --epochs 3 \
          --data data/mnist
        tail -n 2 "$OUT/train_${m}_one.log" "$OUT/train_${m}_two.log" | tee -a "$OUT/summary.txt"
      done
      ;;
    tests)  # the GPU paths changed for issue 23, on every device
      step nn_loss 200 $B/nn_test --gtest_filter='*Loss*'
      step exits 300 env KILN_EXIT_TEST_CHILDREN=24 $B/runtime_test --gtest_filter='ProcessExit*'
      step collective 200 $B/collective_test
      step cpu_pool 60 $B/cpu_backend_test --gtest_filter='CpuMemory.*'
      for l in nn_loss exits collective cpu_pool; do
        grep -hE "tests? ran|PASSED|FAILED \]" "$OUT/$l.log" | tee -a "$OUT/summary.txt"
      done
      if command -v mpirun >/dev/null; then
        step mpi 200 mpirun -np 2 --allow-run-as-root --bind-to none -x KILN_DEVICE=cuda \
          $B/collective_mpi_test
        grep -hE "PASSED|FAILED \]" "$OUT/mpi.log" | tee -a "$OUT/summary.txt"
      else
        note "mpi: no mpirun on this machine"
      fi
      ;;
    longstress)  # the corruption hunt: longer mixed-work runs on both GPUs
      for d in cuda_0 cuda_1; do
        KILN_STRESS_SECONDS=${STRESS_SECONDS:-20} step "longstress_$d" 200 $B/stress_test \
          --gtest_filter="stress/MixedWorkStressTest.*$d"
        grep -hE "differs|expected|wrong|grew|exception|stress   \]" "$OUT/longstress_$d.log" |
          sort | uniq -c | head -6 | cut -c1-300 | tee -a "$OUT/summary.txt"
      done
      ;;
    reduced)
      export KILN_CONFORMANCE_REQUIRE=cuda,opencl
      step reduced 300 $B/tensor_test --gtest_filter='*Reduced*:*Linalg*:*Promote*'
      step reduced_codegen 200 $B/codegen_test
      for l in reduced reduced_codegen; do
        grep -hE "tests? ran|PASSED|FAILED \]" "$OUT/$l.log" | head -20 | tee -a "$OUT/summary.txt"
      done
      ;;
    mixed)
      export KILN_CONFORMANCE_REQUIRE=cuda,opencl
      step mixed_tensor 300 $B/tensor_test --gtest_filter='*Reduced*:*External*'
      step mixed_nn 300 $B/nn_test --gtest_filter='*MixedPrecision*:*Autocast*'
      step mixed_stress 200 $B/stress_test --gtest_filter='stress/MixedWork*cuda*'
      # Does cuda:0's anonymous memory plateau (a driver high-water mark) or grow with time?
      KILN_STRESS_SECONDS=8 step mixed_stress_long 200 $B/stress_test \
        --gtest_filter='stress/MixedWork*cuda_0'
      for l in mixed_tensor mixed_nn mixed_stress mixed_stress_long; do
        grep -hE "tests? ran|PASSED|FAILED \]|stress   \]" "$OUT/$l.log" | cut -c1-400 | head -12 |
          tee -a "$OUT/summary.txt"
      done
      for m in mlp_wide lenet; do
        for p in fp32 tf32 bf16 f16; do
          step "train_${m}_$p" 120 $B/kiln train $m --device cuda:0 --batch 256 --epochs 3 \
            --precision $p --data data/mnist
          tail -n 2 "$OUT/train_${m}_$p.log" | sed "s/^/$m $p /" | tee -a "$OUT/summary.txt"
        done
      done
      ;;
    changed)  # the binaries whose code changed since the last suite round, whole, 3 at a time
      export KILN_CONFORMANCE_REQUIRE=cuda,opencl
      printf '%s\n' ${CHANGED:-tensor_test nn_test linalg_test optim_test} |
        xargs -P 3 -I{} sh -c 'timeout -k 5 420 '"$B"'/{} --gtest_brief=1 > '"$OUT"'/changed_{}.log 2>&1;
          echo "{} rc=$?"' | sort | tee -a "$OUT/summary.txt"
      grep -h "FAILED \]" "$OUT"/changed_*.log | sort -u | head -20 | tee -a "$OUT/summary.txt"
      ;;
    picked)  # $PICKED: lines of "binary [gtest args]", every device, 3 at a time
      export KILN_CONFORMANCE_REQUIRE=cuda,opencl
      printf '%s\n' "$PICKED" | grep . |
        xargs -P 3 -I{} sh -c 'n=$(echo {} | cut -d" " -f1); timeout -k 5 420 '"$B"'/{} \
          --gtest_brief=1 > '"$OUT"'/picked_$n.log 2>&1; echo "$n rc=$?"' | sort | tee -a "$OUT/summary.txt"
      grep -h "FAILED \]\|tests ran" "$OUT"/picked_*.log | sort -u | head -30 | tee -a "$OUT/summary.txt"
      ;;
    gpt)  # (issue 25) the GPT step beside PyTorch, a PyTorch checkpoint in kiln, kiln train gpt
      step torchgpt 300 python3 bench/torch_gpt.py --runs 20 ${GPT_COMPILE:+--compile}
      step kilngpt 300 $B/bench_gpt --device cuda:0 --runs 20
      mkdir -p "$OUT/ck"
      step torchsave 120 python3 bench/torch_gpt.py --save "$OUT/ck"
      step gptcheck 120 $B/bench_gpt --device cuda:0 --check "$OUT/ck"
      step traingpt 300 $B/kiln train gpt --device cuda:0 --steps ${GPT_STEPS:-600} \
        --eval-every 200 --data data/fortunes
      grep -h "gpt step\|checkpoint from\|^step \|summary:\|^gpt:" "$OUT"/torchgpt.log \
        "$OUT"/kilngpt.log "$OUT"/gptcheck.log "$OUT"/traingpt.log | tee -a "$OUT/summary.txt"
      ;;
    graphstep)  # (issue 23) the captured step: bench rows with and without --graph, kiln train
      step gs_tests 200 $B/collective_test --gtest_filter='DataParallel.*:Collective.*'
      grep -hE "tests? ran|PASSED|FAILED \]" "$OUT/gs_tests.log" | tee -a "$OUT/summary.txt"
      step gs_bench_graph 300 env KILN_BENCH_HOST_TIMES=1 $B/bench_collective --only train \
        --model lenet,mlp_wide --batch 256 --steps 100 --warmup 10 --graph ${GS_TORCH:-}
      [ "${GS_EAGER:-1}" = 1 ] && step gs_bench_eager 200 $B/bench_collective --only train \
        --model lenet,mlp_wide --batch 256 --steps 100 --warmup 10 --no-torch
      for l in gs_bench_graph $([ "${GS_EAGER:-1}" = 1 ] && echo gs_bench_eager); do
        echo "== $l" | tee -a "$OUT/summary.txt"
        grep -E "^\| [a-z]|rank [0-9]|--graph" "$OUT/$l.log" | cut -c1-220 | tee -a "$OUT/summary.txt"
      done
      for m in lenet mlp_wide; do
        for g in ${GS_MODES:-"" "--graph"}; do
          n="gs_${m}${g:+_graph}"
          step "${n}_one" 90 $B/kiln train $m --device cuda:0 --batch 256 --epochs 3 $g --data data/mnist
          step "${n}_two" 90 $B/kiln train $m --devices cuda:0,cuda:1 --batch 256 --epochs 3 $g \
            --data data/mnist
          grep -h "runs eagerly\|^  $m " "$OUT/${n}_one.log" "$OUT/${n}_two.log" | sed "s/^/$n: /" |
            tee -a "$OUT/summary.txt"
        done
      done
      ;;
    diag)  # $DIAG: lines of environment settings; bench_collective's train rows under each
      printf '%s\n' "${DIAG:-KILN_NONE=1}" | grep . | while read -r envs; do
        step diag 240 env KILN_BENCH_HOST_TIMES=1 KILN_CUDA_ALLOC_STATS=1 $envs \
          $B/bench_collective --only train --model ${DIAG_MODELS:-lenet} --batch 256 --steps 100 \
          --warmup 10 --no-torch
        echo "== $envs" | tee -a "$OUT/summary.txt"
        grep -E "^\| [a-z]|rank [0-9]|alloc syncs" "$OUT/diag.log" | cut -c1-200 | tee -a "$OUT/summary.txt"
      done
      ;;
    python)
      step python_build 200 bash scripts/gpu_python_build.sh "$build"
      tail -n 3 "$OUT/python_build.log" | tee -a "$OUT/summary.txt"
      export PYTHONPATH=$PWD/$build/python
      python3 -c 'import sys,numpy,torch; print(sys.version.split()[0], numpy.__version__, torch.__version__)' \
        2>&1 | tee -a "$OUT/summary.txt"
      python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1 | tee -a "$OUT/summary.txt"
      # The query timed from Python and from C++ first, on an idle machine.
      step pyquery 200 python3 bench/python_query.py --device cuda:0 --runs 50 --breakdown
      step cppquery 200 $B/bench_query_python_peer --device cuda:0 --runs 50
      step cppquery_sync 200 env SYNC=1 $B/bench_query_python_peer --device cuda:0 --runs 50
      grep -h "^n " "$OUT/pyquery.log" "$OUT/cppquery.log" "$OUT/cppquery_sync.log" | tee -a "$OUT/summary.txt"
      # The suite's files in $PYTEST_SHARDS (default 4) concurrent pytest runs, round-robin
      # (one run of the whole suite did not finish in 300 s on the 2xH100 host), each with
      # its 10 slowest tests.
      shards=${PYTEST_SHARDS:-4}
      mapfile -t pyfiles < <(ls tests/python/test_*.py)
      for ((k = 0; k < shards; ++k)); do
        files=()
        for ((i = k; i < ${#pyfiles[@]}; i += shards)); do files+=("${pyfiles[i]}"); done
        step "pytest_$k" ${PYTEST_LIMIT:-480} python3 -m pytest -q -rsx -p no:cacheprovider \
          --durations=10 "${files[@]}" &
      done
      wait
      for ((k = 0; k < shards; ++k)); do
        grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest_$k.log" | tail -n 8 | tee -a "$OUT/summary.txt"
      done
      step tour 120 python3 examples/python/tour.py cuda:0
      step overhead 120 python3 examples/python/overhead.py cuda:0
      tail -n 8 "$OUT/tour.log" "$OUT/overhead.log" | tee -a "$OUT/summary.txt"
      ;;
    tests24)  # (issues 24, 25, 27) the changed GPU paths' tests, every device, 4 at a time
      export KILN_CONFORMANCE_REQUIRE=cuda,opencl
      if [ -f "$build/dnnl/libdnnl.so.2.6.xz" ]; then  # oneDNN for the CPU backend, carried xz'ed
        xz -dc "$build/dnnl/libdnnl.so.2.6.xz" > "$build/lib/libdnnl.so.2"
        export KILN_DNNL=1 KILN_DNNL_LIBRARY=$PWD/$build/lib/libdnnl.so.2
      fi
      f='*Linear*:*Conv*:*Pool*:*BatchNorm*:*Reduced*:*LayerNorm*:*Indexing*:*External*:*Fusion*'
      printf '%s\n' "tensor_test --gtest_filter=$f" optim_test nn_test "autograd_test" \
        "cpu_backend_test --gtest_filter=CpuDnn*" tool_train_test |
        xargs -P 4 -I{} sh -c 'n=$(echo {} | cut -d" " -f1); timeout -k 5 420 '"$B"'/{} \
          --gtest_brief=1 > '"$OUT"'/t24_$n.log 2>&1; echo "$n rc=$?"' | sort | tee -a "$OUT/summary.txt"
      grep -h "FAILED \]\|tests ran" "$OUT"/t24_*.log | sort -u | head -30 | tee -a "$OUT/summary.txt"
      ;;
    bench24)  # (issues 24, 25) this session's rows beside PyTorch: elementwise/norms, indexing, CPU
      if [ -f "$build/dnnl/libdnnl.so.2.6.xz" ]; then  # a fresh machine: oneDNN unpacked here too
        xz -dc "$build/dnnl/libdnnl.so.2.6.xz" > "$build/lib/libdnnl.so.2"
        export KILN_DNNL=1 KILN_DNNL_LIBRARY=$PWD/$build/lib/libdnnl.so.2
      fi
      $B/kiln info 2>&1 | grep -m1 -o "oneDNN [0-9.]*" | sed 's/^/cpu dnn: /' | tee -a "$OUT/summary.txt"
      step b24_ew 200 $B/bench_tensor --device cuda:0 --runs 20 --only elementwise --no-compile
      step b24_idx 120 $B/bench_indexing --device cuda:0 --runs 50
      step b24_idx_torch 120 python3 bench/torch_indexing.py --device cuda --runs 50
      step b24_cpu 200 $B/bench_tensor --device cuda:0 --runs 10 --only cpu
      KILN_DNNL_OPENMP=1 step b24_cpu_omp 200 $B/bench_tensor --device cuda:0 --runs 10 --only cpu \
        --no-torch
      grep -h "^| " "$OUT/b24_ew.log" "$OUT/b24_cpu.log" | tee -a "$OUT/summary.txt"
      grep -h "conv\|sgemm" "$OUT/b24_cpu_omp.log" | head -8 | sed 's/^/omp /' | tee -a "$OUT/summary.txt"
      grep -hv "^\s*$" "$OUT/b24_idx.log" "$OUT/b24_idx_torch.log" | tail -30 | tee -a "$OUT/summary.txt"
      ;;
    group)
      step group_kiln 300 $B/bench_group --device cuda:0 --runs ${GROUP_RUNS:-5} ${GROUP_ARGS:-}
      step group_torch 300 python3 bench/torch_group.py --runs ${GROUP_RUNS:-5} ${GROUP_ARGS:-}
      grep -hv "^\s*$" "$OUT/group_kiln.log" "$OUT/group_torch.log" | tail -30 | tee -a "$OUT/summary.txt"
      ;;
    gemm)
      step gemm_kiln 200 $B/bench_gemm --device cuda:0 --runs 20
      step gemm_torch 200 python3 bench/torch_gemm.py --runs 20 --csv "$OUT/torch_gemm.csv"
      grep -hE "gemm|gemv|device" "$OUT/gemm_kiln.log" "$OUT/gemm_torch.log" | tee -a "$OUT/summary.txt"
      ;;
    *) echo "unknown step $s" >&2 ;;
  esac
done
cat "$OUT/summary.txt"
cp "$OUT/summary.txt" "$final/" && tar czf "$final/logs.tgz" -C "$OUT" .
