#!/usr/bin/env bash
# Same-run before/after of kiln::query on a GPU machine: bench_query from two build folders
# (BEFORE: an older commit's build, AFTER: this one's), run in alternating rounds so that clock
# and thermal drift fall on both, then one table of the median over rounds of each median.
#
#   BEFORE=.carry/before AFTER=build-gpu scripts/gpu_before_after.sh
# Environment: DEVICES (default "cuda"; add an OpenCL id such as opencl:0 after sourcing
# scripts/gpu_env.sh), SIZES (default 16M,256M), ROUNDS (default 3), RUNS (default 20).
# Writes before_after.csv and before_after.md to $OUT when set (else the current folder).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BEFORE=${BEFORE:-.carry/before}
AFTER=${AFTER:-build-gpu}
DEVICES=${DEVICES:-cuda}
SIZES=${SIZES:-16M,256M}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-20}
dest=${OUT:-.}
work=$(mktemp -d /tmp/kiln-before-after-XXXXXX)
trap 'rm -rf "$work"' EXIT

for side in BEFORE AFTER; do
  dir=${!side}
  [[ -x $dir/bin/bench_query ]] || { echo "no $dir/bin/bench_query ($side)" >&2; exit 1; }
done

status=0
for round in $(seq 1 "$ROUNDS"); do
  for side in BEFORE AFTER; do
    dir=$(cd "${!side}" && pwd)
    for dev in $DEVICES; do
      # Each side loads its own plugins and keeps its own kernel cache.
      KILN_PLUGIN_PATH=$dir/lib KILN_CACHE_DIR=$work/cache-$side \
        "$dir/bin/bench_query" --device "$dev" --sizes "$SIZES" --host-sizes none --runs "$RUNS" \
        --csv "$work/$side-$round-${dev//:/_}.csv" > "$work/$side-$round-${dev//:/_}.log" 2>&1 ||
        { echo "$side round $round on $dev failed:" >&2; tail -5 "$work/$side-$round-${dev//:/_}.log" >&2; status=1; }
    done
  done
done

# name,impl,device,n,median_ms,gbs,... -> one row per (device, case, n): medians over rounds.
python3 - "$work" "$dest" <<'EOF'
import csv, glob, os, statistics, sys
work, dest = sys.argv[1], sys.argv[2]
data = {}
for path in glob.glob(os.path.join(work, "*.csv")):
    side = os.path.basename(path).split("-")[0]
    for r in csv.DictReader(open(path)):
        if r["impl"] != "kiln" or r["median_ms"] in ("", "NA"):
            continue
        key = (r["device"], r["name"], int(r["n"]))
        data.setdefault(key, {}).setdefault(side, []).append(
            (float(r["median_ms"]), r["gbs"], r["launches"], r["check"]))
rows = []
for key in sorted(data):
    d = data[key]
    if "BEFORE" not in d or "AFTER" not in d:
        continue
    b = statistics.median(x[0] for x in d["BEFORE"])
    a = statistics.median(x[0] for x in d["AFTER"])
    checks = {x[3] for x in d["BEFORE"] + d["AFTER"]} - {"", "ok"}
    rows.append((*key, b, a, b / a, d["AFTER"][0][2], ",".join(sorted(checks)) or "ok"))
with open(os.path.join(dest, "before_after.csv"), "w") as f:
    w = csv.writer(f)
    w.writerow(["device", "case", "n", "before_ms", "after_ms", "speedup", "launches", "check"])
    w.writerows(rows)
lines = ["| device | case | n | before ms | after ms | after/before speed | launches | check |",
         "| --- | --- | --- | --- | --- | --- | --- | --- |"]
for dev, name, n, b, a, s, l, c in rows:
    lines.append(f"| {dev} | {name} | {n >> 20}M | {b:.4f} | {a:.4f} | {s:.3f}x | {l} | {c} |")
open(os.path.join(dest, "before_after.md"), "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
exit $status
