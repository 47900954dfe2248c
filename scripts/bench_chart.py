#!/usr/bin/env python3
"""bench_chart.py: the kiln::query benchmark CSVs (bench/bench_args.hpp columns), joined.

  scripts/bench_chart.py merge OUT.csv IN.csv...     concatenate the CSVs under one header
  scripts/bench_chart.py table MERGED.csv            short markdown table with ratios
  scripts/bench_chart.py svg MERGED.csv -o FILE.svg  grouped bar chart (GB/s), hand-written SVG

No dependencies beyond python3. Ratios are GB/s over GB/s of the same case and size (above 1:
Kiln is faster). Kiln's query rows are wall-clock (the whole call, synchronised); the Thrust,
CUB and PyTorch rows are event-timed, so the table also gives Kiln against their wall-clock
medians ("wall").
"""
import argparse
import csv
import html
import sys

HEADER = ["name", "impl", "device", "n", "median_ms", "gbs", "pct_copy", "launches", "wall_ms",
          "timer", "check"]
CASES = ["map", "filter", "map_filter_map", "sum", "inclusive_scan", "host_map_filter_map"]
# Kiln's OpenCL backend on the same GPU (NVIDIA's driver) and on the same CPU (PoCL) is listed
# as a peer of Kiln's native backend: gpu_bench_query.sh relabels its rows.
GPU_PEERS = [("kiln_opencl", "Kiln OpenCL"), ("thrust", "Thrust"), ("cub_fused", "CUB fused"),
             ("torch", "PyTorch")]
CPU_PEERS = [("kiln_pocl", "Kiln PoCL"), ("omp", "OpenMP"), ("par_unseq", "par_unseq")]
COLORS = {"kiln": "#d9480f", "kiln_opencl": "#f59f00", "kiln_pocl": "#f59f00",
          "thrust": "#1c7ed6", "cub_fused": "#74c0fc", "torch": "#7048e8",
          "omp": "#2b8a3e", "par_unseq": "#8ce99a"}
LABELS = dict(GPU_PEERS + CPU_PEERS + [("kiln", "Kiln")])


def size_label(n):
    for shift, suffix in ((30, "G"), (20, "M"), (10, "K")):
        if n >= (1 << shift) and n % (1 << shift) == 0:
            return f"{n >> shift}{suffix}"
    return str(n)


def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def load(path):
    rows = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            r["n"] = int(r["n"])
            for k in ("median_ms", "gbs", "pct_copy", "wall_ms"):
                r[k] = num(r.get(k))
            rows.append(r)
    return rows


def merge(out, inputs):
    with open(out, "w") as o:
        o.write(",".join(HEADER) + "\n")
        for p in inputs:
            try:
                with open(p) as f:
                    lines = f.read().splitlines()
            except OSError as e:
                print(f"bench_chart: skipping {p}: {e}", file=sys.stderr)
                continue
            if not lines or lines[0].split(",") != HEADER:
                print(f"bench_chart: skipping {p}: not a query benchmark CSV", file=sys.stderr)
                continue
            for line in lines[1:]:
                if line.strip():
                    o.write(line + "\n")


def index(rows):
    return {(r["device"], r["name"], r["n"], r["impl"]): r for r in rows}


def fmt(v, spec="%.1f"):
    return "—" if v is None else spec % v


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


def table(rows, out=sys.stdout):
    idx = index(rows)
    devices = sorted({r["device"] for r in rows}, key=lambda d: (not d.startswith("cuda"), d))
    for dev in devices:
        gpu = dev.startswith("cuda")
        peers = GPU_PEERS if gpu else CPU_PEERS
        keys = sorted({(r["name"], r["n"]) for r in rows
                       if r["device"] == dev and r["name"] in CASES},
                      key=lambda k: (CASES.index(k[0]), k[1]))
        cols = ["case", "n", "Kiln ms", "Kiln GB/s", "%copy", "launches"]
        for impl, label in peers:
            cols += [f"{label} GB/s", f"Kiln/{label}"]
        out.write(f"\n### {dev}\n\n| " + " | ".join(cols) + " |\n")
        out.write("|" + " --- |" * len(cols) + "\n")
        for name, n in keys:
            k = idx.get((dev, name, n, "kiln"))
            kg = k["gbs"] if k else None
            cells = [name, size_label(n), fmt(k and k["median_ms"], "%.3f"), fmt(kg),
                     fmt(k and k["pct_copy"]) + ("%" if k and k["pct_copy"] is not None else ""),
                     (k["launches"] if k else "—")]
            bad = [] if not k or k["check"].startswith("ok") else [f"Kiln {k['check']}"]
            for impl, label in peers:
                p = idx.get((dev, name, n, impl))
                pg = p["gbs"] if p else None
                r = ratio(kg, pg)
                cell = fmt(r, "%.2f")
                if r is not None and p.get("timer") == "event" and k and p["wall_ms"] and \
                        k["wall_ms"]:
                    cell += f" (wall {p['wall_ms'] / k['wall_ms']:.2f})"
                cells += [fmt(pg), cell]
                if p and not p["check"].startswith("ok"):
                    bad.append(f"{label} {p['check']}")
            out.write("| " + " | ".join(str(c) for c in cells) + " |" +
                      (f" {'; '.join(bad)}" if bad else "") + "\n")
        roofs = [r for r in rows if r["device"] == dev and r["name"] == "copy_roof"]
        if roofs:
            out.write("\ncopy roof (1 GiB, read + written): " + ", ".join(
                f"{LABELS.get(r['impl'], r['impl'])} {fmt(r['gbs'], '%.0f')} GB/s"
                for r in roofs) + "\n")


