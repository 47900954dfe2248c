#!/usr/bin/env bash
# kiln::query benchmarks on a GPU machine: Kiln vs Thrust/CUB vs PyTorch on the GPU, and Kiln's
# CPU device vs OpenMP and std::execution::par_unseq; one merged table and an SVG chart
# (scripts/bench_chart.py chart, when python3 has matplotlib).
#
# Build (on the build machine; the GPU machine needs the NVIDIA driver, NVRTC for Kiln's CUDA
# kernels, a C++ compiler for Kiln's CPU kernels, and PyTorch for its rows):
#   cmake -S . -B build-bq -G Ninja -DKILN_BUILD_BENCH=ON -DKILN_BUILD_TESTS=OFF \
#         -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc && ninja -C build-bq
# Run, from the repository root with the build folder carried along (its bin/ and lib/ are
# enough; lib/ holds libkiln, the CUDA plugin and, when TBB was found, libtbb.so.12):
#   scripts/gpu_bench_query.sh        # BUILD=folder (default: build-bq, else build-bench)
# Environment: SIZES (GPU, default 1M,16M,256M), CPU_SIZES (default 1M,16M,256M), HOST_SIZES
# (default 16M,256M), RUNS (default 20), STEP_TIMEOUT seconds per benchmark (default 240),
# PYTHON (default python3), SKIP="thrust torch cpu kiln-cpu opencl" to leave steps out.
# Writes the CSVs, logs, query_merged.csv, query_summary.md and benchmark_query.svg (when
# matplotlib could draw it) to $OUT
# when set (else in $BUILD/query-results). Exit status: 0 when every step ran and
# every result checked out, 1 otherwise.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
if [[ -z ${BUILD:-} ]]; then
  for b in build-bq build-bench; do
    if [[ -x $b/bin/bench_query ]]; then BUILD=$b; break; fi
  done
