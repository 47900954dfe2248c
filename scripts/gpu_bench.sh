#!/usr/bin/env bash
# Kiln foundation benchmarks on a GPU machine: Kiln vs raw CUDA driver vs Thrust, one table.
#
# Build (on the build machine; the GPU machine needs only the NVIDIA driver, plus a C++
# compiler for the CPU rows and NVRTC for Kiln's CUDA kernels):
#   cmake -S . -B build-bench -G Ninja -DKILN_BUILD_BENCH=ON -DKILN_BUILD_TESTS=OFF \
#         -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc && ninja -C build-bench
# Run, from the repository root with the build-bench folder carried along:
#   scripts/gpu_bench.sh            # BUILD=other-folder to use another build folder
# Writes bench_foundation.csv, bench_thrust_vector_add.csv, the logs and summary.md to $OUT
# when set. Exit status: 0 when both benchmarks ran and every target passed, 1 otherwise.
#
# Targets: Kiln empty-kernel launch within 1 us of raw cuLaunchKernel (async and with sync);
# Kiln vector add of 256M floats >= 90% of Thrust's bandwidth; disk-cache hit in a fresh
# process <= 2 ms; in-memory cache hit <= 5 us (both on every device); pooled 1 MB
# allocate + free on the GPU <= 5 us.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build-bench}
work=$(mktemp -d /tmp/kiln-gpu-bench-XXXXXX)
trap 'rm -rf "$work"' EXIT
status=0

for bin in bench_foundation bench_thrust_vector_add; do
  if [[ ! -x $BUILD/bin/$bin ]]; then
    echo "missing $BUILD/bin/$bin: build first (see the top of $0)" >&2
    exit 1
  fi
done