def svg(rows, path, title):
    """One panel per (device, size): grouped bars of GB/s per case, a line at the copy roof."""
    idx = index(rows)
    panels = []
    for dev in sorted({r["device"] for r in rows}, key=lambda d: (not d.startswith("cuda"), d)):
        impls = ["kiln"] + [i for i, _ in (GPU_PEERS if dev.startswith("cuda") else CPU_PEERS)]
        impls = [i for i in impls if any(r["device"] == dev and r["impl"] == i for r in rows)]
        for n in sorted({r["n"] for r in rows if r["device"] == dev and r["name"] in CASES}):
            cases = [c for c in CASES if any((dev, c, n, i) in idx for i in impls)]
            if cases:
                panels.append((dev, n, cases, impls))
    W, PH, TOP, LEFT, RIGHT = 960, 250, 70, 70, 20
    H = TOP + PH * len(panels) + 30
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
         f'viewBox="0 0 {W} {H}" font-family="Helvetica, Arial, sans-serif" font-size="11">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="16" font-weight="bold">'
         f'{html.escape(title)}</text>',
         f'<text x="{W / 2}" y="40" text-anchor="middle" fill="#555">GB/s = (input + output '
         f'bytes) / median time; dashed line: device-to-device copy (1 GiB); higher is better'
         f'</text>']
    all_impls = []
    for _, _, _, impls in panels:
        all_impls += [i for i in impls if i not in all_impls]
    x = LEFT
    for i in all_impls:
        o.append(f'<rect x="{x}" y="50" width="12" height="12" fill="{COLORS.get(i, "#888")}"/>')
        o.append(f'<text x="{x + 16}" y="60">{html.escape(LABELS.get(i, i))}</text>')
        x += 24 + 7 * len(LABELS.get(i, i))
    for p, (dev, n, cases, impls) in enumerate(panels):
        y0 = TOP + p * PH + 20
        ph = PH - 70
        roof = next((r["gbs"] for r in rows if r["device"] == dev and r["name"] == "copy_roof"
                     and r["impl"] == "kiln"), None) or \
            next((r["gbs"] for r in rows if r["device"] == dev and r["name"] == "copy_roof"),
                 None)
        vals = [idx[(dev, c, n, i)]["gbs"] or 0 for c in cases for i in impls
                if (dev, c, n, i) in idx]
        top = max(vals + [roof or 0, 1e-9]) * 1.15
        step = nice_step(top / 5)
        o.append(f'<text x="{LEFT}" y="{y0 - 6}" font-size="13" font-weight="bold">'
                 f'{html.escape(dev)}, n = {size_label(n)} floats</text>')
        v = 0.0
        while v <= top:
            yy = y0 + ph - ph * v / top
            o.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{W - RIGHT}" y2="{yy:.1f}" '
                     f'stroke="#e9ecef"/>')
            o.append(f'<text x="{LEFT - 6}" y="{yy + 4:.1f}" text-anchor="end" fill="#555">'
                     f'{v:g}</text>')
            v += step
        o.append(f'<line x1="{LEFT}" y1="{y0 + ph}" x2="{W - RIGHT}" y2="{y0 + ph}" '
                 f'stroke="#333"/>')
        gw = (W - LEFT - RIGHT) / len(cases)
        bw = min(34.0, (gw - 16) / max(1, len(impls)))
        for ci, c in enumerate(cases):
            gx = LEFT + ci * gw + (gw - bw * len(impls)) / 2
            for ii, i in enumerate(impls):
                r = idx.get((dev, c, n, i))
                if not r or r["gbs"] is None:
                    continue
                h = ph * r["gbs"] / top
                bx = gx + ii * bw
                by = y0 + ph - h
                tip = (f'{LABELS.get(i, i)} {c} n={size_label(n)}: {r["gbs"]:.1f} GB/s, '
                       f'{r["median_ms"]:.4f} ms')
                o.append(f'<rect x="{bx:.1f}" y="{by:.1f}" width="{bw - 2:.1f}" '
                         f'height="{h:.1f}" fill="{COLORS.get(i, "#888")}">'
                         f'<title>{html.escape(tip)}</title></rect>')
                o.append(f'<text x="{bx + (bw - 2) / 2:.1f}" y="{by - 3:.1f}" '
                         f'text-anchor="middle" font-size="9">{r["gbs"]:.0f}</text>')
            o.append(f'<text x="{LEFT + ci * gw + gw / 2:.1f}" y="{y0 + ph + 16}" '
                     f'text-anchor="middle">{html.escape(c)}</text>')
        if roof:
            yy = y0 + ph - ph * roof / top
            o.append(f'<line x1="{LEFT}" y1="{yy:.1f}" x2="{W - RIGHT}" y2="{yy:.1f}" '
                     f'stroke="#c92a2a" stroke-dasharray="6 4"/>')
            o.append(f'<text x="{W - RIGHT}" y="{yy - 4:.1f}" text-anchor="end" fill="#c92a2a">'
                     f'copy {roof:.0f} GB/s</text>')
    o.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def nice_step(raw):
    mag = 10 ** int(f"{raw:e}".split("e")[1])
    for m in (1, 2, 2.5, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge")
    m.add_argument("out")
    m.add_argument("inputs", nargs="+")
    t = sub.add_parser("table")
    t.add_argument("csv")
    s = sub.add_parser("svg")
    s.add_argument("csv")
    s.add_argument("-o", "--output", default="docs/benchmark_query.svg")
    s.add_argument("--title", default="kiln::query vs Thrust/CUB, PyTorch, OpenMP, par_unseq")
    a = p.parse_args()
    if a.cmd == "merge":
        merge(a.out, a.inputs)
    elif a.cmd == "table":
        table(load(a.csv))
    else:
        svg(load(a.csv), a.output, a.title)
    return 0


if __name__ == "__main__":
    sys.exit(main())