fi
BUILD=${BUILD:-build-bq}
SIZES=${SIZES:-1M,16M,256M}
CPU_SIZES=${CPU_SIZES:-1M,16M,256M}
HOST_SIZES=${HOST_SIZES:-16M,256M}
RUNS=${RUNS:-20}
STEP_TIMEOUT=${STEP_TIMEOUT:-240}
PYTHON=${PYTHON:-python3}
SKIP=" ${SKIP:-} "
work=$(mktemp -d /tmp/kiln-query-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0

if [[ ! -x $BUILD/bin/bench_query ]]; then
  echo "missing $BUILD/bin/bench_query: build first (see the top of $0)" >&2
  exit 1
fi

# Kiln's CUDA plugin dlopens NVRTC; where the toolkit is not in /usr/local/cuda or the
# loader's path, look for one (e.g. PyTorch's nvidia-* wheels) and add its folder.
find_nvrtc() {
  local d site
  local dirs=("${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib)
  for site in $("$PYTHON" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    dirs+=("$site"/nvidia/*/lib "$site"/nvidia/cu*/lib)
  done
  for d in "${dirs[@]}"; do
    if ls "$d"/libnvrtc.so.1[23]* >/dev/null 2>&1; then echo "$d"; return; fi
  done
}
if ! ldconfig -p 2>/dev/null | grep -q 'libnvrtc\.so\.1[23]'; then
  nvrtc_dir=$(find_nvrtc)
  if [[ -n $nvrtc_dir ]]; then
    export LD_LIBRARY_PATH="$nvrtc_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "NVRTC from $nvrtc_dir"
  fi
fi
KILN_PLUGIN_PATH="$(cd "$BUILD" && pwd)/lib"
export KILN_PLUGIN_PATH
export KILN_CACHE_DIR="$work/cache"  # cold cache; the warm-up runs pay the compiles

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"

# step NAME CMD...: runs CMD under the step timeout, logs to $work/NAME.log.
step() {
  local name=$1
  shift
  echo
  echo "== $name: $*"
  timeout "$STEP_TIMEOUT" "$@" 2>&1 | tee "$work/$name.log"
  local rc=${PIPESTATUS[0]}
  if [[ $rc -ne 0 ]]; then
    echo "$name failed (exit $rc$([[ $rc -eq 124 ]] && echo ", timed out after ${STEP_TIMEOUT}s"))" >&2
    status=1
  fi
}
skip() { [[ $SKIP == *" $1 "* ]]; }

common=(--runs "$RUNS" --host-sizes "$HOST_SIZES")
step bench_query_cuda "$BUILD/bin/bench_query" --device cuda --sizes "$SIZES" "${common[@]}" \
  --csv "$work/bench_query_cuda.csv"
if ! skip kiln-cpu; then
  step bench_query_cpu "$BUILD/bin/bench_query" --device cpu --sizes "$CPU_SIZES" "${common[@]}" \
    --csv "$work/bench_query_cpu.csv"
fi
# Kiln's OpenCL backend: the first OpenCL GPU and the first OpenCL CPU device (PoCL), their rows
# relabelled as peers of the native backend on the same hardware (impl kiln_opencl on cuda:0,
# kiln_pocl on cpu:0). Source scripts/gpu_env.sh first to register NVIDIA's OpenCL driver.
opencl_device() {  # TYPE (gpu|cpu): the id of the first OpenCL device of that type
  "$BUILD/bin/kiln" info 2>/dev/null |
    awk -v t="$1" '/^  opencl:[0-9]+ /{id=$1} /^    type /{if (id != "" && $2 == t",") {print id; exit} id=""}'
}
if ! skip opencl; then
  for kind in gpu cpu; do
    id=$(opencl_device $kind)
    if [[ -z $id ]]; then
      echo "no OpenCL $kind device: its rows are skipped" >&2
      continue
    fi
    sizes=$SIZES label=kiln_opencl as=cuda:0
    [[ $kind == cpu ]] && sizes=$CPU_SIZES label=kiln_pocl as=cpu:0
    step bench_query_opencl_$kind "$BUILD/bin/bench_query" --device "$id" --sizes "$sizes" \
      --runs "$RUNS" --host-sizes none --csv "$work/raw_opencl_$kind.csv"
    [[ -s $work/raw_opencl_$kind.csv ]] &&
      sed -E "s/^([^,]*),kiln,$id,/\1,$label,$as,/" "$work/raw_opencl_$kind.csv" \
        > "$work/bench_query_opencl_$kind.csv"
  done
fi
if ! skip thrust; then
  if [[ -x $BUILD/bin/bench_thrust_query ]]; then
    step bench_thrust_query "$BUILD/bin/bench_thrust_query" --sizes "$SIZES" "${common[@]}" \
      --csv "$work/bench_thrust_query.csv"
  else
    echo "no $BUILD/bin/bench_thrust_query (built only with nvcc): Thrust rows skipped" >&2
    status=1
  fi
fi
if ! skip torch; then
  if "$PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    step torch_query "$PYTHON" bench/torch_query.py --sizes "$SIZES" "${common[@]}" \
      --csv "$work/torch_query.csv"
  else
    echo "$PYTHON has no PyTorch with CUDA: PyTorch rows skipped" >&2
    status=1
  fi
fi
if ! skip cpu; then
  if [[ -x $BUILD/bin/bench_cpu_query_baselines ]]; then
    # OpenMP and TBB (par_unseq) in separate processes: their pools would spin against each other.
    for impl in omp par_unseq; do
      step bench_cpu_query_$impl "$BUILD/bin/bench_cpu_query_baselines" --impl $impl \
        --sizes "$CPU_SIZES" --runs "$RUNS" --csv "$work/bench_cpu_query_$impl.csv"
    done
  else
    echo "no $BUILD/bin/bench_cpu_query_baselines (needs OpenMP at build time): CPU peers skipped" >&2
  fi
fi

csvs=()
for f in bench_query_cuda bench_query_cpu bench_query_opencl_gpu bench_query_opencl_cpu bench_thrust_query torch_query bench_cpu_query_omp \
    bench_cpu_query_par_unseq; do
  [[ -s $work/$f.csv ]] && csvs+=("$work/$f.csv")
done
if [[ ${#csvs[@]} -gt 0 ]]; then
  python3 scripts/bench_chart.py merge "$work/query_merged.csv" "${csvs[@]}"
  python3 scripts/bench_chart.py table "$work/query_merged.csv" > "$work/query_summary.md"
  # The chart needs matplotlib, which the GPU machine may lack: its absence fails nothing (draw
  # it later from query_merged.csv: docs/benchmarks.md).
  python3 scripts/bench_chart.py chart "$work/query_merged.csv" -o "$work/benchmark_query.svg" ||
    echo "no chart drawn here: draw it from query_merged.csv with scripts/bench_chart.py chart" >&2
  # Any WRONG result fails the run; relerr= notes (float sums and scans) are information.
  if grep -q ',WRONG$' "$work/query_merged.csv"; then
    echo "WRONG results:" >&2
    grep ',WRONG$' "$work/query_merged.csv" >&2
    status=1
  fi
  echo
  echo "== kiln::query vs Thrust/CUB, PyTorch, OpenMP, par_unseq (ratios: GB/s over GB/s; >1 Kiln faster)"
  cat "$work/query_summary.md"
else
  echo "no results" >&2
  status=1
fi

dest=${OUT:-$BUILD/query-results}
mkdir -p "$dest"
cp "$work"/*.csv "$work"/*.log "$work"/*.md "$work"/*.svg "$dest"/ 2>/dev/null
echo "results copied to $dest"
exit $status
