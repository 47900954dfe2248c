#!/usr/bin/env python3
"""bench_chart.py: the kiln::query benchmark CSVs (bench/bench_args.hpp columns), joined.

  scripts/bench_chart.py merge OUT.csv IN.csv...     concatenate the CSVs under one header
  scripts/bench_chart.py table MERGED.csv            short markdown table with ratios
  scripts/bench_chart.py chart MERGED.csv -o FILE.svg|FILE.png
                                                     grouped bar chart (GB/s), one panel per
                                                     device and size

merge and table need python3 alone; chart needs matplotlib (Debian: python3-matplotlib), which
it loads only when asked to draw. Ratios are GB/s over GB/s of the same case and size (above 1:
Kiln is faster). Kiln's query rows are wall-clock (the whole call, synchronised); the Thrust,
CUB and PyTorch rows are event-timed, so the table also gives Kiln against their wall-clock
medians ("wall").
"""
import argparse
import csv
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


def panels_of(rows):
    """(device, n, cases, impls) per panel: one per device and size, GPUs first."""
    idx = index(rows)
    panels = []
    for dev in sorted({r["device"] for r in rows}, key=lambda d: (not d.startswith("cuda"), d)):
        impls = ["kiln"] + [i for i, _ in (GPU_PEERS if dev.startswith("cuda") else CPU_PEERS)]
        impls = [i for i in impls if any(r["device"] == dev and r["impl"] == i for r in rows)]
        for n in sorted({r["n"] for r in rows if r["device"] == dev and r["name"] in CASES}):
            cases = [c for c in CASES if any((dev, c, n, i) in idx for i in impls)]
            if cases:
                panels.append((dev, n, cases, impls))
    return panels


def copy_roof(rows, dev):
    """The device's 1 GiB copy (Kiln's row first), or None."""
    roofs = [r for r in rows if r["device"] == dev and r["name"] == "copy_roof" and r["gbs"]]
    roofs.sort(key=lambda r: r["impl"] != "kiln")
    return roofs[0]["gbs"] if roofs else None


def chart(rows, path, title, fmt=None):
    """One panel per (device, size): grouped bars of GB/s per case, a dashed line at the copy
    roof. SVG or PNG (from the file name, or fmt), through matplotlib's Agg backend."""
    try:
        import matplotlib
    except ImportError:
        sys.exit(f"bench_chart.py chart needs matplotlib, which {sys.executable} cannot import: "
                 "apt-get install python3-matplotlib (Debian's /usr/bin/python3), or pip install "
                 "matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = panels_of(rows)
    if not panels:
        sys.exit(f"bench_chart.py chart: no {', '.join(CASES)} rows to draw")
    idx = index(rows)
    # Reproducible files: no date, fixed element ids, text kept as text in SVGs.
    plt.rcParams.update({"svg.hashsalt": "kiln-bench-chart", "svg.fonttype": "none",
                         "font.size": 9, "font.family": "sans-serif"})
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 2.7 * len(panels) + 1.0),
                             squeeze=False)
    legend = {}
    for ax, (dev, n, cases, impls) in zip(axes[:, 0], panels):
        width = 0.84 / len(impls)
        top = 0.0
        for k, impl in enumerate(impls):
            xs, ys = [], []
            for ci, case in enumerate(cases):
                r = idx.get((dev, case, n, impl))
                if r and r["gbs"] is not None:
                    xs.append(ci - 0.42 + width * (k + 0.5))
                    ys.append(r["gbs"])
            if not xs:
                continue
            bars = ax.bar(xs, ys, width * 0.92, color=COLORS.get(impl, "#888"),
                          label=LABELS.get(impl, impl))
            ax.bar_label(bars, fmt="%.0f", fontsize=6.5, padding=1.5)
            legend.setdefault(LABELS.get(impl, impl), bars)
            top = max(top, max(ys))
        roof = copy_roof(rows, dev)
        if roof:
            ax.axhline(roof, color="#c92a2a", linestyle="--", linewidth=1)
            top = max(top, roof)
        ax.set_ylim(0, top * 1.18 or 1)
        ax.set_xlim(-0.5, len(cases) - 0.5)
        ax.set_xticks(range(len(cases)), cases)
        ax.set_ylabel("GB/s")
        ax.set_title(f"{dev}, n = {size_label(n)} floats", loc="left", fontweight="bold",
                     fontsize=10)
        if roof:
            ax.set_title(f"dashed: copy {roof:.0f} GB/s", loc="right", color="#c92a2a",
                         fontsize=8.5)
        ax.grid(axis="y", color="#e9ecef")
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    inch = 1 / fig.get_figheight()  # figure coordinates from the top, in inches
    fig.suptitle(title, y=1 - 0.12 * inch, va="top", fontsize=13, fontweight="bold")
    fig.text(0.5, 1 - 0.42 * inch, "GB/s = (input + output bytes) / median time; dashed line: "
             "device-to-device copy (1 GiB); higher is better", ha="center", va="top",
             color="#555")
    fig.legend(legend.values(), legend.keys(), loc="upper center", ncol=len(legend),
               frameon=False, bbox_to_anchor=(0.5, 1 - 0.62 * inch))
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.85 * inch))
    fig.savefig(path, format=fmt, dpi=110, metadata={"Date": None} if
                (fmt or path.rsplit(".", 1)[-1]).lower() == "svg" else None)
    plt.close(fig)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("merge")
    m.add_argument("out")
    m.add_argument("inputs", nargs="+")
    t = sub.add_parser("table")
    t.add_argument("csv")
    c = sub.add_parser("chart", help="SVG or PNG chart (matplotlib)")
    c.add_argument("csv")
    c.add_argument("-o", "--output", default="docs/benchmark_query.svg",
                   help="the file; its extension (.svg, .png) picks the format")
    c.add_argument("--format", choices=["svg", "png"], help="override the extension")
    c.add_argument("--title", default="kiln::query vs Thrust/CUB, PyTorch, OpenMP, par_unseq")
    a = p.parse_args()
    if a.cmd == "merge":
        merge(a.out, a.inputs)
    elif a.cmd == "table":
        table(load(a.csv))
    else:
        fmt = a.format or a.output.rsplit(".", 1)[-1].lower()
        if fmt not in ("svg", "png"):
            p.error(f"chart: {a.output}: name a .svg or .png file, or pass --format")
        chart(load(a.csv), a.output, a.title, fmt)
    return 0


if __name__ == "__main__":
    sys.exit(main())