# Kiln's CUDA plugin dlopens NVRTC; where the toolkit is not in /usr/local/cuda or the
# loader's path, look for one (e.g. PyTorch's nvidia-* wheels) and add its folder.
find_nvrtc() {
  local d site
  local dirs=("${CUDA_PATH:-/usr/local/cuda}/lib64" /usr/local/cuda*/lib64 /usr/local/cuda*/targets/*/lib)
  for site in $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
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

command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$BUILD/bin/kiln" info 2>/dev/null | head -20 || true

echo "== bench_foundation"
"$BUILD/bin/bench_foundation" --csv "$work/bench_foundation.csv" 2>&1 | tee "$work/bench_foundation.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "bench_foundation failed" >&2; status=1; }
echo "== bench_thrust_vector_add"
"$BUILD/bin/bench_thrust_vector_add" --csv "$work/bench_thrust_vector_add.csv" 2>&1 | tee "$work/bench_thrust_vector_add.log"
[[ ${PIPESTATUS[0]} -eq 0 ]] || { echo "bench_thrust_vector_add failed" >&2; status=1; }

# One table from both CSVs (device,metric,impl,value,unit). Missing figures print as "—" and a
# target that cannot be judged counts as a failure.
touch "$work/bench_foundation.csv" "$work/bench_thrust_vector_add.csv"
awk -F, '
  FNR == 1 { next }
  { v[$1 "|" $2 "|" $3] = $4; dev[$1] = 1 }
  function has(d, m, i) { return (d "|" m "|" i) in v }
  function get(d, m, i) { return v[d "|" m "|" i] }
  function f(x) { return x >= 100 ? sprintf("%.0f", x) : x >= 10 ? sprintf("%.1f", x) : x >= 1 ? sprintf("%.2f", x) : sprintf("%.3f", x) }
  function out(what, kiln, base, rel, target, ok) {
    printf "| %s | %s | %s | %s | %s | %s |\n", what, kiln, base, rel, target, ok
    if (ok == "FAIL") fails++; else if (ok == "PASS") passes++
  }
  function verdict(known, good) { return !known ? "FAIL" : good ? "PASS" : "FAIL" }
  # A Kiln figure against an absolute ceiling.
  function ceiling(d, m, what, unit, limit,   k) {
    k = has(d, m, "kiln")
    out(d " " what, k ? f(get(d, m, "kiln")) " " unit : "—", "—", "—", "<= " limit " " unit,
        verdict(k, get(d, m, "kiln") <= limit))
  }
  # A Kiln figure for information, with a baseline when the CSV has one of impl `bi`.
  function info(d, m, what, unit, bi, label,   b) {
    if (!has(d, m, "kiln")) return
    b = bi != "" && has(d, m, bi)
    out(d " " what, f(get(d, m, "kiln")) " " unit, b ? f(get(d, m, bi)) " " unit " (" label ")" : "—",
        b && get(d, m, bi) > 0 ? sprintf("%.2fx", get(d, m, "kiln") / get(d, m, bi)) : "—", "—", "info")
  }
  END {
    print "| what | kiln | baseline | relative | target | result |"
    print "| --- | --- | --- | --- | --- | --- |"
    g = "cuda:0"
    if (!(g in dev)) out(g " (no rows: see the logs above)", "—", "—", "—", "all GPU targets", "FAIL")
    else {
      split("launch_async_us launch_sync_us", lm, " ")
      lw["launch_async_us"] = "empty kernel launch, async back to back"
      lw["launch_sync_us"] = "empty kernel launch + sync"
      for (i = 1; i <= 2; i++) {
        m = lm[i]; k = has(g, m, "kiln"); r = has(g, m, "cuda_driver")
        diff = get(g, m, "kiln") - get(g, m, "cuda_driver")
        out(g " " lw[m], k ? f(get(g, m, "kiln")) " us" : "—",
            r ? f(get(g, m, "cuda_driver")) " us (raw cuLaunchKernel)" : "—",
            k && r ? sprintf("%+.2f us", diff) : "—", "<= raw + 1 us", verdict(k && r, diff <= 1.0))
      }
      kc = get(g, "copy_1GiB_gbs", "kiln"); tc = get(g, "copy_1GiB_gbs", "cuda_runtime")
      out(g " device copy 1 GiB (read + written)",
          has(g, "copy_1GiB_gbs", "kiln") ? f(kc) " GB/s (queue::copy)" : "—",
          tc ? f(tc) " GB/s (cudaMemcpy D2D)" : "—", kc && tc ? sprintf("%.1f%%", 100 * kc / tc) : "—",
          "—", "info")
      split("1M 256M", sizes, " ")
      for (i = 1; i <= 2; i++) {
        m = "vector_add_" sizes[i] "_gbs"; k = has(g, m, "kiln"); t = has(g, m, "thrust")
        kv = get(g, m, "kiln"); tv = get(g, m, "thrust")
        kt = k ? f(kv) " GB/s" (kc ? sprintf(" (%.1f%% of copy)", 100 * kv / kc) : "") : "—"
        tt = t ? f(tv) " GB/s Thrust" (tc ? sprintf(" (%.1f%% of copy)", 100 * tv / tc) : "") : "—"
        rel = k && t ? sprintf("%.1f%% of Thrust", 100 * kv / tv) : "—"
        if (sizes[i] == "256M") out(g " vector add " sizes[i] " floats", kt, tt, rel, ">= 90% of Thrust", verdict(k && t, kv >= 0.9 * tv))
        else out(g " vector add " sizes[i] " floats", kt, tt, rel, "—", "info")
      }
      m = "alloc_1MB_us"; k = has(g, m, "kiln"); r = has(g, m, "cuda_driver")
      out(g " 1 MB buffer allocate + free (pooled)", k ? f(get(g, m, "kiln")) " us" : "—",
          r ? f(get(g, m, "cuda_driver")) " us (cuMemAlloc + cuMemFree)" : "—",
          k && r ? sprintf("%.2fx", get(g, m, "kiln") / get(g, m, "cuda_driver")) : "—",
          "<= 5 us", verdict(k, get(g, m, "kiln") <= 5))
    }
    for (d in dev) if (d != g) others = others " " d
    n = split(g others, devs, " ")
    for (j = 1; j <= n; j++) {
      d = devs[j]
      if (!(d in dev)) continue
      info(d, "compile_cold_first_ms", "compile, cold, first in process", "ms")
      info(d, "compile_cold_ms", "compile, cold (median of 5)", "ms")
      ceiling(d, "compile_memory_hit_us", "compile, in-memory hit", "us", 5)
      ceiling(d, "compile_disk_hit_ms", "compile + get_kernel, disk hit, fresh process", "ms", 2)
      info(d, "compile_disk_hit_later_ms", "compile + get_kernel, disk hit, 2nd in that process", "ms")
      if (d == g) continue
      info(d, "launch_async_us", "empty kernel launch, async back to back", "us")
      info(d, "launch_sync_us", "empty kernel launch + sync", "us")
      info(d, "copy_1GiB_gbs", "device copy 1 GiB (read + written)", "GB/s")
      info(d, "vector_add_1M_gbs", "vector add 1M floats", "GB/s")
      info(d, "vector_add_256M_gbs", "vector add 256M floats", "GB/s")
      info(d, "alloc_1MB_us", "1 MB buffer allocate + free", "us", "libc", "aligned_alloc + free")
    }
    printf "\ntargets: %d pass, %d fail\n", passes, fails
    exit (fails > 0 ? 1 : 0)
  }' "$work/bench_foundation.csv" "$work/bench_thrust_vector_add.csv" > "$work/summary.md" || status=1
echo
echo "== Kiln vs raw CUDA vs Thrust"
cat "$work/summary.md"

if [[ -n ${OUT:-} ]]; then
  mkdir -p "$OUT"
  cp "$work"/*.csv "$work"/*.log "$work/summary.md" "$OUT"/
  echo "results copied to $OUT"
fi
exit $status
