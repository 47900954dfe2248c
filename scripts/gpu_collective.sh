#!/bin/bash
# On the 2-GPU machine (device tool, kind nvidia-h200-x2), from the repository root, with a build
# folder carried along (default build-run) and the MNIST digits in data/mnist:
#   bash scripts/gpu_collective.sh [build-folder]
# Runs the collectives' GPU tests, all-reduce beside torch.distributed, data-parallel training
# throughput (plain, 1 rank, all GPUs) and MNIST accuracy on all GPUs beside one; logs in $OUT.
build=${1:-build-run}
OUT=${OUT:-/tmp/kiln-collective}
mkdir -p "$OUT"
. scripts/gpu_env.sh "$build" >/dev/null
export KILN_OPENCL_LIBRARY=none KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kc}
# NCCL comes with PyTorch's wheels on the lent machines.
nccl=$(python3 -c 'import site,glob; print(next(iter(sorted(sum([glob.glob(s+"/nvidia/nccl/lib/libnccl.so*") for s in site.getsitepackages()],[]))),""))' 2>/dev/null)
[ -n "$nccl" ] && export KILN_NCCL_LIBRARY=$nccl
export LD_LIBRARY_PATH=$PWD/$build/lib:$LD_LIBRARY_PATH
B=$build/bin
gpus=$(nvidia-smi -L | wc -l)
devs=$(seq -s, -f 'cuda:%g' 0 $((gpus - 1)))
{ echo "nccl: ${nccl:-system}"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nvidia-smi topo -m; } > "$OUT/env.txt" 2>&1
t0=$(date +%s)
step() {
  local name=$1 limit=$2
  shift 2
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? at $(($(date +%s) - t0))s" | tee -a "$OUT/summary.txt"
}
step collective 90 $B/collective_test --gtest_filter='Collective.NcclInProcess:PeerCopy.*:DataParallel.Nccl*'
step allreduce 90 $B/bench_collective --only allreduce --iters 10 --warmup 3 --min-bytes 1024
step train_bench 90 $B/bench_collective --only train --steps 20 --no-torch
step train_all 60 $B/kiln train lenet --devices "$devs" --epochs 3 --data data/mnist
step train_one 40 $B/kiln train lenet --device cuda:0 --epochs 3 --data data/mnist
grep -E "OK \]|FAILED|Skipped|Failure" "$OUT/collective.log" | head -12
grep -E "^\|" "$OUT/allreduce.log" | tail -14
grep -E "^\||speed-up|plain" "$OUT/train_bench.log"
tail -3 "$OUT/train_all.log"
tail -3 "$OUT/train_one.log"
